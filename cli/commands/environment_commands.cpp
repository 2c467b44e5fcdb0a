// kiln envs: what each environment should run against what its nodes run, and where each
// rollout is; kiln artifact upload: a file into the coordinator's artifact store by digest
// (firmware packages for rollouts, files for jobs).
#include <filesystem>
#include <iostream>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "common/protocol/json.h"
#include "cli/cli_options.h"
#include "cli/commands/all.h"
#include "cli/exit_codes.h"
#include "qualification/shell/artifact_upload.h"

namespace kiln::cli {
namespace {

namespace fs = std::filesystem;

// What a node runs, and what it should run when that differs: "1.0.0 -> 2.0.0".
std::string actual_and_desired(const std::string& actual, const std::string& desired) {
  const std::string runs = actual.empty() ? "?" : actual;
  if (desired.empty() || desired == actual) return actual.empty() ? "-" : runs;
  return runs + " -> " + desired;
}

void print_environments(const protocol::EnvironmentList& list) {
  if (list.repository.empty()) {
    std::cout << "the coordinator watches no environments repository; set [environments] repo in coordinator.toml "
                 "(docs/releases.md, \"Convergence\")\n";
    return;
  }
  std::cout << fmt::format("{} at {}\n", list.repository, list.commit.empty() ? "(not read yet)" : list.commit.substr(0, 12));
  if (!list.problem.empty()) std::cout << "problem: " << list.problem << "\n";
  for (const auto& env : list.environments) {
    std::cout << fmt::format("\n{}: bundle {}, rollout {}{}\n", env.name,
                             env.bundle_id.empty() ? "none" : env.bundle_id.substr(0, 12), env.rollout,
                             env.detail.empty() ? "" : " (" + env.detail + ")");
    if (env.nodes.empty()) {
      std::cout << "  no nodes belong to it\n";
      continue;
    }
    std::cout << fmt::format("  {:<12} {:<12} {:<24} {:<28} {}\n", "NODE", "STATE", "FIRMWARE", "DRIVER", "DETAIL");
    for (const auto& node : env.nodes) {
      std::cout << fmt::format("  {:<12} {:<12} {:<24} {:<28} {}\n", node.node_id, node.state,
                               actual_and_desired(node.actual_firmware, node.desired_firmware),
                               actual_and_desired(node.actual_driver, node.desired_driver), node.detail);
    }
  }
}

class EnvsCommand : public RemoteCommand {
 public:
  std::string name() const override { return "envs"; }
  std::string help() const override {
    return "each environment's bundle against what its nodes run (firmware), and where its rollout is";
  }
  void add_options(CLI::App&) override {}
  int run_with(Client& client, CommandContext& context) override {
    auto r = expect_reply<protocol::EnvironmentList>(client.request(protocol::ListEnvironments{}));
    if (!r) return report(r.error());
    if (context.json()) {
      std::cout << protocol::to_json(*r).dump(2) << "\n";
      return kExitOk;
    }
    print_environments(*r);
    bool drift = false;
    for (const auto& env : r->environments) drift = drift || (env.rollout != "converged" && env.rollout != "idle");
    return drift ? kExitFailed : kExitOk;
  }
};

class ArtifactUploadCommand : public RemoteCommand {
 public:
  std::string name() const override { return "upload"; }
  std::string help() const override {
    return "store a file in the coordinator by its SHA-256 (a firmware package a rollout installs, a file for jobs)";
  }
  void add_options(CLI::App& command) override {
    command.add_option("FILE", file_, "the file")->required();
    command.add_option("--name", name_, "the name jobs use for it; default: the file's name");
  }
  Status check_arguments() override {
    std::error_code ec;
    if (!fs::is_regular_file(file_, ec)) {
      return fail(Errc::invalid_argument, fmt::format("{} is not a file; name the file to upload", file_));
    }
    if (name_.empty()) name_ = fs::path(file_).filename().string();
    return {};
  }
  int run_with(Client& client, CommandContext& context) override {
    auto stored = qualification::shell::upload_artifact(client, name_, file_);
    if (!stored) return report(stored.error());
    if (context.json()) {
      std::cout << protocol::to_json(*stored).dump(2) << "\n";
    } else {
      std::cout << fmt::format("stored {} ({} bytes) as sha256:{}\n", file_, stored->size_bytes, stored->sha256);
    }
    return kExitOk;
  }

 private:
  std::string file_;
  std::string name_;
};

}  // namespace

void add_environment_commands(CommandList& commands) {
  commands.push_back(std::make_unique<EnvsCommand>());
  CommandList artifact;
  artifact.push_back(std::make_unique<ArtifactUploadCommand>());
  commands.push_back(std::make_unique<CommandGroup>("artifact", "files the coordinator stores by digest",
                                                    std::move(artifact)));
}

}  // namespace kiln::cli

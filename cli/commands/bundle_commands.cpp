// kiln bundle build, kiln bundle show ID, kiln bundle accept ID, kiln bundles.
#include <iostream>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/cli_options.h"
#include "cli/commands/all.h"
#include "cli/commands/qualification_options.h"
#include "cli/exit_codes.h"
#include "cli/text.h"
#include "client/records_client.h"

namespace kiln::cli {

namespace q = kiln::qualification;
namespace qs = kiln::qualification::shell;

namespace {

class BundleBuildCommand : public RemoteCommand {
 public:
  std::string name() const override { return "build"; }
  std::string help() const override { return "build the bundle at a change (default: the latest)"; }
  void add_options(CLI::App& command) override {
    command.add_option("--at", at_, "the last change the bundle contains");
    command.add_option("--rev", revisions_, "hardware revisions it supports (repeat it, or a,b)")
        ->delimiter(',')
        ->capture_default_str();
    add_deprecated_option(command, "--revs", "--rev a,b", [this](const std::string& v) {
      revisions_ = CLI::detail::split(v, ',');
    });
    command.add_option("--bundle-dir", builder_.bundle_dir,
                       "where the sim builder writes the stack file (default: $KILN_BUNDLE_DIR)");
    add_builder_options(command, builder_);
  }
  Status check_arguments() override {
    fill_from_environment(builder_.bundle_dir, "KILN_BUNDLE_DIR");
    fill_from_environment(builder_.program, "KILN_BUILDER");
    return need(builder_.bundle_dir, "--bundle-dir", "KILN_BUNDLE_DIR",
                "the bundle directory (the stack files, shared with the agents)");
  }
  int run_with(Client& client, CommandContext& context) override;

 private:
  std::string at_;
  std::vector<std::string> revisions_ = {"a", "b"};
  BuilderOptions builder_;
};

int BundleBuildCommand::run_with(Client& client, CommandContext& context) {
  auto built = qs::build_recorded_bundle(client, *configured_builder(builder_, revisions_), at_);
  if (!built) return report(built.error());
  const q::Bundle& bundle = built->bundle;
  if (context.json()) {
    std::cout << q::to_json(bundle).dump(2) << "\n";
  } else {
    std::cout << fmt::format("bundle {} at change {} ({} changes, revisions {})\n", bundle.id, built->at_change,
                             bundle.change_count, fmt::join(bundle.hardware_revisions, ","));
  }
  return kExitOk;
}

class BundleShowCommand : public RemoteCommand {
 public:
  std::string name() const override { return "show"; }
  std::string help() const override { return "print one bundle"; }
  void add_options(CLI::App& command) override {
    command.add_option("ID", id_, "bundle id or unique prefix")->required();
  }
  int run_with(Client& client, CommandContext&) override {
    auto bundle = qs::find_bundle(client, id_);
    if (!bundle) return report(bundle.error());
    std::cout << q::to_json(*bundle).dump(2) << "\n";
    return kExitOk;
  }

 private:
  std::string id_;
};

class BundleAcceptCommand : public RemoteCommand {
 public:
  std::string name() const override { return "accept"; }
  std::string help() const override { return "make a bundle the baseline of its revisions"; }
  void add_options(CLI::App& command) override {
    command.add_option("ID", id_, "bundle id or unique prefix")->required();
    command.add_option("--rev", revisions_, "only these revisions (repeat it, or a,b)")->delimiter(',');
  }
  int run_with(Client& client, CommandContext& context) override {
    auto bundle = qs::find_bundle(client, id_);
    if (!bundle) return report(bundle.error());
    const std::vector<std::string> revisions = revisions_.empty() ? bundle->hardware_revisions : revisions_;
    for (const auto& revision : revisions) {
      if (auto ok = qs::accept_baseline(client, {revision, bundle->id, "", wall_now_ms()}); !ok) {
        return report(ok.error());
      }
    }
    if (context.json()) {
      std::cout << nlohmann::json{{"bundle_id", bundle->id}, {"revisions", revisions}}.dump() << "\n";
    } else {
      std::cout << fmt::format("bundle {} is the baseline of revision{} {}\n", short_id(bundle->id),
                               revisions.size() == 1 ? "" : "s", fmt::join(revisions, ", "));
    }
    return kExitOk;
  }

 private:
  std::string id_;
  std::vector<std::string> revisions_;
};

void print_bundles(const std::vector<q::Bundle>& bundles, const std::map<std::string, qs::Baseline>& baselines) {
  if (bundles.empty()) {
    std::cout << "no bundles; kiln bundle build\n";
    return;
  }
  const auto row = [](const auto&... columns) {
    std::cout << fmt::format("{:<12} {:>7} {:<14} {:<6} {}\n", columns...);
  };
  row("BUNDLE", "CHANGES", "LAST CHANGE", "REVS", "BASELINE OF");
  for (const auto& bundle : bundles) {
    std::vector<std::string> baseline_of;
    for (const auto& [revision, baseline] : baselines) {
      if (baseline.bundle_id == bundle.id) baseline_of.push_back(revision);
    }
    row(short_id(bundle.id), bundle.change_count, bundle.change_count == 0 ? "-" : bundle.last_change,
        fmt::format("{}", fmt::join(bundle.hardware_revisions, ",")), fmt::format("{}", fmt::join(baseline_of, ",")));
  }
}

class BundlesCommand : public RemoteCommand {
 public:
  std::string name() const override { return "bundles"; }
  std::string help() const override { return "list the latest bundles and the accepted baseline per revision"; }
  void add_options(CLI::App& command) override { latest_.add_to(command, "bundles"); }
  int run_with(Client& client, CommandContext& context) override {
    // Only the latest are read: a bundle is built for every change qualified, months of them.
    bool more = false;
    auto bundles = qs::list_latest_bundles(client, latest_.count(), more);
    if (!bundles) return report(bundles.error());
    auto baselines = qs::list_baselines(client);
    if (!baselines) return report(baselines.error());
    if (!context.json()) {
      print_bundles(*bundles, *baselines);
      if (more) std::cout << latest_.more_note("bundles");
      return kExitOk;
    }
    nlohmann::json out = {{"bundles", nlohmann::json::array()}, {"baselines", nlohmann::json::object()}};
    for (const auto& bundle : *bundles) out["bundles"].push_back(q::to_json(bundle));
    for (const auto& [revision, baseline] : *baselines) {
      out["baselines"][revision] = {{"bundle_id", baseline.bundle_id},
                                    {"accepted_by_run", baseline.accepted_by_run},
                                    {"accepted_at_ms", baseline.accepted_at_ms}};
    }
    std::cout << out.dump(2) << "\n";
    return kExitOk;
  }

 private:
  LatestOptions latest_;
};

}  // namespace

void add_bundle_commands(CommandList& commands) {
  CommandList bundle;
  bundle.push_back(std::make_unique<BundleBuildCommand>());
  bundle.push_back(std::make_unique<BundleShowCommand>());
  bundle.push_back(std::make_unique<BundleAcceptCommand>());
  commands.push_back(
      std::make_unique<CommandGroup>("bundle", "build, show and accept stack bundles", std::move(bundle)));
  commands.push_back(std::make_unique<BundlesCommand>());
}

}  // namespace kiln::cli

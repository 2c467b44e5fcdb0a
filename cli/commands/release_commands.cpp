// kiln release promote|approve|merge|rollback|status: releases in the environments repository
// (docs/releases.md).
#include <chrono>
#include <iostream>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "cli/commands/all.h"
#include "cli/commands/qualification_options.h"
#include "cli/exit_codes.h"
#include "release/shell/release_desk.h"

namespace kiln::cli {

namespace r = kiln::release;
using nlohmann::json;

namespace {

TimeMs wall_now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string short_id(const std::string& id) { return id.substr(0, 12); }

// What every release command shares: where the clone is, and the desk working in it.
class ReleaseCommand : public RemoteCommand {
 public:
  void add_options(CLI::App& command) override {
    command.add_option("--release-config", config_path_,
                       "release.toml: the clone, remote and forge (default: $KILN_RELEASE_CONFIG)");
    command.add_option("--repo", repo_, "the environments clone (over release.toml's repo)");
    add_own_options(command);
  }
  Status check_arguments() override {
    fill_from_environment(config_path_, "KILN_RELEASE_CONFIG");
    if (config_path_.empty() && repo_.empty()) {
      return fail(Errc::invalid_argument, "`kiln release` needs the environments clone: pass --repo DIR, or "
                                          "--release-config FILE (or set KILN_RELEASE_CONFIG); docs/releases.md");
    }
    return {};
  }
  int run_with(Client& client, CommandContext& context) override {
    r::ReleaseConfig config;
    if (!config_path_.empty()) {
      auto loaded = r::load_release_config(config_path_);
      if (!loaded) return report(loaded.error());
      config = std::move(*loaded);
    }
    if (!repo_.empty()) config.repo = repo_;
    auto actor = r::whoami(client);
    if (!actor) return report(actor.error());
    r::ReleaseDesk desk(std::move(config), client, *actor, wall_now_ms);
    return run_desk(desk, context);
  }

 protected:
  virtual void add_own_options(CLI::App& command) = 0;
  virtual int run_desk(r::ReleaseDesk& desk, CommandContext& context) = 0;

 private:
  std::string config_path_;
  std::string repo_;
};

void warn_unrecorded(const std::string& problem) {
  if (problem.empty()) return;
  std::cerr << "kiln: the commit is made, but the coordinator has no promotion record of it yet (" << problem
            << "); the next `kiln release` command records it\n";
}

// The commit is the truth; the audit line is its account in the coordinator's log.
void warn_unaudited(const std::string& problem) {
  if (problem.empty()) return;
  std::cerr << "kiln: the commit is made, but the coordinator's audit log does not have this step (" << problem
            << "); the commit's trailers in the environments repository are its record\n";
}

class AddBundleCommand : public ReleaseCommand {
 public:
  std::string name() const override { return "add-bundle"; }
  std::string help() const override {
    return "add bundles/<id>.toml to main: the recorded bundle's versions and each layer's package digest";
  }
  void add_own_options(CLI::App& command) override {
    command.add_option("bundle", bundle_, "the bundle (a unique prefix of 6 or more characters will do)")->required();
    command.add_option("--package", package_specs_, "LAYER=FILE, once per layer: its digest is pinned")->required();
    command.add_option("--one-way-firmware", one_way_,
                       "why the firmware cannot be rolled back (a fuse it blows); promoting it then needs an override");
  }
  Status check_arguments() override {
    if (auto ok = ReleaseCommand::check_arguments(); !ok) return ok;
    for (const auto& spec : package_specs_) {
      const auto eq = spec.find('=');
      if (eq == std::string::npos || eq == 0 || eq + 1 == spec.size()) {
        return fail(Errc::invalid_argument, fmt::format("--package {}: write LAYER=FILE, e.g. firmware=fw-2.4.bin", spec));
      }
      packages_[spec.substr(0, eq)] = spec.substr(eq + 1);
    }
    return {};
  }
  int run_desk(r::ReleaseDesk& desk, CommandContext& context) override {
    auto added = desk.add_bundle(bundle_, packages_, one_way_);
    if (!added) return report(added.error());
    warn_unaudited(added->audit_problem);
    if (context.json()) {
      std::cout << json{{"bundle_id", added->bundle.id}, {"path", r::bundle_path(added->bundle.id)},
                        {"commit", added->commit}}
                       .dump(2)
                << "\n";
    } else if (added->commit.empty()) {
      std::cout << fmt::format("{} is on main already, with these packages\n", r::bundle_path(added->bundle.id));
    } else {
      std::cout << fmt::format("added {} (commit {}); promote it with `kiln release promote {} --to ENV`\n",
                               r::bundle_path(added->bundle.id), short_id(added->commit), short_id(added->bundle.id));
    }
    return kExitOk;
  }

 private:
  std::string bundle_;
  std::vector<std::string> package_specs_;
  std::map<std::string, std::string> packages_;
  std::string one_way_;
};

class PromoteCommand : public ReleaseCommand {
 public:
  std::string name() const override { return "promote"; }
  std::string help() const override { return "propose a bundle for an environment: a branch and one commit with its gate evidence"; }
  void add_own_options(CLI::App& command) override {
    command.add_option("bundle", bundle_, "the bundle (a unique prefix of 6 or more characters will do)")->required();
    command.add_option("--to", environment_, "the environment: dev, staging, production, ...")->required();
    command.add_option("--override-one-way", override_,
                       "promote a bundle with one-way firmware anyway; the reason is recorded in the commit");
  }
  int run_desk(r::ReleaseDesk& desk, CommandContext& context) override {
    auto promoted = desk.promote(bundle_, environment_, override_);
    if (!promoted) return report(promoted.error());
    warn_unaudited(promoted->audit_problem);
    const r::Promotion& p = promoted->promotion;
    if (context.json()) {
      std::cout << json{{"branch", p.branch},
                        {"commit", promoted->commit},
                        {"environment", p.environment},
                        {"bundle_id", p.bundle_id},
                        {"pull_request_url", promoted->pull_request_url},
                        {"replaced_commit", promoted->replaced_commit},
                        {"evidence", r::evidence_json(p)}}
                       .dump(2)
                << "\n";
      return kExitOk;
    }
    std::vector<std::string> gates;
    for (const auto& run : p.gates) gates.push_back(fmt::format("{} {}", run.tier, run.run_id));
    std::cout << fmt::format("proposed {} for {} on branch {} (commit {})\n", short_id(p.bundle_id), p.environment,
                             p.branch, short_id(promoted->commit));
    std::cout << fmt::format("  gates passed: {}\n  evidence: {}\n", gates.empty() ? std::string("none required") : fmt::format("{}", fmt::join(gates, ", ")),
                             r::evidence_path(p.environment, p.bundle_id));
    if (!promoted->replaced_commit.empty()) {
      std::cout << fmt::format("  replaces the branch's earlier proposal (commit {}), merged or behind main since\n",
                               short_id(promoted->replaced_commit));
    }
    if (!promoted->pull_request_url.empty()) std::cout << "  pull request: " << promoted->pull_request_url << "\n";
    std::cout << fmt::format("next: someone else approves it (`kiln release approve {}`), then `kiln release merge {}`\n",
                             p.branch, p.branch);
    return kExitOk;
  }

 private:
  std::string bundle_;
  std::string environment_;
  std::string override_;
};

class ApproveCommand : public ReleaseCommand {
 public:
  std::string name() const override { return "approve"; }
  std::string help() const override { return "approve an open promotion (not your own)"; }
  void add_own_options(CLI::App& command) override {
    command.add_option("target", target_, "the environment (with one open promotion) or the promotion branch")
        ->required();
  }
  int run_desk(r::ReleaseDesk& desk, CommandContext& context) override {
    auto approved = desk.approve(target_);
    if (!approved) return report(approved.error());
    warn_unaudited(approved->audit_problem);
    if (context.json()) {
      std::cout << json{{"branch", approved->proposed.branch}, {"commit", approved->commit}}.dump(2) << "\n";
    } else {
      std::cout << fmt::format("approved {} (commit {}); `kiln release merge {}` merges it\n", approved->proposed.branch,
                               short_id(approved->commit), approved->proposed.branch);
    }
    return kExitOk;
  }

 private:
  std::string target_;
};

class MergeCommand : public ReleaseCommand {
 public:
  std::string name() const override { return "merge"; }
  std::string help() const override { return "merge an approved promotion into main: the environment changes"; }
  void add_own_options(CLI::App& command) override {
    command.add_option("target", target_, "the environment (with one open promotion) or the promotion branch")
        ->required();
  }
  int run_desk(r::ReleaseDesk& desk, CommandContext& context) override {
    auto merged = desk.merge(target_);
    if (!merged) return report(merged.error());
    warn_unrecorded(merged->record_problem);
    if (context.json()) {
      std::cout << json{{"branch", merged->proposed.branch}, {"commit", merged->commit},
                        {"environment", merged->proposed.environment}, {"bundle_id", merged->proposed.bundle_id},
                        {"recorded", merged->record_problem.empty()}}
                       .dump(2)
                << "\n";
    } else {
      std::cout << fmt::format("merged {}: {} now runs {} (commit {})\n", merged->proposed.branch,
                               merged->proposed.environment, short_id(merged->proposed.bundle_id),
                               short_id(merged->commit));
    }
    return kExitOk;
  }

 private:
  std::string target_;
};

class RollbackCommand : public ReleaseCommand {
 public:
  std::string name() const override { return "rollback"; }
  std::string help() const override { return "revert an environment's last promotion as a new commit"; }
  void add_own_options(CLI::App& command) override {
    command.add_option("environment", environment_, "the environment")->required();
  }
  int run_desk(r::ReleaseDesk& desk, CommandContext& context) override {
    auto rolled = desk.rollback(environment_);
    if (!rolled) return report(rolled.error());
    warn_unrecorded(rolled->record_problem);
    const r::Rollback& rb = rolled->rollback;
    if (context.json()) {
      std::cout << json{{"environment", rb.environment}, {"commit", rolled->commit}, {"reverts", rb.revert_commit},
                        {"from_bundle_id", rb.from_bundle_id}, {"to_bundle_id", rb.to_bundle_id},
                        {"recorded", rolled->record_problem.empty()}}
                       .dump(2)
                << "\n";
    } else {
      std::cout << fmt::format("rolled back {}: {} -> {} (commit {} reverts {})\n", rb.environment,
                               short_id(rb.from_bundle_id), rb.to_bundle_id.empty() ? "nothing" : short_id(rb.to_bundle_id),
                               short_id(rolled->commit), short_id(rb.revert_commit));
    }
    return kExitOk;
  }

 private:
  std::string environment_;
};

class StatusCommand : public ReleaseCommand {
 public:
  std::string name() const override { return "status"; }
  std::string help() const override { return "what each environment runs, and the open promotions"; }
  void add_own_options(CLI::App&) override {}
  int run_desk(r::ReleaseDesk& desk, CommandContext& context) override {
    auto status = desk.status();
    if (!status) return report(status.error());
    if (context.json()) {
      json environments = json::array();
      for (const auto& [name, desired] : status->desired) {
        const auto& env = status->environments.at(name);
        environments.push_back({{"environment", name},
                                {"bundle_id", desired.bundle ? desired.bundle->id : ""},
                                {"follows", env.follows},
                                {"requires", env.requires_gates},
                                {"soak_hours", env.soak_hours},
                                {"nodes", desired.nodes},
                                {"node_labels", desired.node_labels}});
      }
      json open = json::array();
      for (const auto& p : status->open_promotions) {
        std::vector<std::string> approvals;
        for (const auto& a : p.approvals) approvals.push_back(r::to_string(a));
        open.push_back({{"branch", p.branch}, {"environment", p.environment}, {"bundle_id", p.bundle_id},
                        {"approved_by", approvals}, {"based_on_main_tip", p.based_on_main_tip}});
      }
      std::cout << json{{"main_commit", status->main_commit}, {"environments", environments},
                        {"open_promotions", open}, {"recorded_now", status->recorded_now}}
                       .dump(2)
                << "\n";
      return kExitOk;
    }
    std::cout << fmt::format("main at {}\n", short_id(status->main_commit));
    for (const auto& [name, desired] : status->desired) {
      const auto& env = status->environments.at(name);
      std::cout << fmt::format("{:<12} {:<14} follows {:<8} requires {:<16} nodes {}\n", name,
                               desired.bundle ? short_id(desired.bundle->id) : "(none)",
                               env.follows.empty() ? "-" : env.follows,
                               env.requires_gates.empty() ? "-" : fmt::format("{}", fmt::join(env.requires_gates, ",")),
                               desired.nodes.empty() ? fmt::format("labels {}", fmt::join(desired.node_labels, ","))
                                                     : fmt::format("{}", fmt::join(desired.nodes, ",")));
    }
    for (const auto& p : status->open_promotions) {
      std::cout << fmt::format("open: {} ({} approval{}{})\n", p.branch, p.approvals.size(),
                               p.approvals.size() == 1 ? "" : "s", p.based_on_main_tip ? "" : ", main moved: rebase");
    }
    if (status->recorded_now > 0) {
      std::cout << fmt::format("recorded {} environment change{} the coordinator lacked\n", status->recorded_now,
                               status->recorded_now == 1 ? "" : "s");
    }
    return kExitOk;
  }
};

}  // namespace

void add_release_commands(CommandList& commands) {
  CommandList release;
  release.push_back(std::make_unique<AddBundleCommand>());
  release.push_back(std::make_unique<PromoteCommand>());
  release.push_back(std::make_unique<ApproveCommand>());
  release.push_back(std::make_unique<MergeCommand>());
  release.push_back(std::make_unique<RollbackCommand>());
  release.push_back(std::make_unique<StatusCommand>());
  commands.push_back(std::make_unique<CommandGroup>(
      "release", "promote bundles through the environments repository, review, merge, roll back", std::move(release)));
}

}  // namespace kiln::cli

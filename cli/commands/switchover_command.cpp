// kiln switchover: per model of the set, revision and gate, whether the recorded runs calibrated
// it on silicon or it still relies on the simulator, and what remains before switching over
// (docs/qualification.md, "Backends and the switch-over"). A node's backend is what its driver
// declares (its backend=KIND label).
#include <iostream>
#include <set>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "qualification/backends/switchover.h"
#include "cli/commands/all.h"
#include "cli/commands/qualification_options.h"
#include "cli/exit_codes.h"
#include "client/records_client.h"

namespace kiln::cli {

namespace {

class SwitchoverCommand : public RemoteCommand {
 public:
  std::string name() const override { return "switchover"; }
  std::string help() const override {
    return "which gates of the model set are calibrated on silicon and which still rely on the simulator, from the "
           "recorded runs";
  }
  void add_options(CLI::App& command) override {
    command.add_option("--min-samples", options_.min_noise_samples,
                       "baseline samples on silicon before a performance gate's noise counts as measured")
        ->capture_default_str()
        ->check(CLI::Range(3, 100000));
    command.add_option("--models", models_path_,
                       "the qualification set whose every gate readiness counts (default: the register's set)");
    add_register_option(command, register_path_);
  }
  Status check_arguments() override {
    fill_from_environment(register_path_, "KILN_RISKS");
    if (!models_path_.empty()) {
      auto set = qualification::load_model_set_file(models_path_);
      if (!set) return fail(Errc::invalid_argument, set.error().message);
      return take_models(*set);
    }
    if (register_path_.empty()) return {};
    auto loaded = load_register(register_path_);
    if (!loaded) return tl::unexpected(loaded.error());
    return take_models(loaded->set);
  }
  int run_with(Client& client, CommandContext& context) override {
    auto runs = qualification::shell::list_runs(client);
    if (!runs) return report(runs.error());
    auto nodes = expect_reply<protocol::NodeList>(client.request(protocol::ListNodes{}));
    if (!nodes) return report(nodes.error());
    backends::NodeBackends declared;
    std::set<std::string> revisions;
    for (const auto& n : nodes->nodes) {
      declared[n.node_id] = backends::declared_backend(n.labels);
      // The revisions the fleet runs or simulates; the CPU reference has none of its own.
      if (declared[n.node_id] && *declared[n.node_id] != backends::Backend::cpu) revisions.insert(n.hardware_revision);
    }
    options_.revisions.assign(revisions.begin(), revisions.end());
    const backends::SwitchoverReport result = backends::switchover_report(*runs, declared, options_);
    if (context.json()) {
      std::cout << backends::to_json(result).dump(2) << "\n";
    } else {
      std::cout << backends::to_text(result);
    }
    return result.ready ? kExitOk : kExitFailed;
  }

 private:
  Status take_models(const qualification::ModelSet& set) {
    std::vector<std::string> names;
    for (const auto& model : set.models) names.push_back(model.name);
    options_.models = std::move(names);
    return {};
  }

  backends::SwitchoverOptions options_;
  std::string models_path_;
  std::string register_path_;
};

}  // namespace

void add_switchover_command(CommandList& commands) { commands.push_back(std::make_unique<SwitchoverCommand>()); }

}  // namespace kiln::cli

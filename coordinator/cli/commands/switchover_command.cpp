// kiln switchover: per model, revision and gate, whether the recorded runs calibrated it on
// silicon or it still relies on the simulator, and what remains before switching over
// (docs/qualification.md, "Backends and the switch-over").
#include <iostream>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "coordinator/backends/switchover.h"
#include "coordinator/cli/commands/all.h"
#include "coordinator/cli/exit_codes.h"
#include "coordinator/qualification/shell/records_client.h"

namespace kiln::cli {

namespace {

class SwitchoverCommand : public RemoteCommand {
 public:
  std::string name() const override { return "switchover"; }
  std::string help() const override {
    return "which gates are calibrated on silicon and which still rely on the simulator, from the recorded runs";
  }
  void add_options(CLI::App& command) override {
    command.add_option("--min-samples", options_.min_noise_samples,
                       "baseline samples on silicon before a performance gate's noise counts as measured")
        ->capture_default_str()
        ->check(CLI::Range(3, 100000));
  }
  int run_with(Client& client, CommandContext& context) override {
    auto runs = qualification::shell::list_runs(client);
    if (!runs) return report(runs.error());
    auto nodes = expect_reply<protocol::NodeList>(client.request(protocol::ListNodes{}));
    if (!nodes) return report(nodes.error());
    std::map<std::string, std::string> drivers;
    for (const auto& n : nodes->nodes) drivers[n.node_id] = n.driver_version;
    const backends::SwitchoverReport result = backends::switchover_report(*runs, drivers, options_);
    if (context.json()) {
      std::cout << backends::to_json(result).dump(2) << "\n";
    } else {
      std::cout << backends::to_text(result);
    }
    return result.ready ? kExitOk : kExitFailed;
  }

 private:
  backends::SwitchoverOptions options_;
};

}  // namespace

void add_switchover_command(CommandList& commands) { commands.push_back(std::make_unique<SwitchoverCommand>()); }

}  // namespace kiln::cli

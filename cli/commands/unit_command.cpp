// kiln unit: the unit tier of a bundle, run here. Its kernel and compiler tests need no chip of
// the pool, only the CPU reference backend and the simulated chip (docs/qualification.md), so
// the command asks the coordinator only for the bundle and its changes and runs the tests on the
// machine it runs on.
#include <fstream>
#include <iostream>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/commands/all.h"
#include "cli/commands/qualification_run.h"
#include "cli/exit_codes.h"
#include "client/records_client.h"
#include "qualification/shell/unit_runner.h"
#include "qualification/unit_tier.h"

namespace kiln::cli {

namespace q = kiln::qualification;
namespace qs = kiln::qualification::shell;

namespace {

class UnitCommand : public RemoteCommand {
 public:
  std::string name() const override { return "unit"; }
  std::string help() const override {
    return "unit tier of a bundle, run here: kernel and compiler tests on the CPU reference and simulated chip "
           "backends; exit 0 pass, 1 fail";
  }
  void add_options(CLI::App& command) override {
    command.add_option("--bundle", bundle_, "the bundle (id or unique prefix; kiln bundles)")->required();
    command.add_option("--change", change_, "the change whose tests to run (default: the bundle's last)");
    command.add_flag("--all", all_, "every unit test, whatever the change touched");
    command.add_option("--junit", junit_path_, "write the verdict as JUnit XML here");
    command.add_option("--sim-driver", sim_library_, "the simulated chip backend")->capture_default_str();
    command.add_option("--cpu-driver", cpu_library_, "the CPU reference backend")->capture_default_str();
  }
  Status check_arguments() override {
    if (all_ && !change_.empty()) {
      return fail(Errc::invalid_argument, "--all and --change choose the tests both ways; give one of them");
    }
    return check_output_path("--junit", junit_path_);
  }

 protected:
  int run_with(Client& client, CommandContext& context) override;

 private:
  std::string bundle_;
  std::string change_;
  bool all_ = false;
  std::string junit_path_;
  std::string sim_library_ = qs::default_unit_tier_setup().sim_library;
  std::string cpu_library_ = qs::default_unit_tier_setup().cpu_library;
};

int UnitCommand::run_with(Client& client, CommandContext& context) {
  auto bundle = qs::find_bundle(client, bundle_);
  if (!bundle) return report(bundle.error());
  auto history = qs::list_changes(client);
  if (!history) return report(history.error());
  std::string change = change_;
  if (change.empty() && !all_) {
    if (bundle->change_count == 0) {
      return report({Errc::invalid_argument, fmt::format("bundle {} has no changes; give --all",
                                                         bundle->id.substr(0, 12))});
    }
    change = bundle->last_change;
  }
  auto result = qs::run_unit_tier(*bundle, *history, change, {sim_library_, cpu_library_});
  if (!result) return report(result.error());
  if (!junit_path_.empty()) {
    std::ofstream out(junit_path_, std::ios::trunc);
    out << q::unit_junit_xml(*result);
    if (!out) return report({Errc::io, fmt::format("cannot write {}; check the path", junit_path_)});
  }
  if (context.json()) std::cout << q::to_json(*result).dump(2) << "\n";
  else std::cout << q::unit_summary_text(*result);
  return result->passed() ? kExitOk : kExitFailed;
}

}  // namespace

void add_unit_command(CommandList& commands) { commands.push_back(std::make_unique<UnitCommand>()); }

}  // namespace kiln::cli

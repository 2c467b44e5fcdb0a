// kiln-fleet-sim: replays a scenario's working day through the scheduler core under the kiln
// policy and the two baselines, and prints the figures side by side.
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "sim/fleet/fleet_sim.h"
#include "common/version.h"

int main(int argc, char** argv) {
  CLI::App app{"kiln-fleet-sim: a simulated working day of the accelerator pool"};
  app.set_version_flag("--version", kiln::version_text("kiln-fleet-sim"));
  std::string scenario_path = KILN_DEFAULT_SCENARIO;
  std::string knobs_path;
  std::uint64_t seed = 1;
  bool json = false;
  bool check_goals = false;
  int sweep = 0;
  // Later options win, so scripts/fleet-sim's defaults can be overridden on its command line.
  app.add_option("--scenario", scenario_path, "scenario TOML")
      ->capture_default_str()
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.add_option("--seed", seed, "seed for the workload, failures and bisection")
      ->capture_default_str()
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.add_option("--knobs", knobs_path, "coordinator TOML whose [scheduler] table sets the knobs")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.add_option("--sweep", sweep,
                 "run N seeds from --seed on and print the worst and median figures per policy")
      ->check(CLI::Range(1, 100000));
  std::optional<double> unit_reject_share;
  std::optional<double> unit_minutes;
  app.add_option("--unit-reject-share", unit_reject_share,
                 "share of hardware-path changes the unit tier rejects before any chip (default: the "
                 "scenario's [unit] reject_share, else 0.05)")
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--unit-minutes", unit_minutes,
                 "the unit tier's duration before a smoke (default: the scenario's [unit] minutes, else 2)")
      ->check(CLI::Range(0.0, 1440.0));
  app.add_flag("--json", json, "print JSON instead of the table");
  app.add_flag("--check-goals", check_goals,
               "exit 3 if the kiln policy misses presubmit p90 <= 20 min, the nightly deadline, "
               "or < 2% of experiment chip-hours lost to preemption");
  CLI11_PARSE(app, argc, argv);

  auto scenario = kiln::fleet::load_scenario(scenario_path);
  if (!scenario) {
    std::fprintf(stderr, "kiln-fleet-sim: %s\n", scenario.error().describe().c_str());
    return 2;
  }
  kiln::scheduler::SchedulerKnobs knobs;
  if (!knobs_path.empty()) {
    auto loaded = kiln::scheduler::load_scheduler_knobs(knobs_path);
    if (!loaded) {
      std::fprintf(stderr, "kiln-fleet-sim: %s\n", loaded.error().describe().c_str());
      return 2;
    }
    knobs = *loaded;
  }
  if (unit_reject_share) scenario->unit_reject_share = *unit_reject_share;
  if (unit_minutes) scenario->unit_duration_ms = static_cast<kiln::DurationMs>(*unit_minutes * kiln::kMinuteMs);
  knobs = kiln::fleet::knobs_for(*scenario, knobs);
  std::fprintf(stderr, "kiln-fleet-sim: scenario %s, seed %llu\n", scenario_path.c_str(),
               static_cast<unsigned long long>(seed));

  auto run_all = [&](std::uint64_t run_seed) -> std::optional<std::vector<kiln::fleet::PolicyReport>> {
    kiln::fleet::FleetOptions options;
    options.seed = run_seed;
    std::vector<kiln::fleet::PolicyReport> out;
    for (auto policy : {kiln::scheduler::Policy::kiln, kiln::scheduler::Policy::fifo,
                        kiln::scheduler::Policy::strict_priority}) {
      kiln::scheduler::SchedulerKnobs run_knobs = knobs;
      run_knobs.policy = policy;
      auto report = kiln::fleet::run_fleet(*scenario, run_knobs, options);
      if (!report) {
        std::fprintf(stderr, "kiln-fleet-sim: policy %s: %s (--seed=%llu)\n",
                     std::string(kiln::scheduler::to_string(policy)).c_str(),
                     report.error().describe().c_str(), static_cast<unsigned long long>(run_seed));
        return std::nullopt;
      }
      out.push_back(std::move(*report));
    }
    return out;
  };

  if (sweep > 0) {
    std::vector<std::vector<kiln::fleet::PolicyReport>> runs;
    for (int i = 0; i < sweep; ++i) {
      auto reports = run_all(seed + static_cast<std::uint64_t>(i));
      if (!reports) return 1;
      runs.push_back(std::move(*reports));
    }
    std::printf("%s", kiln::fleet::format_sweep(runs, seed).c_str());
    return 0;
  }

  auto all = run_all(seed);
  if (!all) return 1;
  std::vector<kiln::fleet::PolicyReport> reports = std::move(*all);
  if (json) {
    std::printf("%s\n", kiln::fleet::format_json(reports, seed, scenario_path).c_str());
  } else {
    std::printf("%s", kiln::fleet::format_table(*scenario, reports, seed).c_str());
  }
  if (check_goals) {
    const auto& k = reports.front();
    bool ok = k.presubmit_signal.p90_minutes <= 20.0 && k.nightly_met_deadline &&
              k.experiment_lost_share < 0.02;
    if (!ok) {
      std::fprintf(stderr, "kiln-fleet-sim: the kiln policy misses a goal (seed %llu)\n",
                   static_cast<unsigned long long>(seed));
      return 3;
    }
  }
  return 0;
}

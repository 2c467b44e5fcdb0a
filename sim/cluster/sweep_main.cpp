// kiln-sim-sweep: runs the deterministic cluster simulation over a range of seeds and reports
// every seed whose invariants failed, with the command that reproduces it.
#include <chrono>
#include <cstdio>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "sim/cluster/cluster_sim.h"
#include "common/version.h"

int main(int argc, char** argv) {
  using namespace kiln::sim::cluster;
  CLI::App app{"Deterministic simulation sweep: the real coordinator and agent cores under faults, one seed per run"};
  app.set_version_flag("--version", kiln::version_text("kiln-sim-sweep"));
  std::uint64_t seeds = 100;
  std::uint64_t first_seed = 1;
  double minutes = 3.0;
  std::optional<std::uint64_t> seed;
  std::optional<std::uint64_t> verbose_seed;
  bool log_messages = false;
  bool physical_chips = true;
  bool quiet = false;
  app.add_option("--seeds", seeds, "how many seeds to run")->check(CLI::PositiveNumber);
  app.add_option("--first-seed", first_seed, "the first seed of the sweep");
  app.add_option("--minutes", minutes, "simulated minutes of faults per seed, before the quiet tail")
      ->check(CLI::Range(0.01, 24.0 * 60));
  app.add_option("--seed", seed, "run this one seed and print its summary (same as --first-seed S --seeds 1)");
  app.add_option("--verbose-seed", verbose_seed, "run this one seed and print its whole log");
  app.add_flag("--log-messages", log_messages, "with --verbose-seed: also log every message delivered");
  app.add_flag("--physical-chips,!--no-physical-chips", physical_chips,
               "fail a seed when an agent starts a process on a chip another of its processes holds (the "
               "default; --no-physical-chips checks only the coordinator's view)");
  app.add_flag("--quiet", quiet, "print only failing seeds and the total");
  // Scripts pass defaults first; a later occurrence of an option wins.
  for (CLI::Option* option : app.get_options()) option->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  CLI11_PARSE(app, argc, argv);

  const auto fault_period_ms = static_cast<kiln::DurationMs>(minutes * static_cast<double>(kiln::kMinuteMs));
  if (verbose_seed) {
    SimOptions options = options_from_seed(*verbose_seed, fault_period_ms);
    options.record_log = true;
    options.log_messages = log_messages;
    options.check_physical_chips = physical_chips;
    Simulation simulation(options);
    const RunSummary summary = simulation.run();
    for (const auto& line : simulation.log()) std::puts(line.c_str());
    std::puts(summary.describe().c_str());
    return summary.violation ? 1 : 0;
  }
  if (seed) {
    first_seed = *seed;
    seeds = 1;
  }

  const auto started = std::chrono::steady_clock::now();
  std::uint64_t failed = 0;
  std::uint64_t steps = 0;
  for (std::uint64_t s = first_seed; s < first_seed + seeds; ++s) {
    SimOptions options = options_from_seed(s, fault_period_ms);
    options.check_physical_chips = physical_chips;
    Simulation simulation(options);
    const RunSummary summary = simulation.run();
    steps += summary.steps;
    if (summary.violation) {
      ++failed;
      std::printf("FAIL %s\n", summary.violation->describe().c_str());
      std::fflush(stdout);
    } else if (!quiet) {
      std::printf("ok   %s\n", summary.describe().c_str());
    }
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  std::printf("%llu of %llu seeds failed (%llu steps in %.1f s); seeds %llu..%llu, %.2f simulated minutes of faults "
              "each\n",
              static_cast<unsigned long long>(failed), static_cast<unsigned long long>(seeds),
              static_cast<unsigned long long>(steps), seconds, static_cast<unsigned long long>(first_seed),
              static_cast<unsigned long long>(first_seed + seeds - 1), minutes);
  return failed == 0 ? 0 : 1;
}

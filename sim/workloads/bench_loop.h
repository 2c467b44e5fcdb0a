// The workload side of "warm up until steady, then N timed repeats" (docs/workloads.md):
// reads the KILN_BENCH_* settings and plans one iteration after another. Pure: the caller
// passes each iteration's start time and the steady throughput the chip offers at that moment,
// and paces wall time itself.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "common/benchmark_settings.h"
#include "common/error.h"
#include "common/stats/rng.h"
#include "sim/perf/perf_model.h"

namespace kiln::sim::workloads {

// The same limits as the agent's BenchmarkSettings (agent/bench/bench.h).
// The settings of docs/workloads.md, shared with the agent that asks for them.
using BenchSettings = kiln::BenchmarkSettings;
using kiln::validate;

// nullopt when none of the KILN_BENCH_* variables is set (not a benchmark job); missing ones
// take their defaults. `getenv` returns a variable's value or nullopt.
Result<std::optional<BenchSettings>> bench_settings_from_env(
    const std::function<std::optional<std::string>(const char*)>& getenv);

enum class Phase { warmup, timed };

struct Sample {
  int index = 0;  // over all iterations, warmup first
  Phase phase = Phase::warmup;
  double start_ms = 0;  // milliseconds since the epoch
  double end_ms = 0;
  double throughput = 0;  // items per second of simulated time
};

class BenchmarkLoop {
 public:
  BenchmarkLoop(BenchSettings settings, PerfNoiseModel noise, double items_per_iteration, std::uint64_t seed);

  bool done() const;
  // False once warmup has ended (steady, or warmup_max): the next iteration is timed.
  bool warming_up() const { return !warmup_done_; }
  // Plans the next iteration starting at start_ms on a chip that offers steady_throughput.
  Sample next(double start_ms, double steady_throughput);

  const std::vector<Sample>& samples() const { return samples_; }
  int warmup_iterations() const { return warmup_iterations_; }
  bool steady_reached() const { return steady_reached_; }
  bool warmup_max_reached() const { return warmup_done_ && !steady_reached_; }
  int timed_iterations() const { return static_cast<int>(samples_.size()) - warmup_iterations_; }
  const BenchSettings& settings() const { return settings_; }

 private:
  BenchSettings settings_;
  PerfNoiseModel noise_;
  double items_per_iteration_;
  stats::Rng rng_;
  std::vector<Sample> samples_;
  std::vector<double> warmup_throughputs_;
  int warmup_iterations_ = 0;
  bool warmup_done_ = false;
  bool steady_reached_ = false;
};

// A same-chip comparison of two stacks (--baseline-stack-effects): which one runs the next
// iteration. The candidate warms up until its warmup ends, then the baseline; then timed
// iterations alternate in ABBA order (baseline, candidate, candidate, baseline, baseline, ...)
// so that drift that is linear in time hits both stacks' timed samples equally, not only drift
// slower than an iteration. nullopt when both loops are done.
enum class Stack { candidate, baseline };
std::optional<Stack> next_in_comparison(const BenchmarkLoop& candidate, const BenchmarkLoop& baseline);

nlohmann::json to_json(const BenchSettings& settings);
// The result document's "benchmark" object.
nlohmann::json benchmark_to_json(const BenchmarkLoop& loop, const std::string& throughput_unit);

}  // namespace kiln::sim::workloads

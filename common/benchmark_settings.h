// The benchmark settings of a job, as docs/workloads.md defines them: what the agent asks of a
// workload (KILN_BENCH_*) and what the workload accepts. One definition, one rule for both.
#pragma once

#include <cstdint>

#include "common/error.h"

namespace kiln {

inline constexpr std::int64_t kMaxBenchmarkIterations = 1000;  // warmup_max + repeats

// The defaults are kiln's one set of benchmark defaults: a job that does not say (kiln submit, the
// protocol's BenchmarkSpec), a model-set entry that does not say, and docs/workloads.md all use them.
struct BenchmarkSettings {
  std::int64_t warmup_min = 5;     // iterations always run before timing
  std::int64_t warmup_max = 200;   // give up waiting for steady after this many
  std::int64_t steady_window = 5;  // steady: the last this-many throughputs agree ...
  double steady_tolerance = 0.03;  // ... within this relative range ((max - min) / median)
  std::int64_t repeats = 10;       // timed iterations after warmup
};

inline constexpr BenchmarkSettings kDefaultBenchmarkSettings{};
// steady_tolerance as the protocol carries it, in millionths.
inline constexpr std::uint32_t kDefaultSteadyTolerancePpm =
    static_cast<std::uint32_t>(kDefaultBenchmarkSettings.steady_tolerance * 1e6 + 0.5);

// 0 <= warmup_min <= warmup_max, steady_window >= 2, steady_tolerance in (0, 1), repeats >= 1 and
// warmup_max + repeats <= kMaxBenchmarkIterations (which bounds the result document).
Status validate(const BenchmarkSettings& settings);

}  // namespace kiln

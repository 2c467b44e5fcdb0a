#include "common/benchmark_settings.h"

#include <fmt/format.h>

namespace kiln {

Status validate(const BenchmarkSettings& s) {
  if (s.warmup_min < 0 || s.warmup_max < s.warmup_min) {
    return fail(Errc::invalid_argument, fmt::format("benchmark warmup_min {} and warmup_max {} must satisfy 0 <= min <= "
                                                    "max; fix the benchmark settings",
                                                    s.warmup_min, s.warmup_max));
  }
  if (s.steady_window < 2) {
    return fail(Errc::invalid_argument, fmt::format("benchmark steady_window is {}; it must be at least 2 samples",
                                                    s.steady_window));
  }
  if (!(s.steady_tolerance > 0 && s.steady_tolerance < 1)) {
    return fail(Errc::invalid_argument, fmt::format("benchmark steady_tolerance is {}; it must be relative, in (0, 1), "
                                                    "e.g. 0.03",
                                                    s.steady_tolerance));
  }
  if (s.repeats < 1 || s.warmup_max + s.repeats > kMaxBenchmarkIterations) {
    return fail(Errc::invalid_argument, fmt::format("benchmark repeats is {}; it must be at least 1 and warmup_max plus "
                                                    "repeats at most {}",
                                                    s.repeats, kMaxBenchmarkIterations));
  }
  return {};
}

}  // namespace kiln

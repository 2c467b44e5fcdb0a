// Effect size between two samples: the Hodges-Lehmann shift, the shift relative to the
// baseline median, and a seeded percentile-bootstrap confidence interval for the latter.
#pragma once

#include <cstdint>
#include <span>

#include "common/error.h"

namespace kiln::stats {

struct ShiftEstimate {
  double hodges_lehmann = 0;   // median of all pairwise differences candidate - baseline
  double baseline_median = 0;
  double relative = 0;         // hodges_lehmann / baseline_median
};

struct ConfidenceInterval {
  double low = 0;
  double high = 0;
  double confidence = 0;  // e.g. 0.95
};

struct BootstrapOptions {
  int resamples = 2000;
  double confidence = 0.95;
  std::uint64_t seed = 1;
};

Status validate(const BootstrapOptions& options);

// Median of a non-empty sample (mean of the two middle values for an even size).
double median(std::span<const double> sample);

// Fails when a side is empty, holds a non-finite value, or the baseline median is not
// positive (a relative shift needs a positive reference: throughput, latency, time).
Result<ShiftEstimate> estimate_shift(std::span<const double> baseline,
                                     std::span<const double> candidate);

// Percentile bootstrap of the relative Hodges-Lehmann shift: both sides resampled with
// replacement, independently, `resamples` times. Same seed, same interval, on every platform.
Result<ConfidenceInterval> bootstrap_relative_shift_ci(std::span<const double> baseline,
                                                       std::span<const double> candidate,
                                                       const BootstrapOptions& options);

}  // namespace kiln::stats

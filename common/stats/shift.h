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

// Inverse standard normal CDF, for p in (0, 1).
double normal_quantile(double p);

// Median of a non-empty sample (mean of the two middle values for an even size).
double median(std::span<const double> sample);

// Fails when a side is empty, holds a non-finite value, or the baseline median is not
// positive (a relative shift needs a positive reference: throughput, latency, time).
Result<ShiftEstimate> estimate_shift(std::span<const double> baseline,
                                     std::span<const double> candidate);

// Distribution-free interval for the shift (Moses; Hollander and Wolfe): the k-th smallest and
// k-th largest pairwise difference, k from the Mann-Whitney null distribution (exact without
// ties up to 50 a side, normal approximation otherwise), divided by the baseline median.
// Coverage is at least `confidence` for a shift in continuous data. When the sizes are too
// small for the confidence (4 a side cannot give 99%), the ends are -inf and +inf.
Result<ConfidenceInterval> rank_relative_shift_ci(std::span<const double> baseline,
                                                  std::span<const double> candidate,
                                                  double confidence);

// Percentile bootstrap of the relative Hodges-Lehmann shift: both sides resampled with
// replacement, independently, `resamples` times. Same seed, same interval, on every platform.
Result<ConfidenceInterval> bootstrap_relative_shift_ci(std::span<const double> baseline,
                                                       std::span<const double> candidate,
                                                       const BootstrapOptions& options);

}  // namespace kiln::stats

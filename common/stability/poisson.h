// The exact (Garwood) confidence interval of a Poisson count, and a failure rate per 1000
// chip-hours with it.
#pragma once

#include <cstdint>

namespace kiln::stability {

struct CountInterval {
  double lower = 0;
  double upper = 0;
};

// Garwood's interval for `count` events: the chi-square quantiles chi2(a/2; 2k)/2 and
// chi2(1 - a/2; 2k + 2)/2 with a = 1 - confidence; the lower bound is 0 for no events. Exact in
// that it covers the true mean with at least `confidence` for every mean.
CountInterval garwood_interval(std::uint64_t count, double confidence);

struct RateEstimate {
  std::uint64_t count = 0;  // the independent events the rate counts (a stability run's episodes)
  double per_1000_chip_hours = 0;
  double lower = 0;  // of the rate, per 1000 chip-hours
  double upper = 0;
};

// `count` independent events seen in `chip_hours` of exposure (> 0).
RateEstimate failure_rate(std::uint64_t count, double chip_hours, double confidence);

}  // namespace kiln::stability

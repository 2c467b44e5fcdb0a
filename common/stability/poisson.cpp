#include "common/stability/poisson.h"

#include <cassert>

#include <boost/math/special_functions/gamma.hpp>

namespace kiln::stability {

CountInterval garwood_interval(std::uint64_t count, double confidence) {
  assert(confidence > 0 && confidence < 1);
  const double alpha = 1 - confidence;
  const double k = static_cast<double>(count);
  // chi2 quantile(p; 2k) / 2 is the gamma(k, 1) quantile at p.
  CountInterval interval;
  interval.lower = count == 0 ? 0.0 : boost::math::gamma_p_inv(k, alpha / 2);
  interval.upper = boost::math::gamma_p_inv(k + 1, 1 - alpha / 2);
  return interval;
}

RateEstimate failure_rate(std::uint64_t count, double chip_hours, double confidence) {
  assert(chip_hours > 0);
  const CountInterval interval = garwood_interval(count, confidence);
  const double per_1000 = 1000 / chip_hours;
  return {count, static_cast<double>(count) * per_1000, interval.lower * per_1000, interval.upper * per_1000};
}

}  // namespace kiln::stability

#include "common/stats/noise.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "common/stats/shift.h"

namespace kiln::stats {
namespace {

// Variance of a standard normal truncated to (-c, c): the kept deviations' spread is this much
// smaller than the noise's.
double truncated_normal_variance(double c) {
  const double density = std::exp(-c * c / 2) / std::sqrt(2 * M_PI);
  const double mass = std::erf(c / std::sqrt(2.0));
  return 1 - 2 * c * density / mass;
}

}  // namespace

Status validate(const NoiseOptions& options) {
  if (!(options.prior_relative_sigma > 0 && options.prior_relative_sigma < 1)) {
    return fail(Errc::invalid_argument, "prior_relative_sigma must be between 0 and 1 exclusive, e.g. 0.02 for 2%");
  }
  if (!(options.prior_weight_samples >= 0)) {
    return fail(Errc::invalid_argument, "prior_weight_samples must be 0 or more, e.g. 5");
  }
  if (!(options.floor_relative_sigma >= 0 && options.floor_relative_sigma < 1)) {
    return fail(Errc::invalid_argument, "floor_relative_sigma must be between 0 and 1, e.g. 0.002");
  }
  if (!(options.outlier_cutoff >= 2)) {
    return fail(Errc::invalid_argument, "outlier_cutoff must be at least 2 robust standard deviations, e.g. 3.5");
  }
  if (!(options.upper_bound_z >= 0 && options.upper_bound_z <= 5)) {
    return fail(Errc::invalid_argument, "upper_bound_z must be between 0 and 5, e.g. 1");
  }
  return {};
}

Result<NoiseEstimate> estimate_noise(std::span<const std::vector<double>> batches, const NoiseOptions& options) {
  if (auto ok = validate(options); !ok) return tl::unexpected(ok.error());
  NoiseEstimate estimate;
  std::vector<double> deviations;
  for (std::size_t b = 0; b < batches.size(); ++b) {
    const std::vector<double>& batch = batches[b];
    for (double value : batch) {
      if (!std::isfinite(value) || value <= 0) {
        return fail(Errc::invalid_argument,
                    fmt::format("recorded sample {} of batch {} is not a positive finite number; drop the broken "
                                "record before estimating noise",
                                value, b));
      }
    }
    if (batch.size() < 2) continue;
    const double centre = median(batch);
    for (double value : batch) deviations.push_back(value / centre - 1);
    ++estimate.batches;
  }
  estimate.samples = deviations.size();

  double shrunk_variance = options.prior_relative_sigma * options.prior_relative_sigma;
  double weight = options.prior_weight_samples;
  if (!deviations.empty()) {
    std::vector<double> magnitudes(deviations.size());
    std::transform(deviations.begin(), deviations.end(), magnitudes.begin(), [](double d) { return std::abs(d); });
    const double robust_sigma = 1.4826 * median(magnitudes);
    const double cutoff = options.outlier_cutoff * robust_sigma;
    double sum_squares = 0;
    std::size_t kept = 0;
    for (double d : deviations) {
      if (std::abs(d) > cutoff) continue;
      sum_squares += d * d;
      ++kept;
    }
    estimate.outlier_fraction = static_cast<double>(deviations.size() - kept) / static_cast<double>(deviations.size());
    // One degree of freedom per batch went into its centre.
    const double freedom = static_cast<double>(kept) - static_cast<double>(estimate.batches);
    if (freedom > 0) {
      const double variance = sum_squares / freedom / truncated_normal_variance(options.outlier_cutoff);
      estimate.measured_relative_sigma = std::sqrt(variance);
      shrunk_variance = (weight * shrunk_variance + freedom * variance) / (weight + freedom);
      weight += freedom;
    }
  }
  // The standard error of a standard deviation from `weight` degrees of freedom is about
  // sigma / sqrt(2 * weight).
  const double upper = weight > 0 ? 1 + options.upper_bound_z / std::sqrt(2 * weight) : 1;
  estimate.relative_sigma = std::max(options.floor_relative_sigma, std::sqrt(shrunk_variance) * upper);
  return estimate;
}

NoiseEstimate known_noise(double relative_sigma, double outlier_fraction) {
  NoiseEstimate estimate;
  estimate.relative_sigma = relative_sigma;
  estimate.measured_relative_sigma = relative_sigma;
  estimate.outlier_fraction = outlier_fraction;
  return estimate;
}

}  // namespace kiln::stats

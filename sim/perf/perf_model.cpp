#include "sim/perf/perf_model.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

namespace kiln::sim {

double steady_throughput(double base, double bundle_factor, double chip_speed_factor, bool throttled) {
  return base * bundle_factor * chip_speed_factor * (throttled ? kThrottledSpeedFactor : 1.0);
}

double PerfNoiseModel::warmup_slowdown(int iteration_index) const {
  if (iteration_index >= warmup_iterations_to_steady || warmup_iterations_to_steady <= 0) return 0;
  const double remaining = 1.0 - static_cast<double>(std::max(iteration_index, 0)) /
                                     static_cast<double>(warmup_iterations_to_steady);
  return warmup_initial_slowdown * remaining * remaining;
}

double PerfNoiseModel::sample_throughput(double steady, int iteration_index, Rng& rng) const {
  // Draw every random number every time, so a change of one parameter does not shift the
  // streams of later samples.
  const double noise = rng.normal();
  const bool outlier = rng.bernoulli(outlier_probability);
  const double outlier_slowdown = rng.uniform(outlier_slowdown_min, outlier_slowdown_max);
  double value = steady * (1.0 + relative_sigma * noise) / (1.0 + warmup_slowdown(iteration_index));
  if (outlier) value /= 1.0 + outlier_slowdown;
  return std::max(value, steady * 1e-6);
}

Status validate(const PerfNoiseModel& model) {
  if (!(model.relative_sigma >= 0 && model.relative_sigma < 0.3)) {
    return fail(Errc::invalid_argument, "relative_sigma must be in [0, 0.3), e.g. 0.01 for 1% noise");
  }
  if (!(model.outlier_probability >= 0 && model.outlier_probability <= 1)) {
    return fail(Errc::invalid_argument, "outlier_probability must be in [0, 1]");
  }
  if (!(model.outlier_slowdown_min >= 0 && model.outlier_slowdown_min <= model.outlier_slowdown_max)) {
    return fail(Errc::invalid_argument,
                "outlier slowdowns must satisfy 0 <= outlier_slowdown_min <= outlier_slowdown_max");
  }
  if (model.warmup_iterations_to_steady < 0 || !(model.warmup_initial_slowdown >= 0)) {
    return fail(Errc::invalid_argument,
                "warmup_iterations_to_steady and warmup_initial_slowdown must not be negative");
  }
  return {};
}

namespace {

double median_of(std::span<const double> values) {
  std::vector<double> sorted(values.begin(), values.end());
  std::sort(sorted.begin(), sorted.end());
  const std::size_t mid = sorted.size() / 2;
  return sorted.size() % 2 == 1 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2.0;
}

}  // namespace

bool warmup_is_steady(std::span<const double> samples, const SteadyStateOptions& options) {
  KILN_ASSERT(options.window >= 2, "a steady window needs at least two samples");
  const auto window = static_cast<std::size_t>(options.window);
  if (samples.size() < 2 * window) return false;
  const std::span<const double> last = samples.last(window);
  const std::span<const double> before = samples.subspan(samples.size() - 2 * window, window);
  const double last_median = median_of(last);
  const double before_median = median_of(before);
  if (!(last_median > 0 && before_median > 0)) return false;
  const auto [low, high] = std::minmax_element(last.begin(), last.end());
  if ((*high - *low) / last_median > options.tolerance) return false;
  return std::abs(last_median - before_median) / last_median <= options.drift_tolerance;
}

}  // namespace kiln::sim

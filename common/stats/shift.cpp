#include "common/stats/shift.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <string>
#include <vector>

#include "common/stats/mann_whitney.h"
#include "common/stats/rng.h"

namespace kiln::stats {
namespace {

Status check_sides(std::span<const double> baseline, std::span<const double> candidate) {
  if (baseline.empty() || candidate.empty()) {
    return fail(Errc::invalid_argument,
                "a shift needs samples on both sides; give at least one baseline and one "
                "candidate value");
  }
  for (auto side : {baseline, candidate}) {
    for (double v : side) {
      if (!std::isfinite(v)) {
        return fail(Errc::invalid_argument,
                    "a sample holds a non-finite value; remove NaN and infinite measurements");
      }
    }
  }
  return {};
}

Status check_baseline_median(double baseline_median) {
  if (!(baseline_median > 0)) {
    return fail(Errc::invalid_argument,
                "the baseline median is " + std::to_string(baseline_median) +
                    "; a relative shift needs a positive baseline (throughput, latency or time "
                    "values)");
  }
  return {};
}

// Median of a sorted sample in which value i appears weight[i] times (total = sum of weights).
double weighted_sorted_median(std::span<const double> sorted, std::span<const std::uint32_t> weight,
                              std::uint64_t total) {
  const std::uint64_t lower_rank = (total + 1) / 2;  // 1-based ranks of the middle values
  const std::uint64_t upper_rank = total / 2 + 1;
  std::uint64_t cumulative = 0;
  double lower = 0;
  for (std::size_t i = 0; i < sorted.size(); ++i) {
    if (weight[i] == 0) continue;
    const std::uint64_t before = cumulative;
    cumulative += weight[i];
    if (before < lower_rank && cumulative >= lower_rank) lower = sorted[i];
    if (cumulative >= upper_rank) return (lower + sorted[i]) / 2.0;
  }
  KILN_ASSERT(false, "weighted median ran past the total weight");
  return 0;
}


double quantile_of_sorted(const std::vector<double>& sorted, double probability) {
  const double position = probability * static_cast<double>(sorted.size() - 1);
  const auto below = static_cast<std::size_t>(std::floor(position));
  const std::size_t above = std::min(below + 1, sorted.size() - 1);
  const double fraction = position - static_cast<double>(below);
  return sorted[below] + fraction * (sorted[above] - sorted[below]);
}

}  // namespace

// Acklam's rational approximation, relative error < 1.2e-9: enough for critical values.
double normal_quantile(double p) {
  KILN_ASSERT(p > 0 && p < 1, "normal quantile of a probability outside (0, 1)");
  static constexpr double a[] = {-3.969683028665376e+01, 2.209460984245205e+02, -2.759285104469687e+02,
                                 1.383577518672690e+02, -3.066479806614716e+01, 2.506628277459239e+00};
  static constexpr double b[] = {-5.447609879822406e+01, 1.615858368580409e+02, -1.556989798598866e+02,
                                 6.680131188771972e+01, -1.328068155288572e+01};
  static constexpr double c[] = {-7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e+00,
                                 -2.549732539343734e+00, 4.374664141464968e+00, 2.938163982698783e+00};
  static constexpr double d[] = {7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e+00,
                                 3.754408661907416e+00};
  constexpr double low = 0.02425;
  if (p < low) {
    const double q = std::sqrt(-2 * std::log(p));
    return (((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) /
           ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1);
  }
  if (p > 1 - low) {
    const double q = std::sqrt(-2 * std::log(1 - p));
    return -(((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) /
           ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1);
  }
  const double q = p - 0.5;
  const double r = q * q;
  return (((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5]) * q /
         (((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1);
}

Status validate(const BootstrapOptions& options) {
  if (options.resamples < 100 || options.resamples > 1'000'000) {
    return fail(Errc::invalid_argument,
                "bootstrap resamples must be between 100 and 1000000 (got " +
                    std::to_string(options.resamples) + ")");
  }
  if (!(options.confidence > 0.5 && options.confidence < 1.0)) {
    return fail(Errc::invalid_argument,
                "bootstrap confidence must be between 0.5 and 1 exclusive, e.g. 0.95");
  }
  return {};
}

double median(std::span<const double> sample) {
  KILN_ASSERT(!sample.empty(), "median of an empty sample");
  std::vector<double> copy(sample.begin(), sample.end());
  const std::size_t mid = copy.size() / 2;
  std::nth_element(copy.begin(), copy.begin() + static_cast<std::ptrdiff_t>(mid), copy.end());
  const double upper = copy[mid];
  if (copy.size() % 2 == 1) return upper;
  const double lower = *std::max_element(copy.begin(), copy.begin() + static_cast<std::ptrdiff_t>(mid));
  return (lower + upper) / 2.0;
}

Result<ShiftEstimate> estimate_shift(std::span<const double> baseline,
                                     std::span<const double> candidate) {
  if (auto ok = check_sides(baseline, candidate); !ok) return tl::unexpected(ok.error());
  ShiftEstimate estimate;
  estimate.baseline_median = median(baseline);
  if (auto ok = check_baseline_median(estimate.baseline_median); !ok) {
    return tl::unexpected(ok.error());
  }
  std::vector<double> differences;
  differences.reserve(baseline.size() * candidate.size());
  for (double c : candidate) {
    for (double b : baseline) differences.push_back(c - b);
  }
  estimate.hodges_lehmann = median(differences);
  estimate.relative = estimate.hodges_lehmann / estimate.baseline_median;
  return estimate;
}

Result<ConfidenceInterval> rank_relative_shift_ci(std::span<const double> baseline,
                                                  std::span<const double> candidate,
                                                  double confidence) {
  if (!(confidence > 0.5 && confidence < 1.0)) {
    return fail(Errc::invalid_argument, "confidence must be between 0.5 and 1 exclusive, e.g. 0.95");
  }
  auto test = mann_whitney_u(baseline, candidate);
  if (!test) return tl::unexpected(test.error());
  const double baseline_median = median(baseline);
  if (auto ok = check_baseline_median(baseline_median); !ok) return tl::unexpected(ok.error());

  const std::size_t n1 = baseline.size();
  const std::size_t n2 = candidate.size();
  const std::size_t pair_count = n1 * n2;
  const double tail = (1.0 - confidence) / 2.0;
  // k: the largest rank with P(U <= k - 1) <= tail under the null; 0 when even U = 0 is too likely.
  std::size_t k = 0;
  if (test->method == MannWhitneyMethod::exact) {
    const std::vector<double>& cdf = exact_mann_whitney_cdf(n1, n2);
    // The relative slack keeps a tail that equals the nominal one (1/20 at 90% for 3 a side)
    // from being lost to rounding in 1 - confidence.
    while (k < pair_count && cdf[k] <= tail * (1 + 1e-9)) ++k;
  } else {
    const double centre = static_cast<double>(pair_count) / 2.0;
    const double critical = centre - normal_quantile(1.0 - tail) * test->u_standard_deviation;
    k = critical < 1.0 ? 0 : static_cast<std::size_t>(std::floor(critical));
  }

  ConfidenceInterval interval;
  interval.confidence = confidence;
  if (k == 0) {
    interval.low = -std::numeric_limits<double>::infinity();
    interval.high = std::numeric_limits<double>::infinity();
    return interval;
  }
  std::vector<double> differences;
  differences.reserve(pair_count);
  for (double c : candidate) {
    for (double b : baseline) differences.push_back(c - b);
  }
  auto kth = [&](std::size_t rank) {  // 1-based
    std::nth_element(differences.begin(), differences.begin() + static_cast<std::ptrdiff_t>(rank - 1),
                     differences.end());
    return differences[rank - 1];
  };
  interval.low = kth(k) / baseline_median;
  interval.high = kth(pair_count + 1 - k) / baseline_median;
  return interval;
}

Result<ConfidenceInterval> bootstrap_relative_shift_ci(std::span<const double> baseline,
                                                       std::span<const double> candidate,
                                                       const BootstrapOptions& options) {
  if (auto ok = validate(options); !ok) return tl::unexpected(ok.error());
  if (auto ok = check_sides(baseline, candidate); !ok) return tl::unexpected(ok.error());
  if (auto ok = check_baseline_median(median(baseline)); !ok) return tl::unexpected(ok.error());

  // A resample is a multiset of the original values, so its pairwise differences are the
  // original ones with multiplicity (count of b_i) * (count of c_j). Sorting the original
  // differences once turns every resample's Hodges-Lehmann estimate into a weighted-median
  // scan, without re-sorting n1*n2 values per resample.
  const std::size_t n1 = baseline.size();
  const std::size_t n2 = candidate.size();
  std::vector<double> sorted_baseline(baseline.begin(), baseline.end());
  std::sort(sorted_baseline.begin(), sorted_baseline.end());
  struct Pair {
    double difference;
    std::uint32_t baseline_index;
    std::uint32_t candidate_index;
  };
  std::vector<Pair> pairs;
  pairs.reserve(n1 * n2);
  for (std::size_t j = 0; j < n2; ++j) {
    for (std::size_t i = 0; i < n1; ++i) {
      pairs.push_back({candidate[j] - sorted_baseline[i], static_cast<std::uint32_t>(i),
                       static_cast<std::uint32_t>(j)});
    }
  }
  std::sort(pairs.begin(), pairs.end(), [](const Pair& a, const Pair& b) {
    if (a.difference != b.difference) return a.difference < b.difference;
    if (a.baseline_index != b.baseline_index) return a.baseline_index < b.baseline_index;
    return a.candidate_index < b.candidate_index;
  });

  Rng rng(options.seed);
  std::vector<std::uint32_t> baseline_count(n1);
  std::vector<std::uint32_t> candidate_count(n2);
  std::vector<double> relative_shifts;
  relative_shifts.reserve(static_cast<std::size_t>(options.resamples));
  const std::uint64_t total_pairs = static_cast<std::uint64_t>(n1) * n2;
  const std::uint64_t lower_rank = (total_pairs + 1) / 2;
  const std::uint64_t upper_rank = total_pairs / 2 + 1;

  for (int r = 0; r < options.resamples; ++r) {
    std::fill(baseline_count.begin(), baseline_count.end(), 0);
    std::fill(candidate_count.begin(), candidate_count.end(), 0);
    for (std::size_t k = 0; k < n1; ++k) ++baseline_count[rng.below(n1)];
    for (std::size_t k = 0; k < n2; ++k) ++candidate_count[rng.below(n2)];

    const double resampled_median = weighted_sorted_median(sorted_baseline, baseline_count, n1);
    // Only a baseline that mixes non-positive values can resample to a non-positive median;
    // such a resample has no relative shift and is left out.
    if (!(resampled_median > 0)) continue;

    std::uint64_t cumulative = 0;
    double lower = 0;
    double hodges_lehmann = 0;
    for (const Pair& pair : pairs) {
      const std::uint64_t weight = static_cast<std::uint64_t>(baseline_count[pair.baseline_index]) *
                                   candidate_count[pair.candidate_index];
      if (weight == 0) continue;
      const std::uint64_t before = cumulative;
      cumulative += weight;
      if (before < lower_rank && cumulative >= lower_rank) lower = pair.difference;
      if (cumulative >= upper_rank) {
        hodges_lehmann = (lower + pair.difference) / 2.0;
        break;
      }
    }
    relative_shifts.push_back(hodges_lehmann / resampled_median);
  }

  if (relative_shifts.size() < static_cast<std::size_t>(options.resamples) / 2) {
    return fail(Errc::invalid_argument,
                "most bootstrap resamples of the baseline have a non-positive median; relative "
                "shifts need positive measurements (throughput, latency or time values)");
  }
  std::sort(relative_shifts.begin(), relative_shifts.end());
  const double tail = (1.0 - options.confidence) / 2.0;
  ConfidenceInterval interval;
  interval.confidence = options.confidence;
  interval.low = quantile_of_sorted(relative_shifts, tail);
  interval.high = quantile_of_sorted(relative_shifts, 1.0 - tail);
  return interval;
}

}  // namespace kiln::stats

#include "common/stats/shift.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <string>
#include <vector>

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

#include "common/stats/mann_whitney.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <string>
#include <utility>

namespace kiln::stats {
namespace {

__extension__ using Count = unsigned __int128;

// Number of rank arrangements giving each U value: the coefficients of the Gaussian binomial
// [n1+n2 choose n1]_q = prod_{i=1..n1} (1 - q^(n2+i)) / (1 - q^i). Computed modulo 2^128: every
// intermediate product is itself a Gaussian binomial with non-negative coefficients below
// C(100, 50) < 2^128, so the wrap-around arithmetic is exact.
std::vector<Count> exact_counts(std::size_t n1, std::size_t n2) {
  const std::size_t degree = n1 * n2;
  std::vector<Count> poly(degree + 1, 0);
  poly[0] = 1;
  for (std::size_t i = 1; i <= n1; ++i) {
    const std::size_t up = n2 + i;
    for (std::size_t j = degree; j >= up; --j) poly[j] -= poly[j - up];
    for (std::size_t j = i; j <= degree; ++j) poly[j] += poly[j - i];
  }
  return poly;
}

Status check_sample(std::span<const double> sample, std::string_view side) {
  if (sample.empty()) {
    return fail(Errc::invalid_argument,
                std::string("the ") + std::string(side) +
                    " sample is empty; give at least one value (5 or more per side for a usable test)");
  }
  for (double value : sample) {
    if (!std::isfinite(value)) {
      return fail(Errc::invalid_argument, std::string("the ") + std::string(side) +
                                              " sample holds a non-finite value; remove NaN and "
                                              "infinite measurements before comparing");
    }
  }
  return {};
}

}  // namespace

const std::vector<double>& exact_mann_whitney_cdf(std::size_t n1, std::size_t n2) {
  KILN_ASSERT(n1 >= 1 && n2 >= 1, "exact Mann-Whitney needs non-empty samples");
  KILN_ASSERT(n1 <= kExactMannWhitneyMaxSampleSize && n2 <= kExactMannWhitneyMaxSampleSize,
              "exact Mann-Whitney counts overflow 128 bits beyond 50 per side");
  thread_local std::map<std::pair<std::size_t, std::size_t>, std::vector<double>> cache;
  const auto key = std::minmax(n1, n2);
  auto found = cache.find(key);
  if (found != cache.end()) return found->second;

  const std::vector<Count> counts = exact_counts(key.first, key.second);
  Count total = 0;
  for (Count c : counts) total += c;
  std::vector<double> cdf(counts.size());
  Count running = 0;
  for (std::size_t u = 0; u < counts.size(); ++u) {
    running += counts[u];
    // Ratio in long double keeps tail probabilities of 1e-29 representable and accurate.
    cdf[u] = static_cast<double>(static_cast<long double>(running) / static_cast<long double>(total));
  }
  return cache.emplace(key, std::move(cdf)).first->second;
}

double exact_mann_whitney_p_value(std::size_t n1, std::size_t n2, double u) {
  const std::vector<double>& cdf = exact_mann_whitney_cdf(n1, n2);
  const auto max_u = static_cast<long>(n1 * n2);
  const auto u_int = static_cast<long>(std::lround(u));
  KILN_ASSERT(u_int >= 0 && u_int <= max_u, "U outside 0..n1*n2");
  // The distribution is symmetric: P(U >= u) = P(U <= n1*n2 - u).
  const double lower = cdf[static_cast<std::size_t>(u_int)];
  const double upper = cdf[static_cast<std::size_t>(max_u - u_int)];
  return std::min(1.0, 2.0 * std::min(lower, upper));
}

Result<MannWhitneyResult> mann_whitney_u(std::span<const double> baseline,
                                         std::span<const double> candidate) {
  if (auto ok = check_sample(baseline, "baseline"); !ok) return tl::unexpected(ok.error());
  if (auto ok = check_sample(candidate, "candidate"); !ok) return tl::unexpected(ok.error());

  const std::size_t n1 = baseline.size();
  const std::size_t n2 = candidate.size();
  const std::size_t n = n1 + n2;

  // Pool with a side marker, sort, and give tied values their average rank.
  std::vector<std::pair<double, bool>> pooled;  // (value, is_candidate)
  pooled.reserve(n);
  for (double v : baseline) pooled.emplace_back(v, false);
  for (double v : candidate) pooled.emplace_back(v, true);
  std::sort(pooled.begin(), pooled.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });

  double candidate_rank_sum = 0;
  double tie_term = 0;  // sum of t^3 - t over tie groups
  bool has_ties = false;
  for (std::size_t i = 0; i < n;) {
    std::size_t j = i + 1;
    while (j < n && pooled[j].first == pooled[i].first) ++j;
    const double t = static_cast<double>(j - i);
    const double average_rank = (static_cast<double>(i + 1) + static_cast<double>(j)) / 2.0;
    for (std::size_t k = i; k < j; ++k) {
      if (pooled[k].second) candidate_rank_sum += average_rank;
    }
    if (j - i > 1) {
      has_ties = true;
      tie_term += t * t * t - t;
    }
    i = j;
  }

  MannWhitneyResult result;
  result.n_baseline = n1;
  result.n_candidate = n2;
  result.has_ties = has_ties;
  const double d1 = static_cast<double>(n1);
  const double d2 = static_cast<double>(n2);
  result.u_candidate = candidate_rank_sum - d2 * (d2 + 1.0) / 2.0;
  result.u_baseline = d1 * d2 - result.u_candidate;

  const double dn = static_cast<double>(n);
  const double variance = d1 * d2 / 12.0 * ((dn + 1.0) - tie_term / (dn * (dn - 1.0)));
  result.u_standard_deviation = variance > 0 ? std::sqrt(variance) : 0.0;

  if (!has_ties && n1 <= kExactMannWhitneyMaxSampleSize && n2 <= kExactMannWhitneyMaxSampleSize) {
    result.method = MannWhitneyMethod::exact;
    result.p_value = exact_mann_whitney_p_value(n1, n2, result.u_candidate);
    return result;
  }

  result.method = MannWhitneyMethod::normal_approximation;
  const double mean = d1 * d2 / 2.0;
  if (variance <= 0) {  // every value equal: no evidence of any difference
    result.p_value = 1.0;
    return result;
  }
  const double deviation = result.u_candidate - mean;
  const double corrected = std::max(0.0, std::abs(deviation) - 0.5);
  const double z = corrected / result.u_standard_deviation;
  result.z = deviation < 0 ? -z : z;
  result.p_value = std::min(1.0, std::erfc(z / std::sqrt(2.0)));
  return result;
}

}  // namespace kiln::stats

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "common/stats/mann_whitney.h"
#include "common/stats/perf_gate.h"

using namespace kiln::stats;

namespace {

// Null distribution of U by brute force: every choice of which n2 of the n1+n2 ranks belong to
// the candidate, U = rank sum - n2(n2+1)/2. Independent of the generating-function code.
std::vector<double> enumerated_cdf(int n1, int n2) {
  const int n = n1 + n2;
  std::vector<double> counts(static_cast<std::size_t>(n1 * n2 + 1), 0);
  double total = 0;
  for (unsigned mask = 0; mask < (1u << n); ++mask) {
    if (__builtin_popcount(mask) != n2) continue;
    int rank_sum = 0;
    for (int r = 0; r < n; ++r) {
      if (mask & (1u << r)) rank_sum += r + 1;
    }
    counts[static_cast<std::size_t>(rank_sum - n2 * (n2 + 1) / 2)] += 1;
    total += 1;
  }
  std::vector<double> cdf(counts.size());
  double running = 0;
  for (std::size_t u = 0; u < counts.size(); ++u) {
    running += counts[u];
    cdf[u] = running / total;
  }
  return cdf;
}

}  // namespace

TEST_CASE("exact null distribution matches enumeration of all rank arrangements") {
  for (auto [n1, n2] : {std::pair{1, 1}, {3, 3}, {4, 4}, {3, 7}, {5, 5}, {6, 4}, {8, 8}}) {
    CAPTURE(n1);
    CAPTURE(n2);
    const std::vector<double> expected = enumerated_cdf(n1, n2);
    const std::vector<double>& actual = exact_mann_whitney_cdf(static_cast<std::size_t>(n1), static_cast<std::size_t>(n2));
    REQUIRE(actual.size() == expected.size());
    for (std::size_t u = 0; u < expected.size(); ++u) CHECK(actual[u] == doctest::Approx(expected[u]).epsilon(1e-12));
  }
}

TEST_CASE("4 samples a side can never reach p < 0.01; 5 a side can") {
  // Complete separation is the most extreme outcome: one-sided 1/70, two-sided 2/70.
  const std::vector<double> low = {1, 2, 3, 4};
  const std::vector<double> high = {5, 6, 7, 8};
  auto result = mann_whitney_u(low, high);
  REQUIRE(result);
  CHECK(result->method == MannWhitneyMethod::exact);
  CHECK(result->u_candidate == 16);
  CHECK(result->p_value == doctest::Approx(2.0 / 70.0));
  CHECK(result->p_value > 0.01);
  CHECK(exact_mann_whitney_cdf(4, 4)[0] == doctest::Approx(1.0 / 70.0));
  CHECK(smallest_exact_p_value(4, 4) == doctest::Approx(1.0 / 35.0));

  auto five = mann_whitney_u(std::vector<double>{1, 2, 3, 4, 5}, std::vector<double>{6, 7, 8, 9, 10});
  REQUIRE(five);
  CHECK(five->p_value == doctest::Approx(2.0 / 252.0));
  CHECK(five->p_value < 0.01);
  CHECK(smallest_exact_p_value(5, 5) == doctest::Approx(2.0 / 252.0));
}

TEST_CASE("exact p-values of hand-computed cases") {
  // [1 3 5] vs [2 4 6]: U = 1 + 2 + 3 = 6 of 9; P(U >= 6) = 7/20, two-sided 0.7.
  auto interleaved = mann_whitney_u(std::vector<double>{1, 3, 5}, std::vector<double>{2, 4, 6});
  REQUIRE(interleaved);
  CHECK(interleaved->u_candidate == 6);
  CHECK(interleaved->u_baseline == 3);
  CHECK(interleaved->p_value == doctest::Approx(0.7));

  // [1 2 3] vs [4 5 6]: the single most extreme arrangement of 20, two-sided 0.1.
  auto separated = mann_whitney_u(std::vector<double>{1, 2, 3}, std::vector<double>{4, 5, 6});
  REQUIRE(separated);
  CHECK(separated->p_value == doctest::Approx(0.1));

  // The test is symmetric: swapping the sides keeps p and swaps U.
  auto swapped = mann_whitney_u(std::vector<double>{2, 4, 6}, std::vector<double>{1, 3, 5});
  REQUIRE(swapped);
  CHECK(swapped->u_candidate == 3);
  CHECK(swapped->p_value == doctest::Approx(interleaved->p_value));
}

TEST_CASE("exact counts stay exact at 50 a side") {
  const std::vector<double>& cdf = exact_mann_whitney_cdf(50, 50);
  REQUIRE(cdf.size() == 2501);
  // P(U = 0) = 1 / C(100, 50) = 9.9e-30, representable and positive.
  CHECK(cdf[0] > 0);
  CHECK(cdf[0] == doctest::Approx(1.0 / 1.0089134454556417e29).epsilon(1e-9));
  CHECK(cdf[2500] == doctest::Approx(1.0));
  CHECK(cdf[1250] == doctest::Approx(0.5 + (cdf[1250] - cdf[1249]) / 2).epsilon(1e-9));
}

TEST_CASE("ties use the normal approximation with tie and continuity correction") {
  // Values checked by hand: U counts ties as one half; variance n1 n2 / 12 * (N + 1 - sum(t^3 - t)
  // / (N (N - 1))) with tie groups {2 x3, 3 x3, 4 x2}.
  auto result = mann_whitney_u(std::vector<double>{1, 2, 2, 3, 4}, std::vector<double>{2, 3, 3, 4, 5, 6});
  REQUIRE(result);
  CHECK(result->has_ties);
  CHECK(result->method == MannWhitneyMethod::normal_approximation);
  CHECK(result->u_candidate == doctest::Approx(23.5));
  CHECK(result->u_standard_deviation == doctest::Approx(5.364021557817164));
  CHECK(result->p_value == doctest::Approx(0.13585170221660403).epsilon(1e-9));

  auto all_equal = mann_whitney_u(std::vector<double>{7, 7, 7}, std::vector<double>{7, 7});
  REQUIRE(all_equal);
  CHECK(all_equal->p_value == 1.0);
}

TEST_CASE("large samples use the normal approximation") {
  std::vector<double> baseline;
  std::vector<double> candidate;
  for (int i = 0; i < 60; ++i) {
    baseline.push_back(i);
    candidate.push_back(i + 5.5);
  }
  auto result = mann_whitney_u(baseline, candidate);
  REQUIRE(result);
  CHECK_FALSE(result->has_ties);
  CHECK(result->method == MannWhitneyMethod::normal_approximation);
  CHECK(result->u_candidate == 2115);
  CHECK(result->p_value == doctest::Approx(0.0988004799200349).epsilon(1e-9));
  CHECK(result->z > 0);
}

TEST_CASE("the normal approximation agrees with the exact test at moderate sizes") {
  std::vector<double> baseline;
  std::vector<double> candidate;
  for (int i = 0; i < 30; ++i) {
    baseline.push_back(i);
    candidate.push_back(i + 6.5);
  }
  auto exact = mann_whitney_u(baseline, candidate);
  REQUIRE(exact);
  REQUIRE(exact->method == MannWhitneyMethod::exact);
  const double mean = 450;
  const double z = (std::abs(exact->u_candidate - mean) - 0.5) / exact->u_standard_deviation;
  CHECK(std::erfc(z / std::sqrt(2.0)) == doctest::Approx(exact->p_value).epsilon(0.03));
}

TEST_CASE("bad samples are errors, not crashes") {
  CHECK_FALSE(mann_whitney_u(std::vector<double>{}, std::vector<double>{1.0}));
  auto nan = mann_whitney_u(std::vector<double>{1.0, std::numeric_limits<double>::quiet_NaN()},
                            std::vector<double>{1.0});
  REQUIRE_FALSE(nan);
  CHECK(nan.error().code == kiln::Errc::invalid_argument);
}

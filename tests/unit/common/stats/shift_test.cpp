#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "common/stats/rng.h"
#include "common/stats/shift.h"

using namespace kiln::stats;

TEST_CASE("Hodges-Lehmann shift on hand cases") {
  // Differences candidate - baseline: {3,2,1, 4,3,2, 5,4,3}; median 3. Baseline median 2.
  auto odd = estimate_shift(std::vector<double>{1, 2, 3}, std::vector<double>{4, 5, 6});
  REQUIRE(odd);
  CHECK(odd->hodges_lehmann == 3);
  CHECK(odd->baseline_median == 2);
  CHECK(odd->relative == 1.5);

  // Differences {2, 1, 4, 3}: even count, median 2.5; baseline median 1.5.
  auto even = estimate_shift(std::vector<double>{1, 2}, std::vector<double>{3, 5});
  REQUIRE(even);
  CHECK(even->hodges_lehmann == 2.5);
  CHECK(even->relative == doctest::Approx(2.5 / 1.5));

  // An outlier moves the mean difference but not the Hodges-Lehmann shift much.
  auto robust = estimate_shift(std::vector<double>{100, 101, 102, 103, 104},
                               std::vector<double>{98, 99, 100, 101, 50});
  REQUIRE(robust);
  CHECK(robust->hodges_lehmann == -3);
}

TEST_CASE("a relative shift needs a positive baseline median") {
  auto zero = estimate_shift(std::vector<double>{-1, 0, 1}, std::vector<double>{2, 3, 4});
  REQUIRE_FALSE(zero);
  CHECK(zero.error().message.find("positive") != std::string::npos);
}

TEST_CASE("the bootstrap interval is deterministic under a seed") {
  Rng rng(5);
  std::vector<double> baseline;
  std::vector<double> candidate;
  for (int i = 0; i < 12; ++i) {
    baseline.push_back(1000 * (1 + 0.01 * rng.normal()));
    candidate.push_back(970 * (1 + 0.01 * rng.normal()));
  }
  BootstrapOptions options{2000, 0.95, 42};
  auto first = bootstrap_relative_shift_ci(baseline, candidate, options);
  auto again = bootstrap_relative_shift_ci(baseline, candidate, options);
  REQUIRE(first);
  REQUIRE(again);
  CHECK(first->low == again->low);
  CHECK(first->high == again->high);
  CHECK(first->confidence == 0.95);

  options.seed = 43;
  auto other = bootstrap_relative_shift_ci(baseline, candidate, options);
  REQUIRE(other);
  CHECK((other->low != first->low || other->high != first->high));

  // A 3% drop at 1% noise: the interval holds the estimate and excludes zero.
  auto shift = estimate_shift(baseline, candidate);
  REQUIRE(shift);
  CHECK(first->low < shift->relative);
  CHECK(shift->relative < first->high);
  CHECK(first->high < 0);
  CHECK(first->low > -0.06);

  options.resamples = 10;
  auto too_few = bootstrap_relative_shift_ci(baseline, candidate, options);
  REQUIRE_FALSE(too_few);
  CHECK(too_few.error().code == kiln::Errc::invalid_argument);
}

TEST_CASE("rank interval on a hand case and when samples are too few") {
  // 3 vs 3 at 90%: P(U <= 0) = 1/20 = 0.05 fits the 5% tail, so k = 1: the smallest and the
  // largest difference, {1 .. 5}, over the baseline median 2.
  auto interval = rank_relative_shift_ci(std::vector<double>{1, 2, 3}, std::vector<double>{4, 5, 6}, 0.90);
  REQUIRE(interval);
  CHECK(interval->low == 0.5);
  CHECK(interval->high == 2.5);

  // 5 a side cannot give 99.9%: the smallest tail 1/252 exceeds 0.05%.
  auto unbounded = rank_relative_shift_ci(std::vector<double>{1, 2, 3, 4, 5},
                                          std::vector<double>{6, 7, 8, 9, 10}, 0.999);
  REQUIRE(unbounded);
  CHECK(std::isinf(unbounded->low));
  CHECK(std::isinf(unbounded->high));
}

TEST_CASE("rank interval covers a true shift at least as often as stated") {
  Rng rng(11);
  int covered = 0;
  const int trials = 2000;
  for (int t = 0; t < trials; ++t) {
    std::vector<double> baseline;
    std::vector<double> candidate;
    for (int i = 0; i < 10; ++i) {
      baseline.push_back(100 + rng.normal());
      candidate.push_back(98 + rng.normal());
    }
    auto interval = rank_relative_shift_ci(baseline, candidate, 0.9);
    REQUIRE(interval);
    const double median_baseline = median(baseline);
    if (interval->low * median_baseline <= -2 && -2 <= interval->high * median_baseline) ++covered;
  }
  // Exact coverage for 10 a side at k from the 5% tail is 1 - 2 * P(U <= k - 1) >= 0.9.
  CHECK(static_cast<double>(covered) / trials > 0.88);
  CHECK(static_cast<double>(covered) / trials < 0.95);
}

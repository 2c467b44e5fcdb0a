#include <doctest/doctest.h>

#include <vector>

#include "common/stats/fdr.h"

using namespace kiln::stats;

TEST_CASE("Benjamini-Hochberg on the 15 p-values of the original paper") {
  // Benjamini and Hochberg (1995), section 4: at q = 0.05 the procedure rejects the four
  // smallest, where Bonferroni rejects three.
  const std::vector<double> p = {0.0001, 0.0004, 0.0019, 0.0095, 0.0201, 0.0278, 0.0298, 0.0344,
                                 0.0459, 0.3240, 0.4262, 0.5719, 0.6528, 0.7590, 1.0000};
  auto result = benjamini_hochberg(p, 0.05);
  REQUIRE(result);
  CHECK(result->rejection_count == 4);
  for (std::size_t i = 0; i < p.size(); ++i) CHECK(result->rejected[i] == (i < 4));
  CHECK(result->adjusted_p_values[3] == doctest::Approx(0.0095 * 15 / 4));
  CHECK(result->adjusted_p_values[14] == 1.0);
}

TEST_CASE("adjusted p-values are monotone in the original order and capped at 1") {
  const std::vector<double> p = {0.01, 0.04, 0.03, 0.005};
  auto result = benjamini_hochberg(p, 0.05);
  REQUIRE(result);
  // Sorted 0.005, 0.01, 0.03, 0.04 scale to 0.02, 0.02, 0.04, 0.04.
  CHECK(result->adjusted_p_values[0] == doctest::Approx(0.02));
  CHECK(result->adjusted_p_values[1] == doctest::Approx(0.04));
  CHECK(result->adjusted_p_values[2] == doctest::Approx(0.04));
  CHECK(result->adjusted_p_values[3] == doctest::Approx(0.02));
  CHECK(result->rejection_count == 4);

  auto strict = benjamini_hochberg(p, 0.03);
  REQUIRE(strict);
  CHECK(strict->rejection_count == 2);
}

TEST_CASE("a larger family counts missing hypotheses as p = 1") {
  auto alone = benjamini_hochberg(std::vector<double>{0.01}, 0.05, 60);
  REQUIRE(alone);
  CHECK(alone->adjusted_p_values[0] == doctest::Approx(0.6));
  CHECK_FALSE(alone->rejected[0]);

  CHECK_FALSE(benjamini_hochberg(std::vector<double>{0.01, 0.02}, 0.05, 1));
  CHECK_FALSE(benjamini_hochberg(std::vector<double>{1.5}, 0.05));
  CHECK_FALSE(benjamini_hochberg(std::vector<double>{0.5}, 0.0));
  auto empty = benjamini_hochberg(std::vector<double>{}, 0.05);
  REQUIRE(empty);
  CHECK(empty->rejection_count == 0);
}

#include <doctest/doctest.h>

#include "common/stability/poisson.h"

namespace kiln::stability {

TEST_CASE("garwood interval matches the chi-square tables") {
  // Published exact 95% limits for a Poisson count (e.g. Ulm 1990, Table 1).
  const CountInterval zero = garwood_interval(0, 0.95);
  CHECK(zero.lower == 0.0);
  CHECK(zero.upper == doctest::Approx(3.6889).epsilon(1e-4));
  const CountInterval one = garwood_interval(1, 0.95);
  CHECK(one.lower == doctest::Approx(0.0253).epsilon(1e-3));
  CHECK(one.upper == doctest::Approx(5.5716).epsilon(1e-4));
  const CountInterval ten = garwood_interval(10, 0.95);
  CHECK(ten.lower == doctest::Approx(4.7954).epsilon(1e-4));
  CHECK(ten.upper == doctest::Approx(18.3904).epsilon(1e-4));
}

TEST_CASE("a higher confidence widens the interval on both sides") {
  const CountInterval narrow = garwood_interval(5, 0.90);
  const CountInterval wide = garwood_interval(5, 0.99);
  CHECK(wide.lower < narrow.lower);
  CHECK(wide.upper > narrow.upper);
  CHECK(narrow.lower < 5.0);
  CHECK(narrow.upper > 5.0);
}

TEST_CASE("a failure rate is per 1000 chip-hours of exposure") {
  const RateEstimate none = failure_rate(0, 500.0, 0.95);
  CHECK(none.per_1000_chip_hours == 0.0);
  CHECK(none.lower == 0.0);
  CHECK(none.upper == doctest::Approx(3.6889 * 2).epsilon(1e-4));  // 3.69 failures in 500 chip-hours
  const RateEstimate two = failure_rate(2, 4000.0, 0.95);
  CHECK(two.count == 2);
  CHECK(two.per_1000_chip_hours == doctest::Approx(0.5));
  CHECK(two.lower < 0.5);
  CHECK(two.upper > 0.5);
}

}  // namespace kiln::stability

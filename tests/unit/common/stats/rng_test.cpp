// The project's generator gives the same numbers everywhere: these are its first draws for
// seed 42. A change here changes every seeded simulation and benchmark; it must be deliberate.
#include <doctest/doctest.h>

#include "common/stats/rng.h"

using namespace kiln::stats;

TEST_CASE("seed 42 draws the same numbers on every platform") {
  Rng rng(42);
  CHECK(rng.next_u64() == 1546998764402558742ull);
  CHECK(rng.next_u64() == 6990951692964543102ull);
  CHECK(rng.uniform01() == doctest::Approx(0.68004341102813937).epsilon(1e-15));
  CHECK(rng.below(1000) == 924u);
  // Only log, exp and sqrt, whose results agree to the last bits across C libraries.
  CHECK(rng.normal() == doctest::Approx(0.46417731016247366).epsilon(1e-12));
  CHECK(rng.normal() == doctest::Approx(0.74097889168655617).epsilon(1e-12));
  CHECK(rng.exponential(2.0) == doctest::Approx(0.71642970146772755).epsilon(1e-12));
  CHECK(rng.lognormal(1.0, 0.5) == doctest::Approx(4.0435008569366984).epsilon(1e-12));
}

TEST_CASE("sub-seeds and name hashes are fixed functions of their inputs") {
  CHECK(derive_seed(42, 7) == 7974615062405353404ull);
  CHECK(derive_seed(42, 7) != derive_seed(42, 8));
  CHECK(stable_hash("nightly-2026-12-01") == 9551092956816205125ull);
  CHECK(stable_hash("") == 14087677454934409008ull);
  CHECK(stable_hash("nightly-2026-12-01") != stable_hash("nightly-2026-12-02"));
}

TEST_CASE("the distributions have the moments they claim") {
  Rng rng(7);
  const int n = 200000;
  double exp_sum = 0;
  double normal_sum = 0;
  double normal_sq = 0;
  std::uint64_t below_sum = 0;
  for (int i = 0; i < n; ++i) {
    exp_sum += rng.exponential(4.0);
    const double z = rng.normal();
    normal_sum += z;
    normal_sq += z * z;
    below_sum += rng.below(10);
  }
  CHECK(exp_sum / n == doctest::Approx(0.25).epsilon(0.01));
  CHECK(normal_sum / n == doctest::Approx(0.0).epsilon(0.01));
  CHECK(normal_sq / n == doctest::Approx(1.0).epsilon(0.01));
  CHECK(static_cast<double>(below_sum) / n == doctest::Approx(4.5).epsilon(0.01));
}

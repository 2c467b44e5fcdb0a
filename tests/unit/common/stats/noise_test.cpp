#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "common/stats/noise.h"
#include "common/stats/rng.h"

using namespace kiln::stats;

namespace {

// `batches` jobs of `repeats` samples at `level` each; a share of them `slowdown` slower.
std::vector<std::vector<double>> record(Rng& rng, int batches, int repeats, double sigma, double outlier_share = 0,
                                        double slowdown = 0.2) {
  std::vector<std::vector<double>> out;
  for (int b = 0; b < batches; ++b) {
    const double level = 1000 * (1 + 0.1 * b);  // another chip, another night: not noise
    std::vector<double> batch;
    for (int i = 0; i < repeats; ++i) {
      double value = level * (1 + sigma * rng.normal());
      if (rng.uniform(0, 1) < outlier_share) value /= 1 + slowdown;
      batch.push_back(value);
    }
    out.push_back(batch);
  }
  return out;
}

}  // namespace

TEST_CASE("noise from recorded batches: level differences between batches are not noise") {
  Rng rng(11);
  const auto batches = record(rng, 20, 10, 0.01);
  auto estimate = estimate_noise(batches, NoiseOptions{});
  REQUIRE(estimate.has_value());
  CHECK(estimate->batches == 20);
  CHECK(estimate->samples == 200);
  CHECK(estimate->measured_relative_sigma == doctest::Approx(0.01).epsilon(0.12));
  CHECK(estimate->outlier_fraction <= 0.01);  // 2 of 200 at most: no outliers were made
  // The plan's figure leans a little on the 2% prior and adds one standard error: above, not far.
  CHECK(estimate->relative_sigma > estimate->measured_relative_sigma);
  CHECK(estimate->relative_sigma < 1.2 * estimate->measured_relative_sigma);
}

TEST_CASE("slow outliers are counted apart and do not inflate the noise") {
  Rng rng(12);
  const auto batches = record(rng, 20, 10, 0.01, 0.05, 0.2);
  auto estimate = estimate_noise(batches, NoiseOptions{});
  REQUIRE(estimate.has_value());
  CHECK(estimate->outlier_fraction == doctest::Approx(0.05).epsilon(0.5));
  CHECK(estimate->measured_relative_sigma == doctest::Approx(0.01).epsilon(0.15));
}

TEST_CASE("without records the prior decides; with few it still weighs") {
  const NoiseOptions options;
  auto none = estimate_noise({}, options);
  REQUIRE(none.has_value());
  CHECK(none->samples == 0);
  CHECK(none->measured_relative_sigma == 0);
  CHECK(none->relative_sigma >= options.prior_relative_sigma);

  // Single-sample batches say nothing about spread.
  const std::vector<std::vector<double>> singles = {{100.0}, {105.0}};
  auto single = estimate_noise(singles, options);
  REQUIRE(single.has_value());
  CHECK(single->batches == 0);
  CHECK(single->relative_sigma == doctest::Approx(none->relative_sigma));

  Rng rng(13);
  auto few = estimate_noise(record(rng, 2, 3, 0.005), options);
  REQUIRE(few.has_value());
  CHECK(few->relative_sigma > 0.008);  // four degrees of freedom against the prior's five
  CHECK(few->relative_sigma < none->relative_sigma);
}

TEST_CASE("identical samples give the floor, broken ones an error") {
  const NoiseOptions options;
  const std::vector<std::vector<double>> flat = {std::vector<double>(30, 250.0)};
  NoiseOptions no_prior = options;
  no_prior.prior_weight_samples = 0;
  auto floor = estimate_noise(flat, no_prior);
  REQUIRE(floor.has_value());
  CHECK(floor->relative_sigma == doctest::Approx(options.floor_relative_sigma));

  const std::vector<std::vector<double>> broken = {{100.0, 101.0}, {100.0, -1.0}};
  auto error = estimate_noise(broken, options);
  REQUIRE_FALSE(error.has_value());
  CHECK(error.error().message.find("batch 1") != std::string::npos);

  NoiseOptions bad = options;
  bad.prior_relative_sigma = 0;
  CHECK_FALSE(validate(bad).has_value());
}

#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include <nlohmann/json.hpp>

#include "qualification/correctness.h"

namespace q = kiln::qualification;

namespace {

// A decaying loss logged every 5 steps, 100 points.
std::vector<q::LossPoint> reference_curve() {
  std::vector<q::LossPoint> curve;
  for (int i = 0; i < 100; ++i) curve.push_back({5 * (i + 1), 2.0 * std::exp(-0.02 * i) + 0.1});
  return curve;
}

std::vector<q::LossPoint> scaled(std::vector<q::LossPoint> curve, double factor) {
  for (auto& point : curve) point.loss *= factor;
  return curve;
}

}  // namespace

TEST_CASE("a run inside the band passes with its evidence") {
  auto run = reference_curve();
  for (std::size_t i = 0; i < run.size(); ++i) run[i].loss *= i % 2 == 0 ? 1.04 : 0.97;  // noise within 5%
  auto verdict = q::check_loss_curve(reference_curve(), run, {});
  REQUIRE(verdict.has_value());
  CHECK(verdict->passed);
  CHECK(verdict->points_compared == 100);
  CHECK(verdict->points_outside_band == 0);
  CHECK(verdict->points_allowed_outside == 1);
  CHECK(verdict->max_relative_deviation == doctest::Approx(0.04));
  CHECK(verdict->pointwise_failures.empty());
}

TEST_CASE("one point in a hundred may leave the band, two may not, and the failures are named") {
  auto run = reference_curve();
  run[40].loss *= 1.10;
  auto one = q::check_loss_curve(reference_curve(), run, {});
  REQUIRE(one.has_value());
  CHECK(one->passed);
  CHECK(one->points_outside_band == 1);

  run[70].loss *= 0.80;
  auto two = q::check_loss_curve(reference_curve(), run, {});
  REQUIRE(two.has_value());
  CHECK_FALSE(two->passed);
  REQUIRE(two->pointwise_failures.size() == 2);
  CHECK(two->pointwise_failures[0].step == 355);  // the worst (20%) first
  CHECK(two->pointwise_failures[0].relative_deviation == doctest::Approx(0.20));
  CHECK(two->pointwise_failures[1].step == 205);
  CHECK(two->pointwise_failures[1].problem == q::PointProblem::outside_band);
  CHECK(two->detail.find("2 of 100 points outside") != std::string::npos);
}

TEST_CASE("a NaN anywhere fails, even in warmup") {
  auto run = reference_curve();
  run[1].loss = std::numeric_limits<double>::quiet_NaN();
  q::LossCurveGateOptions options;
  options.warmup_steps = 50;
  auto verdict = q::check_loss_curve(reference_curve(), run, options);
  REQUIRE(verdict.has_value());
  CHECK_FALSE(verdict->passed);
  CHECK(verdict->saw_non_finite);
  CHECK(verdict->pointwise_failures.front().problem == q::PointProblem::not_finite);
  CHECK(verdict->detail.find("NaN") != std::string::npos);
}

TEST_CASE("points before warmup are not held to the band") {
  auto run = reference_curve();
  for (int i = 0; i < 4; ++i) run[static_cast<std::size_t>(i)].loss *= 1.5;
  q::LossCurveGateOptions options;
  CHECK_FALSE(q::check_loss_curve(reference_curve(), run, options)->passed);
  options.warmup_steps = 25;  // steps 5..20 are warmup
  auto verdict = q::check_loss_curve(reference_curve(), run, options);
  REQUIRE(verdict.has_value());
  CHECK(verdict->passed);
  CHECK(verdict->points_compared == 96);
}

TEST_CASE("a curve shifted inside the pointwise band fails on the moving average") {
  auto verdict = q::check_loss_curve(reference_curve(), scaled(reference_curve(), 1.04), {});
  REQUIRE(verdict.has_value());
  CHECK(verdict->points_outside_band == 0);
  CHECK_FALSE(verdict->moving_average_passed);
  CHECK_FALSE(verdict->passed);
  CHECK(verdict->max_moving_average_deviation == doctest::Approx(0.04));
  CHECK(verdict->moving_average_failures.size() == 20);  // capped at max_reported
  CHECK(q::check_loss_curve(reference_curve(), scaled(reference_curve(), 1.02), {})->passed);
}

TEST_CASE("a run that stopped early fails on the missing points") {
  auto run = reference_curve();
  run.resize(90);
  auto verdict = q::check_loss_curve(reference_curve(), run, {});
  REQUIRE(verdict.has_value());
  CHECK_FALSE(verdict->passed);
  CHECK(verdict->points_outside_band == 10);
  CHECK(verdict->pointwise_failures.front().problem == q::PointProblem::missing);
}

TEST_CASE("a broken reference is an error, not a verdict") {
  CHECK_FALSE(q::check_loss_curve({}, reference_curve(), {}).has_value());
  auto reference = reference_curve();
  reference[3].loss = std::numeric_limits<double>::infinity();
  CHECK(q::check_loss_curve(reference, reference_curve(), {}).error().message.find("golden") != std::string::npos);
  reference = reference_curve();
  reference[3].step = reference[2].step;
  CHECK_FALSE(q::check_loss_curve(reference, reference_curve(), {}).has_value());
  q::LossCurveGateOptions options;
  options.max_fraction_outside = 1.5;
  CHECK_FALSE(q::check_loss_curve(reference_curve(), reference_curve(), options).has_value());
}

TEST_CASE("the eval must reach the model's share of the reference") {
  auto pass = q::check_eval(0.981, 0.99);  // 99.1% of the reference
  REQUIRE(pass.has_value());
  CHECK(pass->passed);
  auto fail = q::check_eval(0.979, 0.99);
  CHECK_FALSE(fail->passed);
  CHECK(fail->required == doctest::Approx(0.9801));
  CHECK_FALSE(q::check_eval(0.981, 0.99, 0.999)->passed);  // a stricter model
  CHECK_FALSE(q::check_eval(std::nan(""), 0.99)->passed);
  CHECK_FALSE(q::check_eval(0.5, 0.0).has_value());
  CHECK_FALSE(q::check_eval(0.5, 0.9, 1.2).has_value());
}

TEST_CASE("the training gate combines both and reports evidence as JSON") {
  q::TrainingReference reference{reference_curve(), 0.92};
  auto good = q::check_training(reference, {reference_curve(), 0.915});
  REQUIRE(good.has_value());
  CHECK(good->passed);
  CHECK(good->summary.starts_with("PASS"));

  auto bad = q::check_training(reference, {reference_curve(), 0.80});
  REQUIRE(bad.has_value());
  CHECK_FALSE(bad->passed);
  CHECK(bad->loss_curve.passed);
  CHECK_FALSE(bad->eval->passed);

  auto no_eval = q::check_training(reference, {reference_curve(), std::nullopt});
  CHECK_FALSE(no_eval->passed);

  auto diverged = reference_curve();
  diverged.back().loss = std::numeric_limits<double>::quiet_NaN();
  const nlohmann::json json = q::to_json(*q::check_training(reference, {diverged, 0.92}));
  CHECK(json["passed"] == false);
  CHECK(json["loss_curve"]["pointwise_failures"][0]["actual"] == "nan");
  CHECK(json["loss_curve"]["pointwise_failures"][0]["step"] == 500);
  CHECK(json["eval"]["passed"] == true);
}

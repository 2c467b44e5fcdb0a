#include <doctest/doctest.h>

#include <vector>

#include "common/stats/rng.h"
#include "common/stats/shift.h"
#include "sim/bench/detection.h"
#include "sim/perf/perf_model.h"

using namespace kiln::sim;

TEST_CASE("the generator is reproducible from its seed") {
  kiln::stats::Rng a(123);
  kiln::stats::Rng b(123);
  for (int i = 0; i < 100; ++i) CHECK(a.next_u64() == b.next_u64());
  // Pinned value: the same seed gives the same stream on every platform.
  kiln::stats::Rng c(0);
  CHECK(c.next_u64() == 0x99EC5F36CB75F2B4ull);
  CHECK(kiln::stats::derive_seed(1, 2) != kiln::stats::derive_seed(1, 3));
}

TEST_CASE("steady throughput scales with bundle, chip and throttling") {
  CHECK(steady_throughput(1000, 0.98, 1.05, false) == doctest::Approx(1029));
  CHECK(steady_throughput(1000, 1.0, 1.0, true) == doctest::Approx(1000 * kThrottledSpeedFactor));
}

TEST_CASE("samples ramp up during warmup, then scatter around the steady value") {
  PerfNoiseModel model;
  CHECK(validate(model));
  CHECK(model.warmup_slowdown(0) == doctest::Approx(model.warmup_initial_slowdown));
  CHECK(model.warmup_slowdown(model.warmup_iterations_to_steady) == 0);
  CHECK(model.warmup_slowdown(5) > model.warmup_slowdown(10));

  kiln::stats::Rng rng(9);
  std::vector<double> steady_samples;
  for (int i = 0; i < 4000; ++i) steady_samples.push_back(model.sample_throughput(1000, 100, rng));
  CHECK(kiln::stats::median(steady_samples) == doctest::Approx(1000).epsilon(0.003));
  int outliers = 0;
  for (double s : steady_samples) {
    if (s < 1000 / 1.045) ++outliers;
  }
  // About outlier_probability of the iterations are well below the noise (plus a normal tail).
  CHECK(outliers > 40);
  CHECK(outliers < 160);

  kiln::stats::Rng again(9);
  CHECK(model.sample_throughput(1000, 100, again) == steady_samples[0]);

  kiln::stats::Rng cold(10);
  CHECK(model.sample_throughput(1000, 0, cold) < 1000 / 1.2);
}

TEST_CASE("warmup is steady only when flat and no longer drifting") {
  const SteadyStateOptions options;
  std::vector<double> flat(10, 100.0);
  CHECK(warmup_is_steady(flat, options));
  CHECK_FALSE(warmup_is_steady(std::vector<double>(5, 100.0), options));  // no earlier window yet

  // A slow ramp: each window is within 3%, but the median moved 2.5%.
  std::vector<double> ramp;
  for (int i = 0; i < 10; ++i) ramp.push_back(100 + 0.5 * i);
  CHECK_FALSE(warmup_is_steady(ramp, options));

  std::vector<double> noisy = {100, 101, 99, 100, 100, 100, 108, 100, 99, 101};
  CHECK_FALSE(warmup_is_steady(noisy, options));  // 8% spread in the last window
}

TEST_CASE("detection benchmark: deterministic, catches a large drop, no false alarm") {
  DetectionBenchOptions options;
  options.nights = 20;
  options.models_per_night = 8;
  options.drop = 0.08;
  options.gate.bootstrap_for_report = false;
  const DetectionRow first = run_detection(options, 10);
  const DetectionRow again = run_detection(options, 10);
  CHECK(first.detection.trials == 20);
  CHECK(first.detection.events == 20);
  CHECK(first.false_alarm.trials == 140);
  CHECK(first.false_alarm.events == 0);
  CHECK(first.mean_measured_per_side >= 10);
  CHECK(again.mean_measured_per_side == first.mean_measured_per_side);
  CHECK(again.first_stage_flag_null.events == first.first_stage_flag_null.events);
  CHECK(first.detection.wilson_low() > 0.8);
  CHECK(first.detection.wilson_high() == doctest::Approx(1.0));
}

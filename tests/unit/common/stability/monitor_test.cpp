#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include <nlohmann/json.hpp>

#include "common/stability/monitor.h"

namespace kiln::stability {

namespace {

StabilityCriteria criteria() {
  StabilityCriteria c;
  c.loss_spike_band_relative = 1.0;
  c.loss_spike_window_steps = 10;
  c.loss_spike_smoothing_steps = 1;  // each step's loss judged alone
  c.hang_minutes = 30;
  c.decay_window_minutes = 10;
  c.decay_max_drop = 0.1;
  return c;
}

// A healthy step: a slowly falling loss with a little wobble, a steady throughput, a step a minute.
StepReport healthy(std::uint64_t step) {
  const double wobble = (step % 3 == 0 ? 0.02 : -0.01);
  return {step, 60.0 * static_cast<double>(step), 1.0 / (1 + 0.01 * static_cast<double>(step)) + wobble,
          1000.0 + static_cast<double>(step % 5)};
}

}  // namespace

TEST_CASE("a healthy run has no failure") {
  StabilityMonitor monitor(criteria());
  for (std::uint64_t step = 1; step <= 300; ++step) {
    CHECK(monitor.observe_devices(step, 60.0 * static_cast<double>(step), {{0, 2, true}, {1, 0, true}}).empty());
    CHECK(monitor.observe_step(healthy(step)).empty());
    CHECK_FALSE(monitor.check_progress(60.0 * static_cast<double>(step) + 30, std::nullopt));
  }
  CHECK(monitor.failures().empty());
  CHECK_FALSE(monitor.ended());
  CHECK(monitor.first_window_throughput() > 0);
  CHECK(monitor.latest_window_throughput() > 0);
}

TEST_CASE("NaN and inf in the loss end the run at their step") {
  for (const double bad : {std::nan(""), std::numeric_limits<double>::infinity()}) {
    StabilityMonitor monitor(criteria());
    for (std::uint64_t step = 1; step < 40; ++step) monitor.observe_step(healthy(step));
    StepReport step = healthy(40);
    step.loss = bad;
    const auto seen = monitor.observe_step(step);
    REQUIRE(seen.size() == 1);
    CHECK(seen[0].kind == FailureKind::nan);
    CHECK(seen[0].step == 40);
    CHECK(seen[0].time_s == 2400.0);
    CHECK(monitor.ended());
    CHECK(monitor.observe_step(healthy(41)).empty());  // nothing is judged after the end
  }
}

TEST_CASE("a loss above the band is one spike per excursion, and the run goes on") {
  StabilityMonitor monitor(criteria());
  for (std::uint64_t step = 1; step <= 20; ++step) CHECK(monitor.observe_step(healthy(step)).empty());
  StepReport spike = healthy(21);
  spike.loss *= 5;
  auto seen = monitor.observe_step(spike);
  REQUIRE(seen.size() == 1);
  CHECK(seen[0].kind == FailureKind::loss_spike);
  CHECK(seen[0].step == 21);
  CHECK(seen[0].value == doctest::Approx(spike.loss));
  CHECK(seen[0].threshold < spike.loss);
  StepReport still_high = healthy(22);
  still_high.loss *= 5;
  CHECK(monitor.observe_step(still_high).empty());  // the same excursion
  CHECK_FALSE(monitor.ended());
  for (std::uint64_t step = 23; step <= 40; ++step) CHECK(monitor.observe_step(healthy(step)).empty());
  StepReport again = healthy(41);
  again.loss *= 5;
  CHECK(monitor.observe_step(again).size() == 1);  // a new excursion
  CHECK(monitor.failures().size() == 2);
}

TEST_CASE("a loss just inside the band is no spike") {
  StabilityMonitor monitor(criteria());
  for (std::uint64_t step = 1; step <= 20; ++step) monitor.observe_step(healthy(step));
  StepReport high = healthy(21);
  high.loss *= 1.8;  // band is 2x the median
  CHECK(monitor.observe_step(high).empty());
}

TEST_CASE("a smoothed loss: one noisy step is no spike, one far out is") {
  StabilityCriteria c = criteria();
  c.loss_spike_smoothing_steps = 5;
  StabilityMonitor monitor(c);
  for (std::uint64_t step = 1; step <= 30; ++step) CHECK(monitor.observe_step(healthy(step)).empty());
  StepReport noisy = healthy(31);
  noisy.loss *= 5;  // the 5-step average rises by 80%: inside the 100% band
  CHECK(monitor.observe_step(noisy).empty());
  for (std::uint64_t step = 32; step <= 60; ++step) CHECK(monitor.observe_step(healthy(step)).empty());
  StepReport spike = healthy(61);
  spike.loss *= 20;  // the average rises by 380%
  const auto seen = monitor.observe_step(spike);
  REQUIRE(seen.size() == 1);
  CHECK(seen[0].kind == FailureKind::loss_spike);
  CHECK(seen[0].step == 61);
  CHECK(seen[0].value < spike.loss);  // the smoothed loss
  for (std::uint64_t step = 62; step <= 66; ++step) CHECK(monitor.observe_step(healthy(step)).empty());
}

TEST_CASE("no step for longer than the hang minutes is a hang, naming the chip waited on") {
  StabilityMonitor monitor(criteria());
  for (std::uint64_t step = 1; step <= 5; ++step) monitor.observe_step(healthy(step));
  CHECK_FALSE(monitor.check_progress(300 + 30 * 60, 3u));  // exactly 30 minutes: not yet
  const auto hang = monitor.check_progress(300 + 31 * 60, 3u);
  REQUIRE(hang);
  CHECK(hang->kind == FailureKind::hang);
  CHECK(hang->step == 5);
  CHECK(hang->chip == 3u);
  CHECK(hang->value == doctest::Approx(31.0));
  CHECK(monitor.ended());
  CHECK_FALSE(monitor.check_progress(300 + 60 * 60, 3u));  // reported once
}

TEST_CASE("a run that never makes a step hangs from its start") {
  StabilityMonitor monitor(criteria());
  const auto hang = monitor.check_progress(31 * 60, 0u);
  REQUIRE(hang);
  CHECK(hang->step == 0);
}

TEST_CASE("throughput decay: a later window below the first by more than the drop, once") {
  StabilityMonitor monitor(criteria());
  std::vector<Failure> seen;
  for (std::uint64_t step = 1; step <= 120; ++step) {
    StepReport s = healthy(step);
    const double minutes = static_cast<double>(step);
    s.throughput = 1000.0 * (minutes <= 10 ? 1.0 : 1.0 - 0.005 * (minutes - 10));  // 0.5% a minute
    for (auto& f : monitor.observe_step(s)) seen.push_back(f);
  }
  REQUIRE(seen.size() == 1);
  CHECK(seen[0].kind == FailureKind::throughput_decay);
  // Windows of 10 minutes after the first (1000/s): (10, 20] has median 972.5, (20, 30] 922.5 and
  // (30, 40] 872.5, the first below 900; it is judged once complete, at step 41.
  CHECK(seen[0].step == 41);
  CHECK(seen[0].value < 900.0);
  CHECK(seen[0].threshold == doctest::Approx(900.0));
  CHECK_FALSE(monitor.ended());
}

TEST_CASE("a small drift within the allowed drop is no decay") {
  StabilityMonitor monitor(criteria());
  for (std::uint64_t step = 1; step <= 120; ++step) {
    StepReport s = healthy(step);
    s.throughput = 1000.0 * (1.0 - 0.0005 * static_cast<double>(step));  // 6% over the run
    CHECK(monitor.observe_step(s).empty());
  }
}

TEST_CASE("device errors: uncorrected ECC over the allowance, a link down") {
  StabilityCriteria c = criteria();
  c.ecc_uncorrected_max = 1;
  StabilityMonitor ecc(c);
  CHECK(ecc.observe_devices(1, 60, {{0, 5, true}, {1, 0, true}}).empty());  // the baseline
  CHECK(ecc.observe_devices(2, 120, {{0, 6, true}, {1, 0, true}}).empty()); // one new: allowed
  const auto seen = ecc.observe_devices(3, 180, {{0, 6, true}, {1, 2, true}});
  REQUIRE(seen.size() == 1);
  CHECK(seen[0].kind == FailureKind::ecc);
  CHECK(seen[0].chip == 1u);
  CHECK(seen[0].value == 2.0);
  CHECK(seen[0].step == 3);
  CHECK(ecc.ended());

  StabilityMonitor link(criteria());
  const auto down = link.observe_devices(7, 420, {{0, 0, true}, {4, 0, false}});
  REQUIRE(down.size() == 1);
  CHECK(down[0].kind == FailureKind::link);
  CHECK(down[0].chip == 4u);
  CHECK(link.ended());

  StabilityCriteria ignore_links = criteria();
  ignore_links.link_down_fails = false;
  StabilityMonitor lenient(ignore_links);
  CHECK(lenient.observe_devices(7, 420, {{4, 0, false}}).empty());
}

TEST_CASE("a failure survives its JSON form, NaN included") {
  Failure f{FailureKind::nan, 12, 720.5, 2u, std::nan(""), 0, "the loss at step 12 is NaN"};
  auto back = failure_from_json(to_json(f));
  REQUIRE(back);
  CHECK(back->kind == FailureKind::nan);
  CHECK(back->step == 12);
  CHECK(back->time_s == 720.5);
  CHECK(back->chip == 2u);
  CHECK(std::isnan(back->value));
  CHECK(back->detail == f.detail);
  CHECK_FALSE(failure_from_json(nlohmann::json{{"kind", "meltdown"}, {"step", 1}, {"time_s", 0}}));
}

}  // namespace kiln::stability

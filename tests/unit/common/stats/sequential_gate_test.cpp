#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "common/stats/mann_whitney.h"
#include "common/stats/perf_gate.h"
#include "common/stats/rng.h"
#include "common/stats/sequential_gate.h"

using namespace kiln::stats;

namespace {

std::vector<double> throughputs(Rng& rng, double centre, double relative_sigma, int n) {
  std::vector<double> out;
  for (int i = 0; i < n; ++i) out.push_back(centre * (1 + relative_sigma * rng.normal()));
  return out;
}

// One model through the sequential gate on normal noise; the candidate `drop` slower.
ModelGateOutcome run_one(const SequentialPlan& plan, double sigma, double drop, std::uint64_t seed) {
  PerfGateOptions options;
  options.rule = GateRule::sequential;
  options.bootstrap_for_report = false;
  RunPerfGate gate(options, seed, {plan});
  Rng rng(seed);
  int repeats = plan.repeats_per_look;
  while (!gate.finished()) {
    gate.add_samples(0, throughputs(rng, 1000, sigma, repeats), throughputs(rng, 1000 * (1 - drop), sigma, repeats));
    for (const GateRequest& request : gate.evaluate()) repeats = request.repeats_per_side;
  }
  return gate.outcomes()[0];
}

}  // namespace

TEST_CASE("the oracle's sample size is the one-sided z-test's") {
  // z(0.999) + z(0.99) = 3.0902 + 2.3263 = 5.4165; 2 * 5.4165^2 = 58.68 at noise equal to the drop.
  CHECK(oracle_repeats_per_side(0.02, 0.02, 0.001, 0.99) == doctest::Approx(58.68).epsilon(0.001));
  CHECK(oracle_repeats_per_side(0.01, 0.02, 0.001, 0.99) == doctest::Approx(58.68 / 4).epsilon(0.001));
}

TEST_CASE("designs: one look is the fixed test; more looks cost a little at most and less on average") {
  SequentialOptions options;
  options.power = 0.99;
  const SequentialDesign& one = sequential_design(1, options);
  CHECK(one.efficacy_z[0] == doctest::Approx(3.0902).epsilon(0.001));
  CHECK(one.inflation == doctest::Approx(1.0).epsilon(0.001));
  for (int looks = 2; looks <= 5; ++looks) {
    const SequentialDesign& design = sequential_design(looks, options);
    REQUIRE(design.efficacy_z.size() == static_cast<std::size_t>(looks));
    CHECK(design.inflation > 1);
    CHECK(design.inflation < 1.15);
    CHECK(design.expected_fraction_no_change < 0.6);
    CHECK(design.expected_fraction_at_min_effect < 0.75);
    CHECK(design.false_alarm_with_futility <= options.false_alarm);
    for (int k = 1; k < looks; ++k) {
      CHECK(design.efficacy_z[k] < design.efficacy_z[k - 1]);  // hard to cross early
      CHECK(design.futility_z[k] > design.futility_z[k - 1]);
    }
    CHECK(design.futility_z.back() == design.efficacy_z.back());
  }
}

TEST_CASE("plans follow the noise") {
  const SequentialOptions options;
  const SequentialPlan quiet = plan_sequential(known_noise(0.01), options);
  const SequentialPlan noisy = plan_sequential(known_noise(0.03), options);
  CHECK(quiet.repeats_per_look >= options.min_repeats_per_look);
  CHECK(noisy.max_repeats_per_side() > 5 * quiet.max_repeats_per_side());
  CHECK(noisy.looks == options.max_looks);
  CHECK_FALSE(noisy.capped);
  CHECK(plan_sequential(known_noise(0.10), options).capped);
  // Outliers carry no information about a shift: more repeats.
  CHECK(plan_sequential(known_noise(0.03, 0.1), options).fixed_repeats_per_side > noisy.fixed_repeats_per_side);

  const SequentialCost cost = expected_repeats_per_side(known_noise(0.02), options);
  CHECK(cost.no_change < cost.at_min_effect);
  CHECK(cost.at_min_effect < cost.maximum);
  CHECK(cost.maximum == plan_sequential(known_noise(0.02), options).max_repeats_per_side());
}

TEST_CASE("a clear 5% drop stops at the first look") {
  const SequentialOptions options;
  for (double sigma : {0.01, 0.02}) {
    const SequentialPlan plan = plan_sequential(known_noise(sigma), options);
    REQUIRE(plan.looks > 1);
    const ModelGateOutcome outcome = run_one(plan, sigma, 0.05, 3);
    CHECK(outcome.verdict == Verdict::regression);
    CHECK(outcome.regression_confirmed);
    CHECK(outcome.looks_taken == 1);
    REQUIRE(outcome.initial.has_value());
    CHECK(outcome.initial->shift.relative == doctest::Approx(-0.05).epsilon(0.2));
    CHECK(static_cast<int>(outcome.initial_samples.baseline.size()) == plan.repeats_per_look);
  }
}

TEST_CASE("under no change the false alarms stay within the bound (Monte Carlo, fixed seed)") {
  // A looser bound than the nightly's 0.1% so that 20000 trials measure it.
  SequentialOptions options;
  options.false_alarm = 0.02;
  const SequentialPlan plan = plan_sequential(known_noise(0.02), options);
  REQUIRE(plan.looks == options.max_looks);
  const int trials = 20000;
  int alarms = 0;
  double measured = 0;
  Rng rng(21);
  for (int t = 0; t < trials; ++t) {
    // Straight through the bounds: the rule the gate applies.
    std::vector<double> baseline;
    std::vector<double> candidate;
    for (int look = 0; look < plan.looks; ++look) {
      const auto more_baseline = throughputs(rng, 1000, 0.02, plan.repeats_per_look);
      const auto more_candidate = throughputs(rng, 1000, 0.02, plan.repeats_per_look);
      baseline.insert(baseline.end(), more_baseline.begin(), more_baseline.end());
      candidate.insert(candidate.end(), more_candidate.begin(), more_candidate.end());
      auto test = mann_whitney_u(baseline, candidate);
      REQUIRE(test.has_value());
      const LookDecision decision = decide_look(plan, look, worse_rank_z(*test, true));
      if (decision == LookDecision::go_on) continue;
      alarms += decision == LookDecision::regression ? 1 : 0;
      break;
    }
    measured += static_cast<double>(baseline.size());
  }
  const double rate = static_cast<double>(alarms) / trials;
  // The design's rate with futility stops taken is 1.9%; the binomial standard error over 20000
  // trials is 0.1%, so the 2% bound holds with a margin of two of them unless the bounds leak.
  CHECK(rate <= options.false_alarm);
  // Most unchanged models stop early, at the futility bound.
  CHECK(measured / trials < 0.7 * plan.max_repeats_per_side());
}

TEST_CASE("a 2% drop is caught at the designed power") {
  const SequentialOptions options;  // 0.1% false alarms, designed for 99.5%
  const SequentialPlan plan = plan_sequential(known_noise(0.01), options);
  int caught = 0;
  const int trials = 400;
  for (int t = 0; t < trials; ++t) {
    caught += run_one(plan, 0.01, 0.02, 100 + static_cast<std::uint64_t>(t)).verdict == Verdict::regression ? 1 : 0;
  }
  CHECK(caught >= trials - 6);
}

TEST_CASE("decide_look at the bounds") {
  SequentialPlan plan;
  plan.looks = 2;
  plan.repeats_per_look = 10;
  plan.efficacy_z = {3.7, 3.1};
  plan.futility_z = {1.1, 3.1};
  CHECK(decide_look(plan, 0, 3.8) == LookDecision::regression);
  CHECK(decide_look(plan, 0, -3.8) == LookDecision::improvement);
  CHECK(decide_look(plan, 0, 0.5) == LookDecision::no_change);
  CHECK(decide_look(plan, 0, 2.0) == LookDecision::go_on);
  CHECK(decide_look(plan, 1, 3.0) == LookDecision::no_change);
  CHECK(decide_look(plan, 1, 3.2) == LookDecision::regression);
}

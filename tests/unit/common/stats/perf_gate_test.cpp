#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "common/stats/perf_gate.h"
#include "common/stats/rng.h"

using namespace kiln::stats;

namespace {

std::vector<double> draw(Rng& rng, double centre, double relative_sigma, int n) {
  std::vector<double> out;
  for (int i = 0; i < n; ++i) out.push_back(centre * (1 + relative_sigma * rng.normal()));
  return out;
}

PerfGateOptions fast_options() {
  PerfGateOptions options;
  options.bootstrap_for_report = false;
  return options;
}

Comparison made_up(double worse, double low, double high) {
  Comparison c;
  c.worse_relative = worse;
  c.worse_ci = {low, high, 0.999};
  return c;
}

}  // namespace

TEST_CASE("the decision rule on hand-made comparisons") {
  const PerfGateOptions o;  // min_effect 2%, point estimate must pass 1%
  CHECK(decide(made_up(0.021, 0.012, 0.030), 0.001, 0.01, o) == Verdict::regression);
  // A true 2% drop often estimates below 2%: significance, 1.5% and an interval reaching 2% suffice.
  CHECK(decide(made_up(0.015, 0.008, 0.022), 0.001, 0.01, o) == Verdict::regression);
  // Same numbers, not significant: not a regression, and 2% is not excluded: inconclusive.
  CHECK(decide(made_up(0.015, 0.008, 0.022), 0.02, 0.01, o) == Verdict::inconclusive);
  // Significant but the interval rules out 2%: a real but smaller change, no_change.
  CHECK(decide(made_up(0.012, 0.006, 0.018), 0.0001, 0.01, o) == Verdict::no_change);
  // Significant, interval reaches 2%, but the point estimate is under 1%: more data.
  CHECK(decide(made_up(0.008, 0.001, 0.021), 0.001, 0.01, o) == Verdict::inconclusive);
  CHECK(decide(made_up(-0.03, -0.04, -0.02), 0.001, 0.01, o) == Verdict::improvement);
  CHECK(decide(made_up(0.001, -0.015, 0.017), 0.6, 0.01, o) == Verdict::no_change);
  CHECK(decide(made_up(0.001, -0.03, 0.03), 0.6, 0.01, o) == Verdict::inconclusive);
}

TEST_CASE("clear regression, then the rerun step") {
  Rng rng(1);
  const auto baseline = draw(rng, 1000, 0.01, 10);
  const auto candidate = draw(rng, 900, 0.01, 10);
  auto comparison = compare(baseline, candidate, fast_options(), 7);
  REQUIRE(comparison);
  CHECK(comparison->worse_relative == doctest::Approx(0.10).epsilon(0.3));
  CHECK(comparison->shift.relative < 0);
  const Verdict verdict = decide(*comparison, comparison->test.p_value, 0.01, fast_options());
  CHECK(verdict == Verdict::regression);
  CHECK(next_step(verdict, GateProgress{false, 0}, fast_options()) == NextStep::confirm_with_rerun);
  CHECK(next_step(verdict, GateProgress{true, 0}, fast_options()) == NextStep::report);
}

TEST_CASE("lower is better turns a latency rise into a regression") {
  Rng rng(2);
  const auto baseline = draw(rng, 50, 0.01, 12);
  const auto candidate = draw(rng, 55, 0.01, 12);
  PerfGateOptions options = fast_options();
  options.higher_is_better = false;
  auto comparison = compare(baseline, candidate, options, 7);
  REQUIRE(comparison);
  CHECK(comparison->worse_relative > 0.05);
  CHECK(decide(*comparison, comparison->test.p_value, 0.01, options) == Verdict::regression);
  options.higher_is_better = true;
  auto as_throughput = compare(baseline, candidate, options, 7);
  REQUIRE(as_throughput);
  CHECK(decide(*as_throughput, as_throughput->test.p_value, 0.01, options) == Verdict::improvement);
}

TEST_CASE("clear no change") {
  Rng rng(3);
  const auto baseline = draw(rng, 1000, 0.003, 30);
  const auto candidate = draw(rng, 1000, 0.003, 30);
  auto comparison = compare(baseline, candidate, fast_options(), 7);
  REQUIRE(comparison);
  const Verdict verdict = decide(*comparison, comparison->test.p_value, 0.01, fast_options());
  CHECK(verdict == Verdict::no_change);
  CHECK(next_step(verdict, GateProgress{}, fast_options()) == NextStep::report);
}

TEST_CASE("too few samples are inconclusive and ask for bounded extra rounds") {
  Rng rng(4);
  const auto baseline = draw(rng, 1000, 0.01, 5);
  const auto candidate = draw(rng, 1000, 0.01, 5);
  const PerfGateOptions options = fast_options();
  auto comparison = compare(baseline, candidate, options, 7);
  REQUIRE(comparison);
  // 5 a side cannot bound a 99.9% interval, so neither a change nor its absence is shown.
  CHECK(std::isinf(comparison->worse_ci.high));
  const Verdict verdict = decide(*comparison, comparison->test.p_value, options.alpha, options);
  CHECK(verdict == Verdict::inconclusive);
  CHECK(next_step(verdict, GateProgress{false, 0}, options) == NextStep::add_repeats);
  CHECK(next_step(verdict, GateProgress{false, options.max_extra_rounds - 1}, options) == NextStep::add_repeats);
  CHECK(next_step(verdict, GateProgress{false, options.max_extra_rounds}, options) == NextStep::report);
}

TEST_CASE("the bootstrap interval can drive the rule and is reported by default") {
  Rng rng(5);
  const auto baseline = draw(rng, 1000, 0.01, 10);
  const auto candidate = draw(rng, 900, 0.01, 10);
  PerfGateOptions options;
  auto reported = compare(baseline, candidate, options, 9);
  REQUIRE(reported);
  REQUIRE(reported->bootstrap_ci);
  CHECK(reported->interval_method == IntervalMethod::rank_based);
  options.interval_method = IntervalMethod::bootstrap;
  auto bootstrap = compare(baseline, candidate, options, 9);
  REQUIRE(bootstrap);
  CHECK(bootstrap->relative_ci.low == reported->bootstrap_ci->low);
  CHECK(decide(*bootstrap, bootstrap->test.p_value, 0.01, options) == Verdict::regression);
}

TEST_CASE("options are validated") {
  PerfGateOptions options;
  CHECK(validate(options));
  options.min_effect = 0;
  CHECK_FALSE(validate(options));
  options = {};
  options.ci_confidence = 1.0;
  CHECK_FALSE(validate(options));
  options = {};
  options.extra_repeats_per_round = 0;
  CHECK_FALSE(validate(options));
}

TEST_CASE("run gate: BH across models, extra rounds, confirmation rerun") {
  Rng rng(6);
  const std::size_t models = 6;
  PerfGateOptions options = fast_options();
  RunPerfGate gate(models, options, 99);
  // Model 0 drops 8%; model 1 drops 8% in the first comparison only (a one-off); the rest are
  // unchanged. Every model starts with 10 repeats a side.
  auto centre = [](std::size_t model, bool confirming) {
    if (model == 0) return 920.0;
    if (model == 1) return confirming ? 1000.0 : 920.0;
    return 1000.0;
  };
  std::vector<bool> confirming(models, false);
  for (std::size_t m = 0; m < models; ++m) gate.add_samples(m, draw(rng, 1000, 0.005, 10), draw(rng, centre(m, false), 0.005, 10));


  int reruns = 0;
  for (int step = 0; step < 20 && !gate.finished(); ++step) {
    for (const GateRequest& request : gate.evaluate()) {
      if (request.kind == GateRequest::Kind::confirmation_rerun) {
        ++reruns;
        confirming[request.model] = true;
        CHECK(request.repeats_per_side == 10);
      } else {

        CHECK(request.repeats_per_side == options.extra_repeats_per_round);
      }
      const std::size_t m = request.model;
      gate.add_samples(m, draw(rng, 1000, 0.005, request.repeats_per_side),
                       draw(rng, centre(m, confirming[m]), 0.005, request.repeats_per_side));
    }
  }
  REQUIRE(gate.finished());
  const auto outcomes = gate.outcomes();
  CHECK(reruns == 2);
  CHECK(outcomes[0].verdict == Verdict::regression);
  CHECK(outcomes[0].regression_confirmed);
  CHECK(outcomes[0].initial_adjusted_p_value < options.fdr_q);
  CHECK(outcomes[0].initial_adjusted_p_value >= outcomes[0].initial->test.p_value);
  REQUIRE(outcomes[0].confirmation);
  CHECK(outcomes[1].verdict != Verdict::regression);
  CHECK(outcomes[1].regression_unconfirmed);
  for (std::size_t m = 2; m < models; ++m) {
    CAPTURE(m);
    CHECK(outcomes[m].verdict == Verdict::no_change);
    CHECK_FALSE(outcomes[m].confirmation);
  }
}

TEST_CASE("run gate: samples that cannot be compared end that model with an error") {
  RunPerfGate gate(2, fast_options(), 1);
  gate.add_samples(0, std::vector<double>{-1, -2, -3, -4, -5}, std::vector<double>{1, 2, 3, 4, 5});
  gate.add_samples(1, std::vector<double>{10, 11, 12, 13, 14}, std::vector<double>{10, 11, 12, 13, 14});
  gate.evaluate();
  const auto outcomes = gate.outcomes();
  CHECK(outcomes[0].finished);
  REQUIRE(outcomes[0].error);
  CHECK(outcomes[0].error->message.find("positive") != std::string::npos);
  CHECK_FALSE(outcomes[1].finished);  // 5 a side: inconclusive, more repeats requested
}

TEST_CASE("run-level evaluation applies BH to the whole family") {
  Rng rng(8);
  const PerfGateOptions options = fast_options();
  auto comparison = compare(draw(rng, 1000, 0.01, 8), draw(rng, 970, 0.01, 8), options, 1);
  REQUIRE(comparison);
  REQUIRE(comparison->test.p_value < 0.01);
  auto single = evaluate_run(std::vector<Comparison>{*comparison}, options);
  REQUIRE(single);
  CHECK((*single)[0].adjusted_p_value == doctest::Approx(comparison->test.p_value));
  auto among_many = evaluate_run(std::vector<Comparison>{*comparison}, options, 1000);
  REQUIRE(among_many);
  CHECK((*among_many)[0].adjusted_p_value == doctest::Approx(std::min(1.0, comparison->test.p_value * 1000)));
  CHECK((*among_many)[0].verdict != Verdict::regression);
}

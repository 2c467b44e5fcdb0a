#include "common/stats/perf_gate.h"

#include <cmath>
#include <string>
#include <utility>

#include "common/stats/fdr.h"
#include "common/stats/rng.h"

namespace kiln::stats {

Status validate(const PerfGateOptions& options) {
  auto open_unit = [](double v) { return v > 0 && v < 1; };
  if (!open_unit(options.alpha)) {
    return fail(Errc::invalid_argument, "alpha must be between 0 and 1 exclusive, e.g. 0.01");
  }
  if (!open_unit(options.min_effect)) {
    return fail(Errc::invalid_argument,
                "min_effect is a relative change between 0 and 1 exclusive, e.g. 0.02 for 2%");
  }
  if (!open_unit(options.fdr_q)) {
    return fail(Errc::invalid_argument, "fdr_q must be between 0 and 1 exclusive, e.g. 0.05");
  }
  if (options.max_extra_rounds < 0 || options.max_extra_rounds > 20) {
    return fail(Errc::invalid_argument, "max_extra_rounds must be between 0 and 20");
  }
  if (options.extra_repeats_per_round < 1 || options.extra_repeats_per_round > 1000) {
    return fail(Errc::invalid_argument, "extra_repeats_per_round must be between 1 and 1000");
  }
  if (!(options.min_point_effect_fraction >= 0 && options.min_point_effect_fraction <= 1)) {
    return fail(Errc::invalid_argument, "min_point_effect_fraction must be between 0 and 1, e.g. 0.5");
  }
  if (auto ok = validate(options.sequential); !ok) return ok;
  if (auto ok = validate(options.noise); !ok) return ok;
  BootstrapOptions bootstrap{options.bootstrap_resamples, options.ci_confidence, 1};
  return validate(bootstrap);
}

Result<Comparison> compare(std::span<const double> baseline, std::span<const double> candidate,
                           const PerfGateOptions& options, std::uint64_t seed) {
  if (auto ok = validate(options); !ok) return tl::unexpected(ok.error());
  auto test = mann_whitney_u(baseline, candidate);
  if (!test) return tl::unexpected(test.error());
  auto shift = estimate_shift(baseline, candidate);
  if (!shift) return tl::unexpected(shift.error());
  Comparison comparison;
  comparison.test = *test;
  comparison.shift = *shift;
  comparison.interval_method = options.interval_method;
  if (options.interval_method == IntervalMethod::bootstrap || options.bootstrap_for_report) {
    auto interval = bootstrap_relative_shift_ci(
        baseline, candidate, BootstrapOptions{options.bootstrap_resamples, options.ci_confidence, seed});
    if (!interval) return tl::unexpected(interval.error());
    comparison.bootstrap_ci = *interval;
  }
  if (options.interval_method == IntervalMethod::bootstrap) {
    comparison.relative_ci = *comparison.bootstrap_ci;
  } else {
    auto interval = rank_relative_shift_ci(baseline, candidate, options.ci_confidence);
    if (!interval) return tl::unexpected(interval.error());
    comparison.relative_ci = *interval;
  }
  const ConfidenceInterval& ci = comparison.relative_ci;
  comparison.worse_relative = options.higher_is_better ? -shift->relative : shift->relative;
  comparison.worse_ci.confidence = ci.confidence;
  comparison.worse_ci.low = options.higher_is_better ? -ci.high : ci.low;
  comparison.worse_ci.high = options.higher_is_better ? -ci.low : ci.high;
  return comparison;
}

Verdict decide(const Comparison& comparison, double p_value, double significance_level,
               const PerfGateOptions& options) {
  const bool significant = p_value <= significance_level;
  const double point_threshold = options.min_point_effect_fraction * options.min_effect;
  const double worse = comparison.worse_relative;
  const ConfidenceInterval& ci = comparison.worse_ci;
  if (significant && worse >= point_threshold && ci.high >= options.min_effect) {
    return Verdict::regression;
  }
  if (significant && -worse >= point_threshold && -ci.low >= options.min_effect) {
    return Verdict::improvement;
  }
  if (ci.high < options.min_effect && ci.low > -options.min_effect) return Verdict::no_change;
  return Verdict::inconclusive;
}

double smallest_exact_p_value(std::size_t n1, std::size_t n2) {
  // 2 / C(n1+n2, n1), built up as a product to stay in range.
  double p = 2.0;
  for (std::size_t i = 1; i <= n1; ++i) {
    p *= static_cast<double>(i) / static_cast<double>(n2 + i);
  }
  return std::min(1.0, p);
}

NextStep next_step(Verdict verdict, const GateProgress& progress, const PerfGateOptions& options) {
  if (verdict == Verdict::inconclusive && progress.extra_rounds_done < options.max_extra_rounds) {
    return NextStep::add_repeats;
  }
  if (verdict == Verdict::regression && !progress.confirming) return NextStep::confirm_with_rerun;
  return NextStep::report;
}

Result<std::vector<RunVerdict>> evaluate_run(std::span<const Comparison> comparisons,
                                             const PerfGateOptions& options,
                                             std::size_t family_size) {
  std::vector<double> p_values;
  p_values.reserve(comparisons.size());
  for (const Comparison& c : comparisons) p_values.push_back(c.test.p_value);
  auto adjusted = benjamini_hochberg(p_values, options.fdr_q, family_size);
  if (!adjusted) return tl::unexpected(adjusted.error());
  std::vector<RunVerdict> verdicts(comparisons.size());
  for (std::size_t i = 0; i < comparisons.size(); ++i) {
    verdicts[i].adjusted_p_value = adjusted->adjusted_p_values[i];
    verdicts[i].verdict = decide(comparisons[i], verdicts[i].adjusted_p_value, options.fdr_q, options);
  }
  return verdicts;
}

RunPerfGate::RunPerfGate(std::size_t model_count, PerfGateOptions options, std::uint64_t seed)
    : options_(options), seed_(seed), states_(model_count), outcomes_(model_count) {
  KILN_ASSERT(options_.rule == GateRule::fixed, "the sequential rule needs a plan per model");
  KILN_ASSERT(validate(options_).has_value(), "validate PerfGateOptions before building a gate");
}

RunPerfGate::RunPerfGate(PerfGateOptions options, std::uint64_t seed, std::vector<SequentialPlan> plans)
    : plans_(std::move(plans)), options_(options), seed_(seed), states_(plans_.size()), outcomes_(plans_.size()) {
  KILN_ASSERT(options_.rule == GateRule::sequential, "plans are for the sequential rule");
  KILN_ASSERT(validate(options_).has_value(), "validate PerfGateOptions before building a gate");
  for (std::size_t m = 0; m < plans_.size(); ++m) {
    KILN_ASSERT(plans_[m].looks >= 1 && plans_[m].efficacy_z.size() == static_cast<std::size_t>(plans_[m].looks),
                "a sequential plan from plan_sequential");
    outcomes_[m].plan = plans_[m];
  }
}

void RunPerfGate::add_samples(std::size_t model, std::span<const double> baseline,
                              std::span<const double> candidate) {
  KILN_ASSERT(model < states_.size(), "model index out of range");
  ModelState& state = states_[model];
  KILN_ASSERT(state.awaiting_samples, "samples for a model the gate did not ask for");
  state.baseline.insert(state.baseline.end(), baseline.begin(), baseline.end());
  state.candidate.insert(state.candidate.end(), candidate.begin(), candidate.end());
  if (state.first_repeats == 0) state.first_repeats = std::max(baseline.size(), candidate.size());
  state.has_new_samples = true;
}

bool RunPerfGate::finished() const {
  for (const ModelGateOutcome& outcome : outcomes_) {
    if (!outcome.finished) return false;
  }
  return true;
}

void RunPerfGate::finish_with_error(std::size_t model, Error error) {
  ModelState& state = states_[model];
  state.awaiting_samples = false;
  state.has_new_samples = false;
  outcomes_[model].finished = true;
  outcomes_[model].verdict = Verdict::inconclusive;
  outcomes_[model].error = std::move(error);
}

std::vector<GateRequest> RunPerfGate::evaluate_sequential() {
  std::vector<GateRequest> requests;
  for (std::size_t m = 0; m < states_.size(); ++m) {
    ModelState& state = states_[m];
    if (!state.has_new_samples) continue;
    state.has_new_samples = false;
    state.awaiting_samples = false;
    const SequentialPlan& plan = plans_[m];
    ModelGateOutcome& outcome = outcomes_[m];
    auto test = mann_whitney_u(state.baseline, state.candidate);
    if (!test) {
      finish_with_error(m, test.error());
      continue;
    }
    const double z = worse_rank_z(*test, options_.higher_is_better);
    const LookDecision decision = decide_look(plan, outcome.looks_taken, z);
    ++outcome.looks_taken;
    outcome.sequential_z = z;
    outcome.initial_extra_rounds = outcome.looks_taken - 1;
    if (decision == LookDecision::go_on) {
      state.awaiting_samples = true;
      requests.push_back({m, GateRequest::Kind::extra_repeats, plan.repeats_per_look});
      continue;
    }
    // The shift and interval for the report; the verdict is the bound's.
    auto comparison = compare(state.baseline, state.candidate, options_, derive_seed(seed_, m));
    if (!comparison) {
      finish_with_error(m, comparison.error());
      continue;
    }
    outcome.initial = std::move(*comparison);
    outcome.initial_samples = {state.baseline, state.candidate};
    outcome.initial_adjusted_p_value = test->p_value;
    outcome.finished = true;
    switch (decision) {
      case LookDecision::regression: outcome.verdict = Verdict::regression; break;
      case LookDecision::improvement: outcome.verdict = Verdict::improvement; break;
      case LookDecision::no_change:
      case LookDecision::go_on: outcome.verdict = Verdict::no_change; break;
    }
    outcome.regression_confirmed = outcome.verdict == Verdict::regression;
  }
  return requests;
}

std::vector<GateRequest> RunPerfGate::evaluate() {
  if (options_.rule == GateRule::sequential) return evaluate_sequential();
  std::vector<GateRequest> requests;
  std::vector<std::optional<Comparison>> fresh(states_.size());

  for (std::size_t m = 0; m < states_.size(); ++m) {
    ModelState& state = states_[m];
    if (!state.has_new_samples) continue;
    // One bootstrap stream per model, stage and evaluation: reproducible, independent.
    const std::uint64_t stream = derive_seed(derive_seed(seed_, m), static_cast<std::uint64_t>(state.evaluations));
    ++state.evaluations;
    auto comparison = compare(state.baseline, state.candidate, options_, stream);
    if (!comparison) {
      finish_with_error(m, comparison.error());
      continue;
    }
    if (!state.confirming) state.initial_p_value = comparison->test.p_value;
    fresh[m] = std::move(*comparison);
  }

  // Benjamini-Hochberg over the latest first-stage p-value of every model that has one;
  // the rest of the run's models count as p = 1.
  std::vector<double> p_values;
  std::vector<std::size_t> p_model;
  for (std::size_t m = 0; m < states_.size(); ++m) {
    if (states_[m].initial_p_value) {
      p_values.push_back(*states_[m].initial_p_value);
      p_model.push_back(m);
    }
  }
  std::vector<double> adjusted(states_.size(), 1.0);
  if (!p_values.empty()) {
    auto bh = benjamini_hochberg(p_values, options_.fdr_q, states_.size());
    KILN_ASSERT(bh.has_value(), "p-values from the test are valid probabilities");
    for (std::size_t k = 0; k < p_model.size(); ++k) adjusted[p_model[k]] = bh->adjusted_p_values[k];
  }

  for (std::size_t m = 0; m < states_.size(); ++m) {
    if (!fresh[m]) continue;
    ModelState& state = states_[m];
    state.has_new_samples = false;
    state.awaiting_samples = false;
    const Comparison& comparison = *fresh[m];
    Verdict verdict;
    if (state.confirming) {
      verdict = decide(comparison, comparison.test.p_value, options_.alpha, options_);
      outcomes_[m].confirmation = comparison;
      outcomes_[m].confirmation_samples = {state.baseline, state.candidate};
      outcomes_[m].confirmation_extra_rounds = state.extra_rounds_done;
    } else {
      verdict = decide(comparison, adjusted[m], options_.fdr_q, options_);
      outcomes_[m].initial = comparison;
      outcomes_[m].initial_samples = {state.baseline, state.candidate};
      outcomes_[m].initial_adjusted_p_value = adjusted[m];
      outcomes_[m].initial_extra_rounds = state.extra_rounds_done;
    }
    apply(m, verdict, requests);
  }
  return requests;
}

void RunPerfGate::apply(std::size_t model, Verdict verdict, std::vector<GateRequest>& requests) {
  ModelState& state = states_[model];
  ModelGateOutcome& outcome = outcomes_[model];
  switch (next_step(verdict, GateProgress{state.confirming, state.extra_rounds_done}, options_)) {
    case NextStep::add_repeats:
      ++state.extra_rounds_done;
      state.awaiting_samples = true;
      requests.push_back({model, GateRequest::Kind::extra_repeats, options_.extra_repeats_per_round});
      return;
    case NextStep::confirm_with_rerun:
      // A fresh, independent comparison: new samples on both sides, its own extra rounds.
      state.confirming = true;
      state.extra_rounds_done = 0;
      state.baseline.clear();
      state.candidate.clear();
      state.awaiting_samples = true;
      requests.push_back({model, GateRequest::Kind::confirmation_rerun,
                          static_cast<int>(state.first_repeats)});
      return;
    case NextStep::report:
      outcome.finished = true;
      outcome.verdict = verdict;
      outcome.regression_confirmed = state.confirming && verdict == Verdict::regression;
      outcome.regression_unconfirmed = state.confirming && verdict != Verdict::regression;
      return;
  }
}

}  // namespace kiln::stats

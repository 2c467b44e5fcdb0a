#include "qualification/run_evidence.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace kiln::qualification {

using json = nlohmann::json;

namespace {

// JSON has no NaN or infinity: they are written as strings (docs/workloads.md).
json json_number(double value) {
  if (std::isfinite(value)) return value;
  return std::isnan(value) ? json("nan") : json(value > 0 ? "inf" : "-inf");
}

json samples_json(const stats::SamplePair& samples) {
  json baseline = json::array();
  json candidate = json::array();
  for (double value : samples.baseline) baseline.push_back(json_number(value));
  for (double value : samples.candidate) candidate.push_back(json_number(value));
  return {{"baseline", std::move(baseline)}, {"candidate", std::move(candidate)}};
}

}  // namespace

std::string percent(double fraction) { return fmt::format("{:+.2f}%", fraction * 100.0); }

json to_json(const stats::Comparison& c) {
  json out = {{"p_value", json_number(c.test.p_value)},
              {"method", stats::to_string(c.test.method)},
              {"n_baseline", c.test.n_baseline},
              {"n_candidate", c.test.n_candidate},
              {"baseline_median", json_number(c.shift.baseline_median)},
              {"hodges_lehmann", json_number(c.shift.hodges_lehmann)},
              {"relative_shift", json_number(c.shift.relative)},
              {"interval_method", stats::to_string(c.interval_method)},
              {"relative_ci", {json_number(c.relative_ci.low), json_number(c.relative_ci.high)}},
              {"ci_confidence", c.relative_ci.confidence}};
  if (c.bootstrap_ci) out["bootstrap_ci"] = {json_number(c.bootstrap_ci->low), json_number(c.bootstrap_ci->high)};
  return out;
}

json to_json(const stats::ModelGateOutcome& o) {
  json out = {{"finished", o.finished},
              {"verdict", stats::to_string(o.verdict)},
              {"regression_confirmed", o.regression_confirmed},
              {"regression_unconfirmed", o.regression_unconfirmed},
              {"initial_adjusted_p_value", json_number(o.initial_adjusted_p_value)},
              {"initial_extra_rounds", o.initial_extra_rounds},
              {"confirmation_extra_rounds", o.confirmation_extra_rounds}};
  out["initial"] = o.initial ? to_json(*o.initial) : json(nullptr);
  out["initial_samples"] = samples_json(o.initial_samples);
  out["confirmation"] = o.confirmation ? to_json(*o.confirmation) : json(nullptr);
  out["confirmation_samples"] = samples_json(o.confirmation_samples);
  out["error"] = o.error ? json(o.error->describe()) : json(nullptr);
  if (o.plan) {
    const stats::SequentialPlan& plan = *o.plan;
    out["sequential"] = {
        {"noise",
         {{"relative_sigma", plan.noise.relative_sigma},
          {"measured_relative_sigma", plan.noise.measured_relative_sigma},
          {"outlier_fraction", plan.noise.outlier_fraction},
          {"recorded_samples", plan.noise.samples},
          {"recorded_jobs", plan.noise.batches}}},
        {"repeats_per_look", plan.repeats_per_look},
        {"looks", plan.looks},
        {"max_repeats_per_side", plan.max_repeats_per_side()},
        {"capped", plan.capped},
        {"efficacy_z", plan.efficacy_z},
        {"futility_z", plan.futility_z},
        {"expected_repeats_no_change", plan.expected_repeats_no_change},
        {"expected_repeats_at_min_effect", plan.expected_repeats_at_min_effect},
        {"looks_taken", o.looks_taken},
        {"z", json_number(o.sequential_z)}};
  }
  return out;
}

json to_json(const TriageAction& a) {
  return {{"decision", to_string(a.decision)},
          {"reason", a.reason},
          {"quarantine_node", a.quarantine_node ? json(*a.quarantine_node) : json(nullptr)},
          {"ticket_team", a.ticket_team ? json(*a.ticket_team) : json(nullptr)},
          {"start_bisection", a.start_bisection},
          {"count_flake", a.count_flake}};
}

// "throughput -3.05% (interval -3.9% .. -2.2%, p 1.2e-05)" from the comparison the verdict used.
std::string describe_comparison(const stats::Comparison& c, double p_value) {
  return fmt::format("throughput {} ({:.1f}% interval {} .. {}, p {:.2g}, {} vs {} samples)", percent(c.shift.relative),
                     c.relative_ci.confidence * 100.0, percent(c.relative_ci.low), percent(c.relative_ci.high), p_value,
                     c.test.n_candidate, c.test.n_baseline);
}

std::string describe_plan(const stats::SequentialPlan& plan) {
  const stats::NoiseEstimate& noise = plan.noise;
  const std::string source =
      noise.samples == 0
          ? "no recorded baseline samples: the prior"
          : fmt::format("measured {:.2f}% from {} recorded baseline samples in {} jobs, {:.1f}% outliers",
                        noise.measured_relative_sigma * 100, noise.samples, noise.batches, noise.outlier_fraction * 100);
  return fmt::format("noise {:.2f}% ({}); {} repeats per side per look, up to {} looks ({} at most){}",
                     noise.relative_sigma * 100, source, plan.repeats_per_look, plan.looks, plan.max_repeats_per_side(),
                     plan.capped ? ", capped: less power than the target" : "");
}

std::string describe_outcome(const stats::ModelGateOutcome& o) {
  if (o.error) return "the samples could not be compared: " + o.error->message;
  if (o.plan) {
    const stats::SequentialPlan& plan = *o.plan;
    const auto look = static_cast<std::size_t>(std::max(o.looks_taken, 1) - 1);
    std::string text = o.initial ? describe_comparison(*o.initial, o.initial_adjusted_p_value) : std::string();
    return text + fmt::format("; sequential rule: stopped at look {} of {}, z {:.2f} against the regression bound "
                              "{:.2f}; {}",
                              o.looks_taken, plan.looks, o.sequential_z, plan.efficacy_z[look], describe_plan(plan));
  }
  std::string text;
  if (o.initial) text = describe_comparison(*o.initial, o.initial_adjusted_p_value) + " (BH-adjusted p)";
  if (o.confirmation) {
    text += fmt::format("; confirmation rerun: {}", describe_comparison(*o.confirmation, o.confirmation->test.p_value));
  }
  if (o.regression_confirmed) text += "; regression confirmed by the rerun";
  if (o.regression_unconfirmed) {
    text += fmt::format("; the first measurement said regression, the rerun said {}: not reported",
                        stats::to_string(o.verdict));
  }
  return text;
}

}  // namespace kiln::qualification

// The performance gate: is a candidate's set of samples a regression against the baseline's?
//
// One comparison = Mann-Whitney U (significance) + Hodges-Lehmann relative shift (size) +
// a confidence interval for the relative shift (how sure of the size): by default the
// distribution-free rank interval that goes with the test, optionally the percentile bootstrap
// (always computed for people to read unless switched off). The decision rule, with
// "worse" the relative change in the bad direction (a throughput drop, a latency rise):
//
//   regression    significant, worse >= min_point_effect_fraction * min_effect, and the interval
//                 reaches min_effect (the data are consistent with a drop of min_effect or more)
//   improvement   the mirror image
//   no_change     the interval lies inside (-min_effect, +min_effect)
//   inconclusive  anything else: add repeats (bounded), then report
//
// A true drop of exactly min_effect has its point estimate below min_effect half the time, so
// the point estimate only has to pass a fraction of it; the interval's upper end carries the
// "at least min_effect" part. In a run, significance is judged on Benjamini-Hochberg adjusted
// p-values across all models (fdr_q); a regression is reported only after an independent rerun
// of that model also says regression (judged at alpha: it is one targeted test). The figures
// behind the defaults are in docs/qualification.md (kiln-bench-detection).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "common/enum_names.h"
#include "common/error.h"
#include "common/stats/mann_whitney.h"
#include "common/stats/sequential_gate.h"
#include "common/stats/shift.h"

namespace kiln::stats {

enum class Verdict { regression, improvement, no_change, inconclusive };
constexpr EnumTable<Verdict, 4> enum_names(Verdict) {
  return {{
      {Verdict::regression, "regression"},
      {Verdict::improvement, "improvement"},
      {Verdict::no_change, "no_change"},
      {Verdict::inconclusive, "inconclusive"},
  }};
}
inline std::string_view to_string(Verdict value) { return enum_name(value); }

// Which interval the rule uses. The rank interval has its stated coverage at every sample size;
// the percentile bootstrap covers less than stated at 5 to 20 samples a side (see
// docs/qualification.md), which turns true min_effect drops into no_change more often.
enum class IntervalMethod { rank_based, bootstrap };
constexpr EnumTable<IntervalMethod, 2> enum_names(IntervalMethod) {
  return {{
      {IntervalMethod::rank_based, "rank-based"},
      {IntervalMethod::bootstrap, "percentile bootstrap"},
  }};
}
inline std::string_view to_string(IntervalMethod value) { return enum_name(value); }

// How a run decides: `fixed` is the rule above (a fixed first measurement, BH across models,
// bounded extra rounds while inconclusive, a confirmation rerun); `sequential` sizes each model's
// repeats and looks from its measured noise and stops at a group-sequential bound
// (sequential_gate.h): no BH, no rerun, never inconclusive.
enum class GateRule { fixed, sequential };
constexpr EnumTable<GateRule, 2> enum_names(GateRule) {
  return {{
      {GateRule::fixed, "fixed"},
      {GateRule::sequential, "sequential"},
  }};
}
inline std::string_view to_string(GateRule value) { return enum_name(value); }

struct PerfGateOptions {
  GateRule rule = GateRule::fixed;
  double alpha = 0.01;                     // significance of one comparison (compare, rerun)
  double min_effect = 0.02;                // smallest relative change worth a verdict
  double fdr_q = 0.05;                     // Benjamini-Hochberg level across a run's models
  bool higher_is_better = true;            // throughput: true; latency or time: false
  int max_extra_rounds = 2;                // per stage (first comparison, confirmation rerun)
  int extra_repeats_per_round = 10;        // per side, per extra round
  double min_point_effect_fraction = 0.5;  // the point estimate must pass this * min_effect
  double ci_confidence = 0.999;            // two-sided interval used by the rule
  IntervalMethod interval_method = IntervalMethod::rank_based;
  int bootstrap_resamples = 2000;
  bool bootstrap_for_report = true;  // compute the bootstrap interval even when the rule does not use it
  SequentialOptions sequential;      // the sequential rule's targets: false alarms, power, the drop
  NoiseOptions noise;                // how the sequential rule estimates a model's noise
};

Status validate(const PerfGateOptions& options);

struct Comparison {
  MannWhitneyResult test;
  ShiftEstimate shift;
  IntervalMethod interval_method = IntervalMethod::rank_based;
  ConfidenceInterval relative_ci;                    // of shift.relative, used by the rule
  std::optional<ConfidenceInterval> bootstrap_ci;    // of shift.relative (percentile bootstrap)
  // Relative change oriented so that positive is worse (a drop when higher is better), and
  // relative_ci oriented the same way.
  double worse_relative = 0;
  ConfidenceInterval worse_ci;
};

// Test, shift and intervals for one pair of samples; the bootstrap draws from `seed`.
Result<Comparison> compare(std::span<const double> baseline, std::span<const double> candidate,
                           const PerfGateOptions& options, std::uint64_t seed);

// The decision rule above. `p_value` is the raw p for one comparison or the BH-adjusted p in
// a run; `significance_level` is alpha or fdr_q accordingly.
Verdict decide(const Comparison& comparison, double p_value, double significance_level,
               const PerfGateOptions& options);

// Smallest two-sided p-value an exact test with these sizes can give (2 / C(n1+n2, n1)):
// with 4 samples a side it is 1/35, so alpha 0.01 is out of reach.
double smallest_exact_p_value(std::size_t n1, std::size_t n2);

enum class NextStep { add_repeats, confirm_with_rerun, report };
constexpr EnumTable<NextStep, 3> enum_names(NextStep) {
  return {{
      {NextStep::add_repeats, "add_repeats"},
      {NextStep::confirm_with_rerun, "confirm_with_rerun"},
      {NextStep::report, "report"},
  }};
}
inline std::string_view to_string(NextStep value) { return enum_name(value); }

struct GateProgress {
  bool confirming = false;    // this comparison is the confirmation rerun
  int extra_rounds_done = 0;  // in the current stage
};

// Inconclusive: more repeats while rounds remain. Regression in the first stage: rerun to
// confirm. Everything else: report.
NextStep next_step(Verdict verdict, const GateProgress& progress, const PerfGateOptions& options);

// Run-level evaluation: BH across the comparisons of all models of a run, then the rule.
// `family_size` counts models without a comparison yet (as p = 1); 0 means comparisons.size().
struct RunVerdict {
  double adjusted_p_value = 1;
  Verdict verdict = Verdict::inconclusive;
};
Result<std::vector<RunVerdict>> evaluate_run(std::span<const Comparison> comparisons,
                                             const PerfGateOptions& options,
                                             std::size_t family_size = 0);

// What the shell must measure next for one model.
struct GateRequest {
  enum class Kind { extra_repeats, confirmation_rerun };
  std::size_t model = 0;
  Kind kind = Kind::extra_repeats;
  int repeats_per_side = 0;
};

// The two sides of one comparison, as measured.
struct SamplePair {
  std::vector<double> baseline;
  std::vector<double> candidate;
};

struct ModelGateOutcome {
  bool finished = false;
  Verdict verdict = Verdict::inconclusive;  // final once finished
  bool regression_confirmed = false;        // verdict is regression and the rerun agreed
  bool regression_unconfirmed = false;      // the first stage said regression, the rerun did not
  std::optional<Comparison> initial;        // latest comparison of the first stage
  SamplePair initial_samples;               // what it compared: the first measurement and extra rounds
  double initial_adjusted_p_value = 1;
  int initial_extra_rounds = 0;
  std::optional<Comparison> confirmation;
  SamplePair confirmation_samples;
  int confirmation_extra_rounds = 0;
  std::optional<Error> error;               // the samples could not be compared
  // The sequential rule: the model's plan, the looks taken and the statistic at the last one.
  std::optional<SequentialPlan> plan;
  int looks_taken = 0;
  double sequential_z = 0;
};

// The gate over one run (a nightly, a smoke), sans-IO: the shell measures, hands samples in
// with add_samples, calls evaluate, and measures what the returned requests ask for (more
// repeats appended to the same stage, or a fresh independent rerun for a confirmation) until
// finished(). Deterministic for a seed. Hand in every model's first samples before the first
// evaluate: models still without samples count as p = 1 in the Benjamini-Hochberg family.
//
// Under the sequential rule every model has its plan (plan_sequential); the shell measures
// plan.repeats_per_look per side first, and each extra round asks for as many again. A model stops
// at the first look whose statistic crosses a bound: regression (reported, regression_confirmed:
// the bound is the false-alarm guarantee, there is no rerun), improvement or no_change. The shift
// and interval are computed once, at the end, for the report.
class RunPerfGate {
 public:
  RunPerfGate(std::size_t model_count, PerfGateOptions options, std::uint64_t seed);
  // The sequential rule: one plan per model.
  RunPerfGate(PerfGateOptions options, std::uint64_t seed, std::vector<SequentialPlan> plans);

  // Appends samples to the model's current stage. Only valid while that model is awaiting
  // samples (at the start, or after a request for it).
  void add_samples(std::size_t model, std::span<const double> baseline,
                   std::span<const double> candidate);

  // Evaluates every model that received samples since its last evaluation.
  std::vector<GateRequest> evaluate();

  bool finished() const;
  std::span<const ModelGateOutcome> outcomes() const { return outcomes_; }
  const PerfGateOptions& options() const { return options_; }

 private:
  struct ModelState {
    bool confirming = false;
    bool has_new_samples = false;
    bool awaiting_samples = true;
    int extra_rounds_done = 0;
    int evaluations = 0;
    std::size_t first_repeats = 0;
    std::vector<double> baseline;
    std::vector<double> candidate;
    std::optional<double> initial_p_value;
  };

  void apply(std::size_t model, Verdict verdict, std::vector<GateRequest>& requests);
  void finish_with_error(std::size_t model, Error error);
  std::vector<GateRequest> evaluate_sequential();

  std::vector<SequentialPlan> plans_;

  PerfGateOptions options_;
  std::uint64_t seed_;
  std::vector<ModelState> states_;
  std::vector<ModelGateOutcome> outcomes_;
};

}  // namespace kiln::stats

// Correctness gates for training runs (DESIGN.md principle 4 and "Model gates in practice"): the
// loss curve follows the reference curve within a band, and the final eval reaches a share of the
// reference score. Inference outputs are judged per tensor by kiln::numerics::compare on the
// agent; this is the run-level gate the coordinator applies to a training result. Pure.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "common/enum_names.h"
#include "common/error.h"
#include "qualification/model_set.h"

namespace kiln::qualification {

// One logged loss value; the curves log one every 5 steps (Megatron-LM's golden curves).
struct LossPoint {
  int step = 0;
  double loss = 0.0;
};

struct LossCurveGateOptions {
  // Points with step < warmup_steps are not held to the bands (early training is chaotic);
  // a NaN there still fails.
  int warmup_steps = 0;
  double pointwise_band_relative = 0.05;  // |actual - reference| <= 5% of |reference|
  double max_fraction_outside = 0.01;     // of compared points, rounded down (1% of 100 = 1)
  // A trailing moving average of this many points must stay within its own, tighter band: a
  // curve shifted by 3% everywhere passes every point but is not the same training.
  int moving_average_points = 5;
  double moving_average_band_relative = 0.03;
  std::size_t max_reported = 20;  // failures kept as evidence, worst first
};

Status validate(const LossCurveGateOptions& options);

enum class PointProblem {
  outside_band,  // finite, but further from the reference than the band allows
  not_finite,    // NaN or infinity: always fails the gate
  missing,       // the reference has a point at this step, the run does not
};
constexpr EnumTable<PointProblem, 3> enum_names(PointProblem) {
  return {{
      {PointProblem::outside_band, "outside_band"},
      {PointProblem::not_finite, "not_finite"},
      {PointProblem::missing, "missing"},
  }};
}
inline std::string_view to_string(PointProblem value) { return enum_name(value); }

struct LossPointFailure {
  std::size_t index = 0;  // into the reference curve (for a moving average: its last point)
  int step = 0;
  double reference = 0.0;
  double actual = 0.0;              // NaN when missing
  double relative_deviation = 0.0;  // |actual - reference| / |reference|; inf when not finite or missing
  PointProblem problem = PointProblem::outside_band;
};

struct LossCurveVerdict {
  bool passed = true;
  std::size_t points_compared = 0;  // reference points after warmup
  std::size_t points_outside_band = 0;
  std::size_t points_allowed_outside = 0;
  double max_relative_deviation = 0.0;  // over finite compared points
  bool saw_non_finite = false;
  bool moving_average_passed = true;
  double max_moving_average_deviation = 0.0;
  std::vector<LossPointFailure> pointwise_failures;       // worst first, at most max_reported
  std::vector<LossPointFailure> moving_average_failures;  // worst first, at most max_reported
  std::string detail;  // one readable sentence: what passed or what failed
};

// Points are matched by step; actual points at steps the reference lacks are ignored. Fails
// (an Error, not a verdict) when the reference is empty, has non-finite losses or steps that do
// not increase, or the options are invalid: that is a broken golden, not a broken run.
Result<LossCurveVerdict> check_loss_curve(const std::vector<LossPoint>& reference,
                                          const std::vector<LossPoint>& actual,
                                          const LossCurveGateOptions& options);

struct EvalVerdict {
  bool passed = true;
  double score = 0.0;
  double reference = 0.0;
  double threshold = kDefaultEvalThreshold;  // share of the reference required
  double required = 0.0;                     // threshold x reference
  double fraction_of_reference = 0.0;
  std::string detail;
};

// Higher is better (accuracy, BLEU). A non-finite score fails; a non-finite or non-positive
// reference, or a threshold outside (0, 1], is an Error.
Result<EvalVerdict> check_eval(double score, double reference, double threshold = kDefaultEvalThreshold);

struct TrainingVerdict {
  bool passed = true;
  LossCurveVerdict loss_curve;
  std::optional<EvalVerdict> eval;  // absent when the run has no eval
  std::string summary;
};

struct TrainingRun {
  std::vector<LossPoint> loss_curve;
  std::optional<double> eval_score;
};

struct TrainingReference {
  std::vector<LossPoint> loss_curve;
  std::optional<double> eval_score;
};

// Both gates; the eval gate runs when the reference has an eval score (a run without one then
// fails). eval_threshold is the model's (QualificationModel::eval_threshold).
Result<TrainingVerdict> check_training(const TrainingReference& reference, const TrainingRun& run,
                                       double eval_threshold = kDefaultEvalThreshold,
                                       const LossCurveGateOptions& options = {});

// What a training job's gates saw, kept for its run's report: both curves as logged, the bands
// they were held to and the verdicts (the report draws the curve against its band).
struct TrainingEvidence {
  std::vector<LossPoint> reference_loss_curve;
  std::vector<LossPoint> loss_curve;
  LossCurveGateOptions options;
  TrainingVerdict verdict;
};

// Evidence for tickets and reports. Non-finite numbers appear as "nan", "inf", "-inf".
nlohmann::json to_json(const LossCurveVerdict& verdict);
nlohmann::json to_json(const EvalVerdict& verdict);
nlohmann::json to_json(const TrainingVerdict& verdict);
nlohmann::json to_json(const TrainingEvidence& evidence);

}  // namespace kiln::qualification

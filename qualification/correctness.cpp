#include "qualification/correctness.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

namespace kiln::qualification {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

double relative_deviation(double actual, double reference) {
  if (!std::isfinite(actual)) return kInf;
  return std::abs(actual - reference) / std::max(std::abs(reference), 1e-12);
}

// Worst first: non-finite and missing (infinite deviation) before the largest finite ones.
void keep_worst(std::vector<LossPointFailure>& failures, std::size_t limit) {
  std::stable_sort(failures.begin(), failures.end(), [](const LossPointFailure& a, const LossPointFailure& b) {
    return a.relative_deviation > b.relative_deviation;
  });
  if (failures.size() > limit) failures.resize(limit);
}

nlohmann::json number(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  return value;
}

nlohmann::json failures_to_json(const std::vector<LossPointFailure>& failures) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& f : failures) {
    out.push_back({{"index", f.index},
                   {"step", f.step},
                   {"reference", number(f.reference)},
                   {"actual", number(f.actual)},
                   {"relative_deviation", number(f.relative_deviation)},
                   {"problem", to_string(f.problem)}});
  }
  return out;
}

nlohmann::json curve_to_json(const std::vector<LossPoint>& curve) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& point : curve) out.push_back({{"step", point.step}, {"loss", number(point.loss)}});
  return out;
}

}  // namespace

Status validate(const LossCurveGateOptions& options) {
  if (!(options.pointwise_band_relative > 0.0) || !(options.moving_average_band_relative > 0.0)) {
    return fail(Errc::invalid_argument, "the loss-curve bands must be positive, e.g. 0.05 for 5%");
  }
  if (!(options.max_fraction_outside >= 0.0 && options.max_fraction_outside < 1.0)) {
    return fail(Errc::invalid_argument, "max_fraction_outside must be in [0, 1), e.g. 0.01 for 1% of the points");
  }
  if (options.moving_average_points < 1) {
    return fail(Errc::invalid_argument, "moving_average_points must be at least 1");
  }
  if (options.warmup_steps < 0) return fail(Errc::invalid_argument, "warmup_steps must not be negative");
  return {};
}

Result<LossCurveVerdict> check_loss_curve(const std::vector<LossPoint>& reference,
                                          const std::vector<LossPoint>& actual,
                                          const LossCurveGateOptions& options) {
  if (auto ok = validate(options); !ok) return tl::unexpected(ok.error());
  if (reference.empty()) {
    return fail(Errc::invalid_argument, "the reference loss curve is empty; regenerate the golden");
  }
  for (std::size_t i = 0; i < reference.size(); ++i) {
    if (!std::isfinite(reference[i].loss)) {
      return fail(Errc::invalid_argument,
                  fmt::format("the reference loss at step {} is not finite; the golden is broken, regenerate it",
                              reference[i].step));
    }
    if (i > 0 && reference[i].step <= reference[i - 1].step) {
      return fail(Errc::invalid_argument,
                  fmt::format("the reference loss curve's steps do not increase at step {}; regenerate the golden",
                              reference[i].step));
    }
  }
  std::map<int, double> by_step;
  for (const auto& point : actual) by_step.emplace(point.step, point.loss);

  LossCurveVerdict verdict;
  std::vector<LossPointFailure> failures;
  // Pairs (reference, actual) after warmup, in order, for the moving average.
  std::vector<std::pair<double, double>> compared;
  std::vector<std::size_t> compared_index;
  for (std::size_t i = 0; i < reference.size(); ++i) {
    const LossPoint& expected = reference[i];
    auto it = by_step.find(expected.step);
    const bool after_warmup = expected.step >= options.warmup_steps;
    if (it == by_step.end()) {
      if (!after_warmup) continue;
      ++verdict.points_compared;
      ++verdict.points_outside_band;
      failures.push_back({i, expected.step, expected.loss, kNaN, kInf, PointProblem::missing});
      continue;
    }
    const double got = it->second;
    if (!std::isfinite(got)) {
      verdict.saw_non_finite = true;
      verdict.points_compared += after_warmup;
      verdict.points_outside_band += after_warmup;
      failures.push_back({i, expected.step, expected.loss, got, kInf, PointProblem::not_finite});
      continue;
    }
    if (!after_warmup) continue;
    ++verdict.points_compared;
    const double deviation = relative_deviation(got, expected.loss);
    verdict.max_relative_deviation = std::max(verdict.max_relative_deviation, deviation);
    if (deviation > options.pointwise_band_relative) {
      ++verdict.points_outside_band;
      failures.push_back({i, expected.step, expected.loss, got, deviation, PointProblem::outside_band});
    }
    compared.emplace_back(expected.loss, got);
    compared_index.push_back(i);
  }
  verdict.points_allowed_outside = static_cast<std::size_t>(
      std::floor(options.max_fraction_outside * static_cast<double>(verdict.points_compared)));

  // Trailing moving average over the finite compared points; a shorter curve gets one window.
  const std::size_t window = std::min<std::size_t>(static_cast<std::size_t>(options.moving_average_points),
                                                   compared.size());
  std::vector<LossPointFailure> average_failures;
  if (window > 0) {
    double sum_reference = 0.0;
    double sum_actual = 0.0;
    for (std::size_t i = 0; i < compared.size(); ++i) {
      sum_reference += compared[i].first;
      sum_actual += compared[i].second;
      if (i >= window) {
        sum_reference -= compared[i - window].first;
        sum_actual -= compared[i - window].second;
      }
      if (i + 1 < window) continue;
      const double mean_reference = sum_reference / static_cast<double>(window);
      const double mean_actual = sum_actual / static_cast<double>(window);
      const double deviation = relative_deviation(mean_actual, mean_reference);
      verdict.max_moving_average_deviation = std::max(verdict.max_moving_average_deviation, deviation);
      if (deviation > options.moving_average_band_relative) {
        const std::size_t index = compared_index[i];
        average_failures.push_back(
            {index, reference[index].step, mean_reference, mean_actual, deviation, PointProblem::outside_band});
      }
    }
  }
  verdict.moving_average_passed = average_failures.empty();

  std::vector<std::string> problems;
  if (verdict.saw_non_finite) problems.push_back("the loss became NaN or infinite");
  const std::size_t missing = static_cast<std::size_t>(std::count_if(
      failures.begin(), failures.end(), [](const LossPointFailure& f) { return f.problem == PointProblem::missing; }));
  if (missing > 0) problems.push_back(fmt::format("{} reference points have no value in the run", missing));
  const bool pointwise_passed = !verdict.saw_non_finite && verdict.points_outside_band <= verdict.points_allowed_outside;
  if (!pointwise_passed) {
    problems.push_back(fmt::format("{} of {} points outside the {:g}% band (allowed {})", verdict.points_outside_band,
                                   verdict.points_compared, options.pointwise_band_relative * 100,
                                   verdict.points_allowed_outside));
  }
  if (!verdict.moving_average_passed) {
    problems.push_back(fmt::format("the {}-point moving average leaves its {:g}% band at {} points (worst {:.2f}%)",
                                   window, options.moving_average_band_relative * 100, average_failures.size(),
                                   verdict.max_moving_average_deviation * 100));
  }
  verdict.passed = pointwise_passed && verdict.moving_average_passed;
  verdict.detail = verdict.passed
                       ? fmt::format("loss curve within the band: {} points compared, {} outside (allowed {}), worst "
                                     "{:.2f}%",
                                     verdict.points_compared, verdict.points_outside_band,
                                     verdict.points_allowed_outside, verdict.max_relative_deviation * 100)
                       : fmt::format("loss curve failed: {}", fmt::join(problems, "; "));
  keep_worst(failures, options.max_reported);
  keep_worst(average_failures, options.max_reported);
  verdict.pointwise_failures = std::move(failures);
  verdict.moving_average_failures = std::move(average_failures);
  return verdict;
}

Result<EvalVerdict> check_eval(double score, double reference, double threshold) {
  if (!(std::isfinite(reference) && reference > 0.0)) {
    return fail(Errc::invalid_argument,
                fmt::format("the reference eval score {} must be a positive number; regenerate the golden", reference));
  }
  if (!(threshold > 0.0 && threshold <= 1.0)) {
    return fail(Errc::invalid_argument,
                fmt::format("the eval threshold {} must be in (0, 1], e.g. 0.99 for 99% of the reference", threshold));
  }
  EvalVerdict verdict;
  verdict.score = score;
  verdict.reference = reference;
  verdict.threshold = threshold;
  verdict.required = threshold * reference;
  verdict.fraction_of_reference = score / reference;
  verdict.passed = std::isfinite(score) && score >= verdict.required;
  verdict.detail = fmt::format("eval score {:.6g} is {:.2f}% of the reference {:.6g} ({} {:g}%)", score,
                               verdict.fraction_of_reference * 100, reference,
                               verdict.passed ? "required at least" : "below the required", threshold * 100);
  return verdict;
}

Result<TrainingVerdict> check_training(const TrainingReference& reference, const TrainingRun& run,
                                       double eval_threshold, const LossCurveGateOptions& options) {
  auto loss = check_loss_curve(reference.loss_curve, run.loss_curve, options);
  if (!loss) return tl::unexpected(loss.error());
  TrainingVerdict verdict;
  verdict.loss_curve = std::move(*loss);
  verdict.passed = verdict.loss_curve.passed;
  std::string summary = verdict.loss_curve.detail;
  if (reference.eval_score) {
    auto eval = check_eval(run.eval_score.value_or(kNaN), *reference.eval_score, eval_threshold);
    if (!eval) return tl::unexpected(eval.error());
    if (!run.eval_score) eval->detail = "the run reported no eval score; the reference has one";
    verdict.passed = verdict.passed && eval->passed;
    summary += "; " + eval->detail;
    verdict.eval = std::move(*eval);
  }
  verdict.summary = fmt::format("{}: {}", verdict.passed ? "PASS" : "FAIL", summary);
  return verdict;
}

nlohmann::json to_json(const LossCurveVerdict& verdict) {
  return {{"passed", verdict.passed},
          {"points_compared", verdict.points_compared},
          {"points_outside_band", verdict.points_outside_band},
          {"points_allowed_outside", verdict.points_allowed_outside},
          {"max_relative_deviation", number(verdict.max_relative_deviation)},
          {"saw_non_finite", verdict.saw_non_finite},
          {"moving_average_passed", verdict.moving_average_passed},
          {"max_moving_average_deviation", number(verdict.max_moving_average_deviation)},
          {"pointwise_failures", failures_to_json(verdict.pointwise_failures)},
          {"moving_average_failures", failures_to_json(verdict.moving_average_failures)},
          {"detail", verdict.detail}};
}

nlohmann::json to_json(const EvalVerdict& verdict) {
  return {{"passed", verdict.passed},
          {"score", number(verdict.score)},
          {"reference", number(verdict.reference)},
          {"threshold", verdict.threshold},
          {"required", number(verdict.required)},
          {"fraction_of_reference", number(verdict.fraction_of_reference)},
          {"detail", verdict.detail}};
}

nlohmann::json to_json(const TrainingVerdict& verdict) {
  nlohmann::json json = {{"passed", verdict.passed}, {"loss_curve", to_json(verdict.loss_curve)},
                         {"summary", verdict.summary}};
  json["eval"] = verdict.eval ? to_json(*verdict.eval) : nlohmann::json(nullptr);
  return json;
}

nlohmann::json to_json(const TrainingEvidence& evidence) {
  nlohmann::json verdict = to_json(evidence.verdict);
  // The failing points are in the curves themselves: a report of a whole nightly keeps every
  // training model's, and the lists would about double what each costs in the record.
  verdict["loss_curve"].erase("pointwise_failures");
  verdict["loss_curve"].erase("moving_average_failures");
  return {{"reference_loss_curve", curve_to_json(evidence.reference_loss_curve)},
          {"loss_curve", curve_to_json(evidence.loss_curve)},
          {"warmup_steps", evidence.options.warmup_steps},
          {"band_relative", evidence.options.pointwise_band_relative},
          {"max_fraction_outside", evidence.options.max_fraction_outside},
          {"moving_average_points", evidence.options.moving_average_points},
          {"moving_average_band_relative", evidence.options.moving_average_band_relative},
          {"verdict", std::move(verdict)}};
}

}  // namespace kiln::qualification

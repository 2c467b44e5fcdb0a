#include "qualification/run_measure.h"

#include <cmath>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "common/stats/rng.h"
#include "qualification/correctness.h"

namespace kiln::qualification {

namespace {

using json = nlohmann::json;

constexpr std::string_view kWorkloadResultSchema = "kiln.workload-result/1";
constexpr std::string_view kBenchmarkReportSchema = "kiln.benchmark-report/1";

// A number in a workload result: JSON numbers, or the strings "nan", "inf", "-inf".
Result<double> read_number(const json& value, std::string_view what) {
  if (value.is_number()) return value.get<double>();
  if (value.is_null()) return std::nan("");
  if (value.is_string()) {
    const auto& text = value.get_ref<const std::string&>();
    if (text == "nan") return std::nan("");
    if (text == "inf") return HUGE_VAL;
    if (text == "-inf") return -HUGE_VAL;
  }
  return fail(Errc::bad_message, fmt::format("{} is {}, not a number; the workload must write numbers (or \"nan\", "
                                             "\"inf\", \"-inf\")",
                                             what, value.dump()));
}

Result<std::vector<double>> read_timed_samples(const json& benchmark, std::string_view field) {
  std::vector<double> samples;
  if (benchmark.is_null()) return samples;
  if (!benchmark.is_object()) {
    return fail(Errc::bad_message, fmt::format("`{}` must be an object or null (docs/workloads.md)", field));
  }
  if (!benchmark.contains("samples")) return samples;
  const json& list = benchmark.at("samples");
  if (!list.is_array()) return fail(Errc::bad_message, fmt::format("`{}.samples` must be an array", field));
  for (const json& sample : list) {
    if (!sample.is_object()) return fail(Errc::bad_message, fmt::format("`{}.samples` holds a non-object", field));
    if (sample.value("phase", std::string()) != "timed") continue;
    if (!sample.contains("throughput")) {
      return fail(Errc::bad_message, fmt::format("a timed sample of `{}` has no throughput", field));
    }
    auto value = read_number(sample.at("throughput"), fmt::format("a timed throughput of `{}`", field));
    if (!value) return tl::unexpected(value.error());
    if (!std::isfinite(*value) || *value <= 0) {
      return fail(Errc::bad_message, fmt::format("a timed throughput of `{}` is {}, not a positive finite number; the "
                                                 "benchmark is broken, rerun the job",
                                                 field, *value));
    }
    samples.push_back(*value);
  }
  return samples;
}

Result<std::vector<LossPoint>> read_loss_curve(const json& curve, std::string_view what) {
  std::vector<LossPoint> points;
  if (!curve.is_array()) return fail(Errc::bad_message, fmt::format("{} must be an array of {{step, loss}}", what));
  for (const json& point : curve) {
    if (!point.is_object() || !point.contains("step") || !point.at("step").is_number_integer() ||
        !point.contains("loss")) {
      return fail(Errc::bad_message, fmt::format("{} holds {}, not a {{step, loss}} point", what, point.dump()));
    }
    auto loss = read_number(point.at("loss"), fmt::format("a loss in {}", what));
    if (!loss) return tl::unexpected(loss.error());
    points.push_back({point.at("step").get<int>(), *loss});
  }
  return points;
}

// The failing outputs' summaries, or the training detail: why the workload said "incorrect".
std::string incorrect_detail(const json& document) {
  // The agent's own comparison of the outputs, when it made one, says why first.
  if (const auto verdict = document.find("kiln_verdict"); verdict != document.end() && verdict->is_object()) {
    const std::string detail = verdict->value("detail", std::string());
    if (!detail.empty()) return detail;
  }
  std::vector<std::string> reasons;
  const json* correctness = document.contains("correctness") ? &document.at("correctness") : nullptr;
  if (correctness != nullptr && correctness->is_object()) {
    if (correctness->contains("outputs") && correctness->at("outputs").is_array()) {
      for (const json& output : correctness->at("outputs")) {
        if (output.is_object() && !output.value("passed", true)) {
          reasons.push_back(fmt::format("{}: {}", output.value("name", std::string("output")),
                                        output.value("summary", std::string("outside tolerance"))));
        }
      }
    }
    if (correctness->contains("training") && correctness->at("training").is_object()) {
      const json& training = correctness->at("training");
      if (!training.value("passed", true)) reasons.push_back(training.value("detail", std::string("training gate")));
    }
  }
  if (reasons.empty()) return "the workload reported its outputs incorrect against the golden";
  return fmt::format("{}", fmt::join(reasons, "; "));
}

// The timed throughputs the agent kept (throttled samples left out) from its benchmark report.
Result<std::vector<double>> read_unflagged(const json& report, std::string_view field) {
  std::vector<double> samples;
  if (!report.contains("unflagged_timed_throughputs") || !report.at("unflagged_timed_throughputs").is_array()) {
    return fail(Errc::bad_message, fmt::format("`{}unflagged_timed_throughputs` must be an array (docs/workloads.md)",
                                               field));
  }
  for (const json& value : report.at("unflagged_timed_throughputs")) {
    auto number = read_number(value, fmt::format("a throughput of `{}unflagged_timed_throughputs`", field));
    if (!number) return tl::unexpected(number.error());
    if (!std::isfinite(*number) || *number <= 0) {
      return fail(Errc::bad_message, fmt::format("a throughput of `{}unflagged_timed_throughputs` is {}, not a positive "
                                                 "finite number; rerun the job",
                                                 field, *number));
    }
    samples.push_back(*number);
  }
  return samples;
}

Status apply_training_gate(const json& document, const QualificationModel& model, JobResult& result);

// A benchmark job's result is the agent's report on the workload's document
// (kiln.benchmark-report/1, agent/bench): samples taken while a chip throttled are left out.
Result<JobResult> read_benchmark_report(const json& report, const QualificationModel& model) {
  if (!report.contains("correctness_passed") || !report.at("correctness_passed").is_boolean()) {
    return fail(Errc::bad_message, "the benchmark report has no boolean `correctness_passed`");
  }
  JobResult result;
  result.correct = report.at("correctness_passed").get<bool>();
  if (!result.correct) result.correctness_detail = incorrect_detail(report);
  auto candidate = read_unflagged(report, "");
  if (!candidate) return tl::unexpected(candidate.error());
  result.candidate_samples = std::move(*candidate);
  if (report.contains("baseline") && report.at("baseline").is_object()) {
    auto baseline = read_unflagged(report.at("baseline"), "baseline.");
    if (!baseline) return tl::unexpected(baseline.error());
    result.baseline_samples = std::move(*baseline);
  }
  if (report.contains("training") && report.at("training").is_object()) {
    if (auto ok = apply_training_gate(report, model, result); !ok) return tl::unexpected(ok.error());
  }
  return result;
}

Result<JobResult> read_workload_result_json(const json& document, const QualificationModel& model) {
  if (!document.is_object()) return fail(Errc::bad_message, "a workload result must be a JSON object");
  if (document.value("schema", std::string()) == kBenchmarkReportSchema) return read_benchmark_report(document, model);
  if (document.value("schema", std::string()) != kWorkloadResultSchema) {
    return fail(Errc::bad_message, fmt::format("the document's schema is {}, expected \"{}\" (docs/workloads.md)",
                                               document.contains("schema") ? document.at("schema").dump() : "missing",
                                               kWorkloadResultSchema));
  }
  if (!document.contains("passed") || !document.at("passed").is_boolean()) {
    return fail(Errc::bad_message, "the workload result has no boolean `passed`; the workload must write its verdict");
  }
  JobResult result;
  result.correct = document.at("passed").get<bool>();
  // The agent's verdict on the outputs it judged (docs/workloads.md) overrules the workload's own.
  if (const auto verdict = document.find("kiln_verdict"); verdict != document.end() && verdict->is_object() &&
                                                          verdict->contains("passed") &&
                                                          verdict->at("passed").is_boolean()) {
    result.correct = verdict->at("passed").get<bool>();
  }
  if (!result.correct) result.correctness_detail = incorrect_detail(document);

  if (document.contains("job") && document.at("job").is_object() && document.at("job").contains("chips") &&
      document.at("job").at("chips").is_array()) {
    for (const json& chip : document.at("job").at("chips")) {
      if (chip.is_number_unsigned()) result.chips.push_back(chip.get<std::uint32_t>());
    }
  }
  if (document.contains("benchmark")) {
    auto samples = read_timed_samples(document.at("benchmark"), "benchmark");
    if (!samples) return tl::unexpected(samples.error());
    result.candidate_samples = std::move(*samples);
  }
  if (document.contains("baseline_benchmark")) {
    auto samples = read_timed_samples(document.at("baseline_benchmark"), "baseline_benchmark");
    if (!samples) return tl::unexpected(samples.error());
    result.baseline_samples = std::move(*samples);
  }

  if (document.value("kind", std::string()) != "training") return result;
  if (auto ok = apply_training_gate(document, model, result); !ok) return tl::unexpected(ok.error());
  return result;
}

// Training: the coordinator's own gate on the curve the workload reports, against the reference
// curve the workload read from its golden.
Status apply_training_gate(const json& document, const QualificationModel& model, JobResult& result) {
  const json* reference_json = nullptr;
  if (document.contains("correctness") && document.at("correctness").is_object() &&
      document.at("correctness").contains("training") && document.at("correctness").at("training").is_object()) {
    reference_json = &document.at("correctness").at("training");
  }
  if (reference_json == nullptr || !reference_json->contains("reference_loss_curve")) return {};

  TrainingReference reference;
  auto reference_curve = read_loss_curve(reference_json->at("reference_loss_curve"),
                                         "correctness.training.reference_loss_curve");
  if (!reference_curve) return tl::unexpected(reference_curve.error());
  reference.loss_curve = std::move(*reference_curve);
  if (reference_json->contains("eval_reference")) {
    auto eval_reference = read_number(reference_json->at("eval_reference"), "correctness.training.eval_reference");
    if (!eval_reference) return tl::unexpected(eval_reference.error());
    reference.eval_score = *eval_reference;
  }

  TrainingRun run;
  if (document.contains("training") && document.at("training").is_object()) {
    const json& training = document.at("training");
    if (training.contains("loss_curve")) {
      auto curve = read_loss_curve(training.at("loss_curve"), "training.loss_curve");
      if (!curve) return tl::unexpected(curve.error());
      run.loss_curve = std::move(*curve);
    }
    if (training.contains("eval") && training.at("eval").is_object() && training.at("eval").contains("score")) {
      auto score = read_number(training.at("eval").at("score"), "training.eval.score");
      if (!score) return tl::unexpected(score.error());
      run.eval_score = *score;
    }
  }
  const LossCurveGateOptions options;
  auto verdict = check_training(reference, run, model.eval_threshold, options);
  if (!verdict) {
    return fail(Errc::bad_message, fmt::format("the training reference of {} in this result is broken ({}); regenerate "
                                               "the golden",
                                               model.name, verdict.error().message));
  }
  result.training = TrainingEvidence{std::move(reference.loss_curve), std::move(run.loss_curve), options, *verdict};
  if (!verdict->passed) {
    if (result.correct) {
      result.correctness_detail = verdict->summary;
    } else {
      result.correctness_detail += "; " + verdict->summary;
    }
    result.correct = false;
  }
  return {};
}

}  // namespace

Result<JobResult> read_workload_result(std::string_view document, const QualificationModel& model) {
  try {
    const json parsed = json::parse(document);
    return read_workload_result_json(parsed, model);
  } catch (const json::exception& e) {
    return fail(Errc::bad_message,
                fmt::format("the workload result of {} is not a valid result document ({}); see docs/workloads.md",
                            model.name, e.what()));
  }
}

std::uint32_t repeats_for(const QualificationModel& model, const RunSettings& settings) {
  return model.benchmark.repeats.value_or(settings.repeats_per_side) * settings.repeats_multiplier;
}

int nodes_for(const QualificationModel& model, int chips_per_node) {
  return (model.chips + chips_per_node - 1) / chips_per_node;
}

std::uint64_t job_seed(std::uint64_t model_seed, std::uint64_t tag) {
  return stats::derive_seed(model_seed, tag) & static_cast<std::uint64_t>(INT64_MAX);
}

JobRequest job_for_model(JobPurpose purpose, const QualificationModel& model, const std::string& revision,
                         const std::string& bundle_id, int chips_per_node) {
  JobRequest job;
  job.purpose = purpose;
  job.model = model.name;
  job.revision = revision;
  job.nodes = nodes_for(model, chips_per_node);
  job.chips = job.nodes > 1 ? chips_per_node : model.chips;
  job.bundle_id = bundle_id;
  return job;
}

JobRequest measure_job(const QualificationModel& model, const std::string& revision, const std::string& bundle_id,
                       const std::string& baseline_bundle_id, const RunSettings& settings, int chips_per_node) {
  JobRequest job = job_for_model(JobPurpose::measure, model, revision, bundle_id, chips_per_node);
  job.baseline_bundle_id = baseline_bundle_id;
  job.repeats_per_side = baseline_bundle_id.empty() ? 0 : repeats_for(model, settings);
  job.seed = model.seed;
  return job;
}

std::optional<std::string> skip_reason(const QualificationModel& model, const std::string& revision,
                                       long healthy_nodes, int chips_per_node) {
  const int needed = nodes_for(model, chips_per_node);
  if (healthy_nodes >= needed) return std::nullopt;
  if (needed == 1) return fmt::format("no healthy node of revision {} in the fleet", revision);
  return fmt::format("needs {} chips: {} whole nodes of revision {}, and the fleet has {} healthy", model.chips,
                     needed, revision, healthy_nodes);
}

}  // namespace kiln::qualification

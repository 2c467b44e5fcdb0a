#include "sim/workloads/golden.h"

#include <cmath>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

namespace kiln::sim::workloads {

namespace fs = std::filesystem;

namespace {

constexpr const char* kGoldenSchema = "kiln.workload-golden/1";

fs::path json_path(const fs::path& dir, const ModelSpec& spec) { return dir / (spec.name + ".golden.json"); }
fs::path tensors_path(const fs::path& dir, const ModelSpec& spec) { return dir / (spec.name + ".safetensors"); }

// JSON has no NaN: a diverged loss is written as the string "nan".
nlohmann::json number(double value) {
  if (std::isfinite(value)) return value;
  return std::isnan(value) ? "nan" : (value > 0 ? "inf" : "-inf");
}

}  // namespace

nlohmann::json loss_curve_to_json(const std::vector<LossPoint>& curve) {
  nlohmann::json points = nlohmann::json::array();
  for (const auto& p : curve) points.push_back({{"step", p.step}, {"loss", number(p.loss)}});
  return points;
}

Status write_golden(const fs::path& dir, const ModelSpec& spec, std::uint64_t data_seed, const ModelRun& reference) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) {
    return fail(Errc::io, fmt::format("cannot create the golden folder {}: {}; choose a writable folder", dir.string(),
                                      ec.message()));
  }
  nlohmann::json doc = {{"schema", kGoldenSchema},
                        {"model", spec.name},
                        {"dtype", spec.dtype},
                        {"reference_dtype", "fp32"},
                        {"data_seed", data_seed},
                        {"outputs", nlohmann::json::array()}};
  for (const auto& out : reference.outputs) doc["outputs"].push_back(out.name);
  // The tolerances of the model's own checks, so that the agent's comparison of the outputs
  // (docs/workloads.md, "Outputs kiln judges") applies the same ones.
  nlohmann::json tolerances = nlohmann::json::object();
  for (const auto& check : output_checks(spec)) {
    for (const auto& out : reference.outputs) {
      if (out.name != check.name) continue;
      const auto options = tolerance_for(check, out.tensor);
      tolerances[check.name] = {{"dtype", numerics::to_string(options.dtype)},
                                {"rtol", options.tolerance->rtol},
                                {"atol", options.tolerance->atol},
                                {"ulps", options.tolerance->ulps},
                                {"saturate", options.saturation == numerics::Saturation::saturating}};
    }
  }
  if (!tolerances.empty()) doc["tolerances"] = std::move(tolerances);
  if (!reference.outputs.empty()) {
    auto written = numerics::write_safetensors_file(tensors_path(dir, spec), reference.outputs,
                                                    {{"model", spec.name}, {"data_seed", std::to_string(data_seed)}});
    if (!written) return written;
  }
  if (spec.kind == ModelKind::training) {
    doc["training"] = {{"loss_curve", loss_curve_to_json(reference.loss_curve)},
                       {"loss_every_steps", kLossCurveEverySteps},
                       {"eval", {{"metric", "accuracy"}, {"score", reference.eval_score.value_or(0.0)}}}};
  }
  std::ofstream out(json_path(dir, spec), std::ios::binary | std::ios::trunc);
  out << doc.dump(2) << "\n";
  if (!out) {
    return fail(Errc::io, fmt::format("cannot write {}; check the folder's space and permissions",
                                      json_path(dir, spec).string()));
  }
  return {};
}

Result<Golden> read_golden(const fs::path& dir, const ModelSpec& spec, std::uint64_t data_seed) {
  const fs::path path = json_path(dir, spec);
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return fail(Errc::not_found, fmt::format("no golden for {} in {} (missing {}); create it with kiln-workload-model "
                                             "--model {} --write-golden {}",
                                             spec.name, dir.string(), path.filename().string(), spec.name, dir.string()));
  }
  Golden golden;
  try {
    const auto doc = nlohmann::json::parse(in);
    if (doc.at("schema") != kGoldenSchema || doc.at("model") != spec.name) {
      return fail(Errc::invalid_argument, fmt::format("{} is not a {} golden for model {}; regenerate it with "
                                                      "--write-golden",
                                                      path.string(), kGoldenSchema, spec.name));
    }
    golden.model = spec.name;
    golden.data_seed = doc.at("data_seed").get<std::uint64_t>();
    if (golden.data_seed != data_seed) {
      return fail(Errc::invalid_argument, fmt::format("the golden in {} was made with data seed {}, this run uses {}; "
                                                      "pass --data-seed {} or regenerate the golden",
                                                      path.string(), golden.data_seed, data_seed, golden.data_seed));
    }
    if (doc.contains("training")) {
      for (const auto& p : doc.at("training").at("loss_curve")) {
        const auto& loss = p.at("loss");
        golden.loss_curve.push_back(
            {p.at("step").get<int>(), loss.is_number() ? loss.get<double>() : std::nan("")});
      }
      golden.eval_score = doc.at("training").at("eval").at("score").get<double>();
    }
    for (const auto& name : doc.at("outputs")) {
      numerics::ReadOptions options;
      options.tensor_name = name.get<std::string>();
      auto tensor = numerics::read_tensor_file(tensors_path(dir, spec), options);
      if (!tensor) return tl::unexpected(tensor.error());
      golden.outputs.push_back({*options.tensor_name, std::move(*tensor)});
    }
  } catch (const nlohmann::json::exception& e) {
    return fail(Errc::invalid_argument,
                fmt::format("{} is not a valid golden ({}); regenerate it with --write-golden", path.string(), e.what()));
  }
  return golden;
}

Result<Correctness> check_correctness(const ModelSpec& spec, const Golden& golden, const ModelRun& actual) {
  Correctness result;
  result.passed = true;
  nlohmann::json outputs = nlohmann::json::array();
  for (const auto& check : output_checks(spec)) {
    const numerics::Tensor* expected = nullptr;
    const numerics::Tensor* got = nullptr;
    for (const auto& o : golden.outputs) {
      if (o.name == check.name) expected = &o.tensor;
    }
    for (const auto& o : actual.outputs) {
      if (o.name == check.name) got = &o.tensor;
    }
    if (expected == nullptr || got == nullptr) {
      return fail(Errc::invalid_argument, fmt::format("output '{}' of {} is missing from the {}; regenerate the golden",
                                                      check.name, spec.name, expected == nullptr ? "golden" : "run"));
    }
    auto report = numerics::compare(*expected, *got, tolerance_for(check, *expected));
    if (!report) return tl::unexpected(report.error());
    bool passed = report->passed;
    nlohmann::json entry = {{"name", check.name},
                            {"compared_as", numerics::to_string(check.options.dtype)},
                            {"atol_rms_fraction", check.atol_rms_fraction},
                            {"report", numerics::report_to_json(*report)}};
    if (check.min_topk_agreement) {
      const double agreement = report->topk_agreement.value_or(0.0);
      entry["min_topk_agreement"] = *check.min_topk_agreement;
      entry["topk_agreement"] = agreement;
      passed = passed && agreement >= *check.min_topk_agreement;
    }
    entry["passed"] = passed;
    const std::string text = numerics::format_report_text(*report);
    entry["summary"] = text.substr(0, text.find('\n'));
    result.passed = result.passed && passed;
    outputs.push_back(std::move(entry));
  }
  result.document = {{"checked", true}, {"outputs", outputs}};
  if (spec.kind == ModelKind::training) {
    const auto t = check_training(golden.loss_curve, golden.eval_score.value_or(0.0), actual.loss_curve,
                                  actual.eval_score.value_or(std::nan("")));
    result.passed = result.passed && t.passed;
    result.document["training"] = {{"passed", t.passed},
                                   {"loss_curve_passed", t.loss_curve_passed},
                                   {"loss_band_relative", kLossBandRelative},
                                   {"points_compared", t.points_compared},
                                   {"points_outside_band", t.points_outside_band},
                                   {"points_allowed_outside", t.points_allowed_outside},
                                   {"max_relative_deviation", number(t.max_relative_deviation)},
                                   {"reference_loss_curve", loss_curve_to_json(golden.loss_curve)},
                                   {"eval_passed", t.eval_passed},
                                   {"eval_score", number(t.eval_score)},
                                   {"eval_reference", t.eval_reference},
                                   {"eval_min_fraction_of_reference", kEvalMinFractionOfReference},
                                   {"detail", t.detail}};
  }
  result.document["passed"] = result.passed;
  return result;
}

}  // namespace kiln::sim::workloads

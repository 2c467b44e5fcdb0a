#include "agent/bench/outputs.h"

#include <cmath>
#include <filesystem>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace kiln::agent::bench {

namespace {

tl::unexpected<Error> bad_outputs(const std::string& what) {
  return fail(Errc::bad_message, fmt::format("the workload's result document {}; fix the workload to follow "
                                             "docs/workloads.md (\"Outputs kiln judges\")",
                                             what));
}

Result<numerics::DType> dtype_field(const nlohmann::json& value, const std::string& where) {
  if (!value.is_string()) return bad_outputs(fmt::format("has a dtype in {} that is not a string", where));
  auto dtype = numerics::parse_dtype(value.get<std::string>());
  if (!dtype) return bad_outputs(fmt::format("has dtype in {}: {}", where, dtype.error().message));
  return *dtype;
}

// The verdict line of kiln compare's report and its worst element, as `kiln compare-tensors` prints them.
std::string worst_of(const numerics::CompareReport& report) {
  std::string out = numerics::report_verdict_line(report);
  if (!report.worst.empty()) out += "; worst element " + numerics::mismatch_text(report.worst.front());
  return out;
}

}  // namespace

Result<std::vector<DeclaredOutput>> parse_declared_outputs(const nlohmann::json& document) {
  std::vector<DeclaredOutput> outputs;
  if (!document.is_object() || !document.contains("outputs") || document.at("outputs").is_null()) return outputs;
  const auto& list = document.at("outputs");
  if (!list.is_array()) return bad_outputs("has `outputs` that is not an array");
  for (const auto& entry : list) {
    if (!entry.is_object() || !entry.contains("name") || !entry.at("name").is_string() || !entry.contains("file") ||
        !entry.at("file").is_string()) {
      return bad_outputs(fmt::format("has an `outputs` entry {} without string `name` and `file`", entry.dump()));
    }
    DeclaredOutput output{entry.at("name").get<std::string>(), entry.at("file").get<std::string>(), std::nullopt};
    const std::filesystem::path file(output.file);
    bool escapes = file.empty() || file.is_absolute();
    for (const auto& part : file) escapes = escapes || part == "..";
    if (escapes) {
      return bad_outputs(fmt::format("lists output '{}' at '{}', which is not a path inside the job's work dir "
                                     "(KILN_WORK_DIR); write it there and give the path relative to it",
                                     output.name, output.file));
    }
    for (const auto& seen : outputs) {
      if (seen.name == output.name) return bad_outputs(fmt::format("lists output '{}' twice", output.name));
    }
    if (entry.contains("dtype")) {
      auto dtype = dtype_field(entry.at("dtype"), "output '" + output.name + "'");
      if (!dtype) return tl::unexpected(dtype.error());
      output.dtype = *dtype;
    }
    outputs.push_back(std::move(output));
  }
  return outputs;
}

Result<GoldenTolerance> parse_golden_tolerance(const nlohmann::json& entry, const std::string& output) {
  const auto broken = [&](const std::string& what) {
    return fail(Errc::bad_message, fmt::format("the golden's tolerances for '{}' {}; fix the .golden.json "
                                               "(docs/workloads.md, \"Outputs kiln judges\")",
                                               output, what));
  };
  GoldenTolerance golden;
  if (!entry.is_object()) return broken("are not an object");
  if (entry.contains("dtype")) {
    if (!entry.at("dtype").is_string()) return broken("have a dtype that is not a string");
    auto dtype = numerics::parse_dtype(entry.at("dtype").get<std::string>());
    if (!dtype) return broken(dtype.error().message);
    golden.dtype = *dtype;
  }
  const auto number = [&](const char* name) -> std::optional<double> {
    if (!entry.contains(name)) return std::nullopt;
    const auto& value = entry.at(name);
    if (!value.is_number() || !(value.get<double>() >= 0) || !std::isfinite(value.get<double>())) return -1.0;
    return value.get<double>();
  };
  const auto rtol = number("rtol"), atol = number("atol"), ulps = number("ulps");
  if (rtol.has_value() != atol.has_value()) return broken("give rtol without atol or atol without rtol; give both");
  if (ulps && !rtol) return broken("give ulps without rtol and atol; give all three");
  if ((rtol && *rtol < 0) || (atol && *atol < 0) || (ulps && *ulps < 0)) {
    return broken("have an rtol, atol or ulps that is not a non-negative number");
  }
  if (rtol) golden.tolerance = numerics::Tolerance{*rtol, *atol, ulps.value_or(0.0)};
  if (entry.contains("saturate")) {
    if (!entry.at("saturate").is_boolean()) return broken("have a saturate that is not true or false");
    golden.saturate = entry.at("saturate").get<bool>();
  }
  return golden;
}

std::optional<numerics::DType> compared_dtype(const GoldenTolerance& golden, const DeclaredOutput& output,
                                              std::optional<numerics::DType> document_dtype) {
  if (golden.dtype) return golden.dtype;
  if (output.dtype) return output.dtype;
  return document_dtype;
}

numerics::CompareOptions compare_options_for(const GoldenTolerance& golden, numerics::DType dtype) {
  numerics::CompareOptions options;
  options.dtype = dtype;
  options.tolerance = golden.tolerance;
  options.saturation = golden.saturate ? numerics::Saturation::saturating : numerics::Saturation::non_saturating;
  options.max_reported = kWorstElementsKept;
  return options;
}

OutputsVerdict judge_outputs(const std::vector<OutputUnderJudgement>& outputs, bool workload_passed) {
  OutputsVerdict verdict;
  verdict.outputs_passed = true;
  std::vector<std::string> problems;
  nlohmann::json reports = nlohmann::json::array();
  for (const OutputUnderJudgement& output : outputs) {
    nlohmann::json entry = {{"name", output.declared.name}, {"file", output.declared.file}};
    std::string problem;
    if (!output.actual) {
      problem = fmt::format("output '{}' ({}) cannot be judged: {}; write it where the result document says, as "
                            ".npy or .safetensors",
                            output.declared.name, output.declared.file, output.actual.error().message);
    } else if (!output.golden) {
      problem = fmt::format("output '{}' has no golden to be judged against: {}", output.declared.name,
                            output.golden.error().message);
    } else if (auto report = numerics::compare(*output.golden, *output.actual, output.options); !report) {
      problem = fmt::format("output '{}' does not match its golden: {}; write it in the golden's shape",
                            output.declared.name, report.error().message);
    } else {
      entry["report"] = numerics::report_to_json(*report);
      if (!report->passed) problem = fmt::format("output '{}': {}", output.declared.name, worst_of(*report));
    }
    entry["passed"] = problem.empty();
    if (!problem.empty()) {
      entry["problem"] = problem;
      problems.push_back(problem);
      verdict.outputs_passed = false;
    }
    reports.push_back(std::move(entry));
  }
  const bool agree = verdict.outputs_passed == workload_passed;
  verdict.passed = verdict.outputs_passed && agree;
  const std::string why = fmt::format("{}", fmt::join(problems, "; "));
  if (verdict.outputs_passed && !workload_passed) {
    verdict.detail = "the workload says its outputs failed but kiln's comparison passes every output against the "
                     "golden; the two disagree, so the job fails: check the workload's own comparison";
  } else if (!verdict.outputs_passed && workload_passed) {
    verdict.detail = "the workload says passed but kiln's comparison fails; the two disagree, so the job fails: " + why;
  } else if (!verdict.outputs_passed) {
    verdict.detail = "kiln's comparison fails: " + why;
  }
  verdict.document = {{"passed", verdict.passed},          {"outputs_passed", verdict.outputs_passed},
                      {"workload_passed", workload_passed}, {"agree", agree},
                      {"detail", verdict.detail},          {"outputs", std::move(reports)}};
  return verdict;
}

}  // namespace kiln::agent::bench

#include "qualification/run_verdict.h"

#include <algorithm>
#include <map>
#include <set>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "qualification/run_report.h"

namespace kiln::qualification {
namespace {

using Json = nlohmann::json;

std::string text_of(const Json& object, const char* key) {
  const auto it = object.find(key);
  return it != object.end() && it->is_string() ? it->get<std::string>() : std::string();
}

bool flag_of(const Json& object, const char* key) {
  const auto it = object.find(key);
  return it != object.end() && it->is_boolean() && it->get<bool>();
}

// Reports written before `fails_run` was kept name the failing verdicts only.
bool model_fails_run(const Json& model) {
  const auto flag = model.find("fails_run");
  if (flag != model.end() && flag->is_boolean()) return flag->get<bool>();
  static const std::set<std::string> failing = {"performance_regression", "correctness_regression",
                                                "hardware_suspect", "error"};
  return failing.count(text_of(model, "verdict")) > 0;
}

std::string counts_text(const std::vector<std::string>& verdicts) {
  std::map<std::string, std::size_t> counts;
  for (const auto& verdict : verdicts) ++counts[verdict];
  std::vector<std::string> parts;
  for (const auto& [verdict, count] : counts) parts.push_back(fmt::format("{} {}", count, verdict));
  return fmt::format("{}", fmt::join(parts, ", "));
}

// The summary's second line: what a report of a run that ended before any job says about why.
std::string summary_reason(const Json& report) {
  const std::string summary = text_of(report, "summary");
  const auto first_end = summary.find('\n');
  if (first_end == std::string::npos) return "";
  std::string line = summary.substr(first_end + 1, summary.find('\n', first_end + 1) - first_end - 1);
  line.erase(0, line.find_first_not_of(' '));
  return line;
}

}  // namespace

RunVerdict run_verdict(const Json& report) {
  static const Json kNone = Json::array();
  if (!report.is_object()) return {"error", "the report is not a JSON object"};
  const auto listed = report.find("models");
  const Json& models = listed != report.end() && listed->is_array() ? *listed : kNone;
  std::vector<std::string> verdicts;
  std::vector<std::string> failing;
  for (const Json& model : models) {
    verdicts.push_back(model.is_object() ? text_of(model, "verdict") : "");
    if (model.is_object() && model_fails_run(model)) failing.push_back(verdicts.back());
  }
  if (!flag_of(report, "finished")) {
    if (models.empty()) return {"running", "no model run has started yet"};
    const auto decided = std::count_if(verdicts.begin(), verdicts.end(), [](const auto& v) { return v != "pending"; });
    return {"running", fmt::format("{} of {} model runs have a verdict so far", decided, models.size())};
  }
  if (flag_of(report, "passed")) {
    if (models.empty()) return {"passed", "no model to run"};
    return {"passed", fmt::format("{} model runs: {}", models.size(), counts_text(verdicts))};
  }
  const std::string reason = !text_of(report, "reason").empty() ? text_of(report, "reason") : summary_reason(report);
  if (flag_of(report, "could_not_run") || !text_of(report, "cancelled_by").empty()) return {"error", reason};
  if (failing.empty()) return {"failed", reason};
  if (std::all_of(failing.begin(), failing.end(), [](const auto& v) { return v == "error"; })) {
    return {"error", fmt::format("{} of {} model runs could not be measured: their jobs did not run", failing.size(),
                                 models.size())};
  }
  return {"failed", fmt::format("{} of {} model runs fail it: {}", failing.size(), models.size(), counts_text(failing))};
}

void end_with_error(Json& report, const std::string& why, const std::string& cancelled_by, std::int64_t now_ms) {
  std::map<std::string, std::size_t> counts;
  if (report.contains("models") && report["models"].is_array()) {
    for (Json& model : report["models"]) {
      if (model.value("verdict", "pending") == "pending") {
        model["verdict"] = "error";
        model["fails_run"] = true;
        model["detail"] = why;
      }
      ++counts[model.value("verdict", "")];
    }
  }
  report["verdict_counts"] = counts;
  report["finished"] = true;
  report["passed"] = false;
  report["finished_at_ms"] = now_ms;
  report["jobs_in_flight"] = Json::array();
  report["bisections_running"] = Json::array();
  report["reason"] = why;
  report["could_not_run"] = true;
  if (!cancelled_by.empty()) report["cancelled_by"] = cancelled_by;
  // The summary's lines for the models and tickets as they stand, under a first line of its own.
  std::string details;
  if (auto outline = report_outline_from_json(report); outline && !outline->models.empty()) {
    const std::string text = summary_text(*outline);
    details = text.substr(std::min(text.size(), text.find('\n') + 1));
  }
  report["summary"] = fmt::format("kiln {} {}: ERROR (candidate {})\n  {}\n{}", text_of(report, "tier"),
                                  text_of(report, "run_id"), text_of(report, "candidate_bundle_id").substr(0, 12), why,
                                  details);
}

}  // namespace kiln::qualification

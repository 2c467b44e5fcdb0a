#include "agent/bench/workload_exit.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace kiln::agent::bench {

namespace {

// A document claims to be a workload result when it is a JSON object with our schema; anything
// else is the agent's own jobs' documents (installs, diagnostics) or no workload result at all.
bool claims_workload_result(std::string_view document) {
  const auto json = nlohmann::json::parse(document, nullptr, false);
  return json.is_object() && json.contains("schema") && json.at("schema").is_string() &&
         json.at("schema").get<std::string>() == kResultSchema;
}

WorkloadEndJudgement crash(std::string detail) { return {WorkloadEnd::crashed, std::move(detail), std::nullopt}; }

}  // namespace

WorkloadEndJudgement judge_workload_end(int exit_code, std::string_view document,
                                        const std::optional<BenchmarkSettings>& asked) {
  if (document.empty()) {
    if (exit_code == 0 && !asked) return {WorkloadEnd::exited, "", std::nullopt};
    return crash(fmt::format("the workload exited with code {} without a result document: a crash, not a "
                             "correctness verdict (a workload writes its verdict to KILN_RESULT_FILE, "
                             "docs/workloads.md); read its output for why",
                             exit_code));
  }
  if (!asked && !claims_workload_result(document)) return {WorkloadEnd::other, "", std::nullopt};
  auto result = parse_workload_result(document, asked);
  if (!result) {
    return crash(fmt::format("the workload exited with code {} and its result document breaks the contract of "
                             "docs/workloads.md, so it counts as a crash: {}",
                             exit_code, result.error().message));
  }
  const bool passed = result->passed || result->status == WorkloadStatus::preempted;
  std::string detail;
  if (exit_code != (passed ? 0 : 1)) {
    detail = fmt::format("the workload exited with code {}; judged from its result document, which says {}",
                         exit_code, passed ? "passed" : "not passed");
  }
  return {passed ? WorkloadEnd::passed : WorkloadEnd::incorrect, std::move(detail), std::move(*result)};
}

}  // namespace kiln::agent::bench

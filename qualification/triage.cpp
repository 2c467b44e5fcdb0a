#include "qualification/triage.h"

#include <algorithm>

#include <fmt/format.h>

namespace kiln::qualification {

namespace {

std::size_t count(const std::vector<RunOutcome>& outcomes, RunOutcome which) {
  return static_cast<std::size_t>(std::count(outcomes.begin(), outcomes.end(), which));
}

}  // namespace

Result<TriageAction> triage(const FailedRun& failure, const RerunReport& rerun, const TriageOptions& options) {
  if (rerun.node_id == failure.node_id) {
    return fail(Errc::invalid_argument, fmt::format("the rerun of {} ran on the failing node {}; rerun it on another "
                                                    "node",
                                                    failure.test, failure.node_id));
  }
  if (rerun.revision != failure.revision) {
    return fail(Errc::invalid_argument,
                fmt::format("the rerun of {} ran on revision {}, the failure on {}; rerun on the same revision",
                            failure.test, rerun.revision, failure.revision));
  }
  if (rerun.bundle_id != failure.bundle_id) {
    return fail(Errc::invalid_argument, fmt::format("the rerun of {} used bundle {}, the failure {}; rerun with the "
                                                    "same bundle",
                                                    failure.test, rerun.bundle_id, failure.bundle_id));
  }
  if (!rerun.node_healthy) {
    return fail(Errc::invalid_argument, fmt::format("the rerun node {} is not healthy; rerun {} on a healthy node",
                                                    rerun.node_id, failure.test));
  }
  if (rerun.outcomes.size() < std::max<std::size_t>(options.min_reruns, 1)) {
    return fail(Errc::invalid_argument, fmt::format("{} has {} reruns on {}, triage needs at least {}", failure.test,
                                                    rerun.outcomes.size(), rerun.node_id,
                                                    std::max<std::size_t>(options.min_reruns, 1)));
  }
  const std::size_t passes = count(rerun.outcomes, RunOutcome::passed);
  const std::size_t failures = rerun.outcomes.size() - passes;
  const bool origin_passes_again =
      !rerun.origin_outcomes.empty() && count(rerun.origin_outcomes, RunOutcome::failed) == 0;

  TriageAction action;
  if (failures == rerun.outcomes.size()) {
    action.decision = TriageDecision::software_regression;
    action.start_bisection = true;
    action.reason = fmt::format("{} fails on {} too ({} of {} reruns), same bundle and revision: a software regression",
                                failure.test, rerun.node_id, failures, rerun.outcomes.size());
  } else if (passes == rerun.outcomes.size() && !origin_passes_again) {
    action.decision = TriageDecision::hardware_suspect;
    action.quarantine_node = failure.node_id;
    action.ticket_team = options.lab_team;
    action.reason = fmt::format("{} failed on {} and passes on {} ({} of {} reruns), same bundle and revision: node {} "
                                "is suspect",
                                failure.test, failure.node_id, rerun.node_id, passes, rerun.outcomes.size(),
                                failure.node_id);
  } else {
    action.decision = TriageDecision::flaky;
    action.count_flake = true;
    action.reason =
        passes == rerun.outcomes.size()
            ? fmt::format("{} failed once on {} and passes on reruns there and on {}: flaky, owner {}", failure.test,
                          failure.node_id, rerun.node_id, failure.owner_team)
            : fmt::format("{} passes {} and fails {} of {} reruns on {}: flaky, owner {}", failure.test, passes, failures,
                          rerun.outcomes.size(), rerun.node_id, failure.owner_team);
  }
  return action;
}

std::optional<std::string> choose_rerun_node(const FailedRun& failure, std::span<const NodeCandidate> nodes) {
  const NodeCandidate* best = nullptr;
  for (const auto& node : nodes) {
    if (node.id == failure.node_id || node.revision != failure.revision || !node.healthy) continue;
    if (best == nullptr || (node.free && !best->free) || (node.free == best->free && node.id < best->id)) best = &node;
  }
  if (best == nullptr) return std::nullopt;
  return best->id;
}

Status validate(const FlakeBudgetOptions& options) {
  if (!(options.max_flake_rate > 0.0 && options.max_flake_rate < 1.0)) {
    return fail(Errc::config, "max_flake_rate must be in (0, 1), e.g. 0.01 for 1% of runs");
  }
  if (options.window_ms <= 0) return fail(Errc::config, "the flake budget's window_ms must be positive");
  if (options.max_runs_kept_per_test == 0) return fail(Errc::config, "max_runs_kept_per_test must be positive");
  return {};
}

FlakeLedger::FlakeLedger(FlakeBudgetOptions options) : options_(options) {
  KILN_ASSERT(validate(options_).has_value(), "FlakeLedger needs valid options (validate them when loading)");
}

void FlakeLedger::record_run(std::string_view test, std::string_view owner_team, TimeMs at_ms, bool flaky) {
  auto it = tests_.find(test);
  if (it == tests_.end()) it = tests_.emplace(std::string(test), TestRuns{}).first;
  TestRuns& entry = it->second;
  entry.owner_team = std::string(owner_team);
  entry.runs.push_back({at_ms, flaky});
  while (!entry.runs.empty() &&
         (entry.runs.size() > options_.max_runs_kept_per_test || entry.runs.front().at_ms <= at_ms - options_.window_ms)) {
    entry.runs.pop_front();
  }
}

FlakeBudgetStatus FlakeLedger::status(std::string_view test, TimeMs now_ms) const {
  FlakeBudgetStatus status;
  status.test = std::string(test);
  auto it = tests_.find(test);
  if (it == tests_.end()) return status;
  status.owner_team = it->second.owner_team;
  for (const auto& run : it->second.runs) {
    if (run.at_ms <= now_ms - options_.window_ms || run.at_ms > now_ms) continue;
    ++status.runs;
    status.flakes += run.flaky;
  }
  if (status.runs > 0) status.flake_rate = static_cast<double>(status.flakes) / static_cast<double>(status.runs);
  const double allowed =
      options_.max_flake_rate * static_cast<double>(std::max(status.runs, options_.min_runs_for_rate));
  status.over_budget = static_cast<double>(status.flakes) > allowed;
  return status;
}

std::vector<FlakeBudgetStatus> FlakeLedger::statuses(TimeMs now_ms) const {
  std::vector<FlakeBudgetStatus> out;
  for (const auto& [name, entry] : tests_) {
    FlakeBudgetStatus status = this->status(name, now_ms);
    if (status.runs > 0) out.push_back(std::move(status));
  }
  return out;
}

std::vector<FlakeBudgetStatus> FlakeLedger::over_budget(TimeMs now_ms) const {
  std::vector<FlakeBudgetStatus> out = statuses(now_ms);
  std::erase_if(out, [](const FlakeBudgetStatus& status) { return !status.over_budget; });
  return out;
}

}  // namespace kiln::qualification

#include "qualification/run_triage.h"

#include <algorithm>

#include <fmt/format.h>

namespace kiln::qualification {

RunTriage::RunTriage(TriageOptions options, std::size_t pairs) : options_(std::move(options)), pairs_(pairs) {}

TriageStart RunTriage::begin(std::size_t pair, FailedRun failure, const std::string& detail, int nodes,
                             std::span<const NodeCandidate> healthy) {
  PairTriage& state = pairs_[pair];
  state.failure = std::move(failure);
  state.detail = detail.empty() ? "outputs incorrect against the golden" : detail;
  const std::string& node = state.failure.node_id;
  if (nodes > 1) {
    // Rerunning elsewhere cannot tell hardware from software here: it is bisected (on its
    // one-node proxy where it has one).
    return {{}, fmt::format("{} on {} nodes; a multi-node model has no single node to suspect, bisected as a "
                            "software regression",
                            state.detail, nodes)};
  }
  const auto other = choose_rerun_node(state.failure, healthy);
  if (!other) {
    return {{}, fmt::format("{} on node {}; unconfirmed: no other healthy node of revision {} to rerun on, bisected "
                            "as a software regression",
                            state.detail, node.empty() ? "?" : node, state.failure.revision)};
  }
  state.rerun_node = *other;
  TriageStart start;
  const std::size_t reruns = std::max<std::size_t>(options_.min_reruns, 1);
  for (std::size_t i = 0; i < reruns; ++i) start.reruns.push_back({JobPurpose::triage_rerun, *other});
  if (!node.empty()) start.reruns.push_back({JobPurpose::origin_rerun, node});
  state.outstanding = start.reruns.size();
  return start;
}

std::optional<std::string> RunTriage::rerun_elsewhere(std::size_t pair, const std::string& node,
                                                     std::span<const NodeCandidate> healthy) {
  PairTriage& state = pairs_[pair];
  state.quarantined.insert(node);
  std::vector<NodeCandidate> candidates;
  for (const NodeCandidate& candidate : healthy) {
    if (!state.quarantined.count(candidate.id)) candidates.push_back(candidate);
  }
  auto other = choose_rerun_node(state.failure, candidates);
  if (other) state.rerun_node = *other;
  return other;
}

std::optional<Result<TriageAction>> RunTriage::on_rerun(std::size_t pair, JobPurpose purpose,
                                                        std::optional<bool> correct) {
  PairTriage& state = pairs_[pair];
  if (correct) {
    auto& outcomes = purpose == JobPurpose::triage_rerun ? state.outcomes : state.origin_outcomes;
    outcomes.push_back(*correct ? RunOutcome::passed : RunOutcome::failed);
  }
  if (--state.outstanding > 0) return std::nullopt;
  const RerunReport rerun{state.rerun_node, state.failure.revision, state.failure.bundle_id, true, state.outcomes,
                          state.origin_outcomes};
  return triage(state.failure, rerun, options_);
}

}  // namespace kiln::qualification

#include "release/rollout_gate.h"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace kiln::release {

namespace {

// Problems named in a refusal; the rest are counted (`kiln envs` lists them all).
constexpr std::size_t kNodesNamed = 5;

std::string named_bundle(std::string_view id) { return id.empty() ? std::string("nothing") : std::string(id.substr(0, 12)); }

const protocol::NodeSummary* find_node(const std::vector<protocol::NodeSummary>& nodes, const std::string& node_id) {
  auto it = std::find_if(nodes.begin(), nodes.end(), [&](const protocol::NodeSummary& n) { return n.node_id == node_id; });
  return it == nodes.end() ? nullptr : &*it;
}

// Why one node of the environment does not show the bundle healthy; empty: it does.
std::string node_problem(const protocol::NodeConvergence& convergence, const protocol::NodeSummary* node) {
  std::string problem;
  if (convergence.state != "in_sync") {
    problem = convergence.detail.empty() ? convergence.state : fmt::format("{} ({})", convergence.state, convergence.detail);
  }
  // A node that installed the bundle and was quarantined since is no evidence of health either.
  if (node != nullptr && node->state == protocol::NodeState::quarantined &&
      problem.find("quarantined") == std::string::npos) {
    problem += fmt::format("{}quarantined ({})", problem.empty() ? "" : ", ", node->quarantine_reason);
  } else if (node != nullptr && node->state == protocol::NodeState::lost && convergence.state == "in_sync") {
    problem = "lost: its agent is not connected";
  }
  return problem.empty() ? "" : fmt::format("{} {}", convergence.node_id, problem);
}

}  // namespace

Status check_previous_rollout(const std::string& environment, const std::string& previous,
                              const std::string& bundle_id, const protocol::EnvironmentList& rollouts,
                              const std::vector<protocol::NodeSummary>& nodes) {
  const std::string refused = fmt::format("bundle {} may not go to {} yet", named_bundle(bundle_id), environment);
  const std::string reading_problem =
      rollouts.problem.empty() ? "" : fmt::format(" (its newest reading failed: {})", rollouts.problem);
  if (rollouts.repository.empty()) {
    return fail(Errc::conflict,
                fmt::format("{}: the coordinator watches no environments repository, so no node of {} installed it "
                            "and nothing shows it healthy there; set [environments] repo in coordinator.toml to this "
                            "repository (docs/releases.md) and promote once `kiln envs` shows {} converged",
                            refused, previous, previous));
  }
  auto env = std::find_if(rollouts.environments.begin(), rollouts.environments.end(),
                          [&](const protocol::EnvironmentConvergence& e) { return e.name == previous; });
  if (env == rollouts.environments.end() || env->bundle_id != bundle_id) {
    const std::string seen = env == rollouts.environments.end()
                                 ? fmt::format("has no environment {}", previous)
                                 : fmt::format("rolls out {} in {}, not this bundle", named_bundle(env->bundle_id), previous);
    return fail(Errc::conflict,
                fmt::format("{}: the coordinator's reading of {} (commit {}){} {}; wait until `kiln "
                            "envs` shows {} on bundle {} and converged, then promote again",
                            refused, rollouts.repository, named_bundle(rollouts.commit), reading_problem, seen, previous,
                            named_bundle(bundle_id)));
  }
  if (env->nodes.empty()) {
    return fail(Errc::conflict, fmt::format("{}: no node belongs to {}, so no node has run it there ({}); give {} nodes "
                                            "(nodes or node_labels in environments/{}.toml)",
                                            refused, previous, env->detail, previous, previous));
  }
  std::vector<std::string> problems;
  bool unhealthy = env->rollout == "halted";
  for (const auto& convergence : env->nodes) {
    const protocol::NodeSummary* node = find_node(nodes, convergence.node_id);
    std::string problem = node_problem(convergence, node);
    if (problem.empty()) continue;
    unhealthy = unhealthy || convergence.state == "failed" ||
                (node != nullptr && node->state != protocol::NodeState::up && node->state != protocol::NodeState::draining);
    if (problems.size() < kNodesNamed) problems.push_back(std::move(problem));
    else if (problems.size() == kNodesNamed) problems.push_back("more in `kiln envs`");
  }
  if (env->rollout == "converged" && problems.empty()) return {};
  const std::string state = fmt::format("its rollout in {} is {}{}", previous, env->rollout,
                                        env->detail.empty() || env->rollout == "halted" ? "" : " (" + env->detail + ")");
  const std::string remedy =
      unhealthy ? fmt::format("find out why on those nodes (`kiln envs`, `kiln result JOB`, `kiln nodes`), then roll {} "
                              "back (`kiln release rollback {}`) or promote a fixed bundle; {} takes a bundle only "
                              "once {} converged on it with every node up",
                              previous, previous, environment, previous)
                : fmt::format("wait until `kiln envs` shows {} converged with every node up, then promote again",
                              previous);
  const std::string named = problems.empty() ? "" : fmt::format("; {}", fmt::join(problems, "; "));
  return fail(Errc::conflict, fmt::format("{}: {}{}; {}", refused, state, named, remedy));
}

}  // namespace kiln::release

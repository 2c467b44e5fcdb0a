// The second way out of a wrong-results quarantine (docs/health.md, "What releases a node"): the
// job whose outputs were wrong runs again on that node, on the chips it had, and correct outputs
// release the node. Only that job may run on the quarantined node besides its diagnostics.
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/text/utf8.h"
#include "coordinator/core/agent_messages.h"
#include "coordinator/core/core_rules.h"
#include "coordinator/core/job_table.h"

namespace kiln::coordinator {

using namespace detail;

namespace {

// What a job's result says of its outputs against the golden: the agent's benchmark report
// (`correctness_passed`) or the workload's own document (`correctness {checked, passed}`);
// nothing when it says nothing (docs/workloads.md).
std::optional<bool> outputs_correct(const std::string& result) {
  auto doc = nlohmann::json::parse(result, nullptr, /*allow_exceptions=*/false);
  if (!doc.is_object()) return std::nullopt;
  if (auto passed = doc.find("correctness_passed"); passed != doc.end() && passed->is_boolean()) {
    return passed->get<bool>();
  }
  auto correctness = doc.find("correctness");
  if (correctness == doc.end() || !correctness->is_object()) return std::nullopt;
  auto checked = correctness->find("checked");
  auto passed = correctness->find("passed");
  if (checked == correctness->end() || !checked->is_boolean() || !checked->get<bool>() ||
      passed == correctness->end() || !passed->is_boolean()) {
    return std::nullopt;
  }
  return passed->get<bool>();
}

}  // namespace

std::optional<RecheckAsked> AgentSessions::recheck_request(const std::string& client, const Caller& caller,
                                                           const protocol::Envelope& m,
                                                           const protocol::RecheckNode& request, const JobTable& jobs) {
  const auto refuse = [&](Errc code, std::string why) { ctx_.reply_error(client, m.header.id, code, std::move(why)); };
  if (caller.role != Role::ci && caller.role != Role::lab && !privileged(caller.role)) {
    refuse(Errc::unauthorized, fmt::format("role {} may not recheck nodes; CI, lab, ops and admin keys may",
                                           protocol::enum_name(caller.role)));
    return std::nullopt;
  }
  NodeRecord* node = ctx_.registry.find(request.node_id);
  if (!node) {
    refuse(Errc::not_found, fmt::format("node {} is not registered; `kiln nodes` lists the nodes", request.node_id));
    return std::nullopt;
  }
  if (node->summary.state != NodeState::quarantined) {
    refuse(Errc::invalid_argument, fmt::format("node {} is not quarantined ({}): there is nothing to recheck",
                                               request.node_id, protocol::enum_name(node->summary.state)));
    return std::nullopt;
  }
  const std::uint64_t failing_id = node->summary.wrong_results_job_id;
  if (failing_id == 0) {
    refuse(Errc::invalid_argument,
           fmt::format("node {} was not quarantined for one job's wrong outputs alone ({}): a rerun cannot clear "
                       "that; run kiln diag {} --level {}",
                       request.node_id, node->summary.quarantine_reason, request.node_id, release_diag_level(*node)));
    return std::nullopt;
  }
  const JobRecord* failing = jobs.find(failing_id);
  if (!failing) {
    refuse(Errc::not_found, fmt::format("job {}, whose wrong outputs quarantined {}, is no longer kept; run kiln diag "
                                        "{} --level 3",
                                        failing_id, request.node_id, request.node_id));
    return std::nullopt;
  }
  return RecheckAsked{client, m.header.id, caller, request.node_id, failing_id};
}

void AgentSessions::recheck_submitted(const RecheckAsked& asked, const Result<std::uint64_t>& job_id) {
  if (!job_id) {
    ctx_.reply_error(asked.client, asked.corr, job_id.error().code, job_id.error().message);
    return;
  }
  ctx_.audit(asked.caller, "recheck_requested", "node " + asked.node_id,
             fmt::format("job {} reruns job {}, whose outputs were wrong there", *job_id, asked.failing_job_id));
  ctx_.sink.to_client(asked.client, protocol::JobAccepted{*job_id}, asked.corr);
}

NodeFollowUps AgentSessions::recheck_ended(const std::string& node_id, const JobRecord& job) {
  if (job.summary.recheck_of_job_id == 0) return {};
  NodeRecord* node = ctx_.registry.find(node_id);
  if (!node) return {};
  const std::uint64_t failing_id = job.summary.recheck_of_job_id;
  if (node->summary.state != NodeState::quarantined || node->summary.wrong_results_job_id != failing_id) {
    return {node_follow_up::NoteOnJob{job.summary.job_id,
                                      fmt::format("node {} is no longer quarantined for job {}'s wrong outputs: "
                                                  "this rerun decides nothing",
                                                  node_id, failing_id)}};
  }
  // A workload may exit non-zero on wrong outputs: its document still says so.
  const std::optional<bool> correct = outputs_correct(job.result);
  if (job.summary.state != JobState::succeeded || !correct || !*correct) {
    const std::string why =
        correct && !*correct ? "its outputs were wrong again"
        : job.summary.state != JobState::succeeded
            ? fmt::format("it ended {}: {}", protocol::enum_name(job.summary.state), job.summary.detail)
            : "its result says nothing of its outputs against the golden";
    const std::string stays =
        fmt::format("node {} stays quarantined: job {} reran job {} there and {}; rerun it (kiln recheck {}) or run "
                    "kiln diag {} --level 3",
                    node_id, job.summary.job_id, failing_id, why, node_id, node_id);
    ctx_.log(action::Severity::warn, stays);
    ctx_.audit("release_refused", "node " + node_id, stays);
    return {node_follow_up::NoteOnJob{job.summary.job_id, stays}};
  }
  return {release_from_quarantine(
              *node, fmt::format("job {} reran job {} there with correct outputs", job.summary.job_id, failing_id), job),
          node_follow_up::NoteOnJob{job.summary.job_id, fmt::format("node {} leaves quarantine", node_id)}};
}

}  // namespace kiln::coordinator

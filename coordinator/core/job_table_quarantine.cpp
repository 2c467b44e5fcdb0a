// The job table's side of a quarantine: a quarantined node takes only its diagnostics (and the
// rerun that rechecks it, quarantine_recheck.cpp), whatever the order of events. Attempts not yet
// started there are withdrawn; those already running carry the quarantine with their results,
// so that no one takes them for evidence about the stack.
#include <set>
#include <vector>

#include <fmt/format.h>

#include "common/text/utf8.h"
#include "coordinator/core/core_rules.h"
#include "coordinator/core/job_table.h"
#include "coordinator/core/scheduler_bridge.h"

namespace kiln::coordinator {

using namespace detail;

void JobTable::node_quarantined(const NodeRecord& node, TimeMs now) {
  const std::string& node_id = node.summary.node_id;
  const std::string& reason = node.summary.quarantine_reason;
  std::vector<std::uint64_t> unstarted;
  // Read first: saving a job updates the index read.
  const std::set<std::uint64_t> on_node = index_.on_node(node_id);
  for (std::uint64_t id : on_node) {
    JobRecord& job = jobs_.at(id);
    const auto state = job.summary.state;
    if ((state != JobState::assigned && state != JobState::running) ||
        takes_whole_node(job)) {
      continue;
    }
    // Withdrawn: a job on chips of its own whose agent has not said it started. A job inside a
    // developer lease runs on the lease's chips, which stay the lease's.
    const bool own_chips = job.lease_id == 0 && attempts_.own_lease(id).has_value();
    if (state == JobState::assigned && own_chips &&
        (attempts_.in(id, AttemptPhase::dispatched) || attempts_.in(id, AttemptPhase::start_deferred))) {
      unstarted.push_back(id);
      continue;
    }
    job.summary.node_quarantined = reason;
    save(job);
  }
  for (std::uint64_t id : unstarted) {
    JobRecord& job = jobs_.at(id);
    const std::string detail =
        fmt::format("attempt {} withdrawn from {} before it started: the node was quarantined ({}); queued again "
                    "keeping its age",
                    job.summary.attempt, node_id, reason);
    if (attempts_.in(id, AttemptPhase::start_deferred)) {
      // Its start was never sent: the chips simply go back.
      (void)ctx_.scheduler().cancel(ctx_.bridge.request_of(request_owner::Job{id}), ctx_.to_scheduler_time(now));
      attempts_.to(id, AttemptPhase::waiting);
      requeue_uncounted(job, detail, now);
    } else {
      (void)stop_and_requeue(job, fmt::format("node {} was quarantined before the job started", node_id), detail, now);
    }
  }
}

bool JobTable::stop_and_requeue(JobRecord& job, const std::string& why, const std::string& detail, TimeMs now) {
  const std::uint64_t id = job.summary.job_id;
  const std::string node_id = job.summary.node_id;
  if (!hold_chips_of_stopping_job(job, now)) return false;
  if (auto peer = ctx_.peer_of(node_id)) ctx_.to_agent(*peer, protocol::JobCancel{id, why});
  attempts_.to(id, AttemptPhase::waiting);
  attempts_.of(id).earlier_stopping = StoppingAttempt{node_id, job.summary.attempt, now};
  requeue_uncounted(job, detail, now);
  return true;
}

void JobTable::requeue_uncounted(JobRecord& job, const std::string& detail, TimeMs now) {
  // Not the job's fault: the attempt is not counted, as a preempted one is not.
  job.preemptions += 1;
  job.summary.state = JobState::queued;
  job.summary.detail = text::utf8_head(detail, protocol::kMessageText.max_len);
  job.summary.node_id.clear();
  job.summary.chip_indices.clear();
  if (auto s = submit_to_scheduler(job, now); !s) {
    finish(job, JobState::failed, "cannot be queued again: " + s.error().message, now);
    return;
  }
  save(job);
  ctx_.log(action::Severity::info, fmt::format("job {}: {}", job.summary.job_id, job.summary.detail));
}

void JobTable::add_to_detail(std::uint64_t job_id, const std::string& note) {
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return;
  JobRecord& job = it->second;
  job.summary.detail = text::utf8_head(job.summary.detail + "; " + note, protocol::kMessageText.max_len);
  save(job);
}

bool takes_whole_node(const JobRecord& job) {
  return protocol::is_maintenance_workload(job.summary.workload) || job.summary.recheck_of_job_id != 0;
}

JobRecord JobTable::rerun_record(const JobRecord& original, TimeMs now) const {
  JobRecord rerun;
  rerun.summary = original.summary;
  rerun.summary.job_id = next_job_id_;
  rerun.summary.state = JobState::queued;
  rerun.summary.node_id.clear();
  rerun.summary.chip_indices.clear();
  rerun.summary.attempt = 0;
  rerun.summary.exit_code = 0;
  rerun.summary.duration_ms = 0;
  rerun.summary.node_quarantined.clear();
  rerun.timeout_ms = original.timeout_ms;
  rerun.seed = original.seed;
  rerun.benchmark = original.benchmark;
  rerun.artifacts = original.artifacts;
  rerun.submitted_at_ms = now;
  return rerun;
}

Result<std::uint64_t> JobTable::submit_recheck(const JobRecord& failing, const NodeRecord& node, const Caller& caller,
                                               TimeMs now) {
  const std::string& node_id = node.summary.node_id;
  for (std::uint64_t id : active_jobs_) {
    const JobRecord& active = jobs_.at(id);
    if (active.summary.recheck_of_job_id == failing.summary.job_id && active.requested_node_id == node_id) {
      return fail(Errc::already_exists, fmt::format("job {} already reruns job {} on {}; kiln result {} --wait", id,
                                                    failing.summary.job_id, node_id, id));
    }
  }
  JobRecord recheck = rerun_record(failing, now);
  recheck.summary.recheck_of_job_id = failing.summary.job_id;
  recheck.summary.submitted_by = caller.key_name;
  recheck.summary.max_attempts = 1;
  recheck.requested_node_id = node_id;
  recheck.recheck_chips = failing.summary.chip_indices;
  recheck.summary.detail = fmt::format("reruns job {} on {} (chips {}), quarantined for its wrong outputs: correct "
                                       "outputs release the node",
                                       failing.summary.job_id, node_id, fmt::join(recheck.recheck_chips, ","));
  if (auto s = submit_to_scheduler(recheck, now); !s) return tl::unexpected(s.error());
  const std::uint64_t id = next_job_id_++;
  activate(id, recheck);
  save(jobs_[id] = std::move(recheck));
  ctx_.log(action::Severity::info, fmt::format("job {}: {}", id, jobs_.at(id).summary.detail));
  return id;
}

}  // namespace kiln::coordinator

// The job table and the agents: what they report of their jobs (started, finished, in a hello
// or a heartbeat), attempts lost with their node and failed over, reruns of CI jobs that failed
// on a node later quarantined, and how a job ends.
#include "coordinator/core/job_table.h"

#include <algorithm>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "common/exhaustive.h"
#include "common/protocol/artifacts.h"
#include "common/text/utf8.h"
#include "coordinator/core/core_rules.h"
#include "coordinator/core/job_retention.h"
#include "coordinator/core/lease_lifecycle.h"

namespace kiln::coordinator {

using namespace detail;

namespace {

// A workload under preemption notice that exits cleanly with a result saying "completed"
// (or saying nothing) finished its work; anything else let go of its chips at a checkpoint.
bool finished_its_work(const protocol::JobFinished& fin) {
  if (fin.outcome != protocol::JobOutcome::succeeded) return false;
  auto doc = nlohmann::json::parse(fin.result, nullptr, /*allow_exceptions=*/false);
  if (!doc.is_object()) return true;
  auto status = doc.find("status");
  return status == doc.end() || !status->is_string() || status->get<std::string>() != "preempted";
}

// A workload that ran to its end and found its outputs wrong exits 1 with its result document
// (docs/workloads.md, "Ending a workload"): a rank that did so ran, and its gang with it is
// judged from the ranks' documents, so it ends no one.
bool ran_and_reported(const JobRecord& job) {
  return job.summary.state == JobState::failed && job.summary.exit_code == 1 && !job.result.empty();
}

}  // namespace

void JobTable::job_started(const std::string& node_id, const protocol::JobStarted& started) {
  auto it = jobs_.find(started.job_id);
  if (it == jobs_.end()) return;
  JobRecord& job = it->second;
  if (job.summary.node_id != node_id || job.summary.attempt != started.attempt ||
      job.summary.state != JobState::assigned) {
    return;
  }
  job.summary.state = JobState::running;
  save(job);
}

JobTable::ResultOutcome JobTable::job_finished(const std::string& node_id, const protocol::JobFinished& fin,
                                               TimeMs now) {
  auto it = jobs_.find(fin.job_id);
  if (it == jobs_.end()) return {};
  JobRecord& job = it->second;
  const bool current = !protocol::is_terminal(job.summary.state) && job.summary.state != JobState::queued &&
                       job.summary.node_id == node_id && job.summary.attempt == fin.attempt;
  const auto held = attempts_.own_lease(job.summary.job_id);
  if (current && attempts_.in(job.summary.job_id, AttemptPhase::under_notice) && held && !job.cancel_requested &&
      !finished_its_work(fin)) {
    // It let go at a checkpoint under a preemption notice: the scheduler requeues it keeping
    // its age (on_requeued), and the chips go to the request that preempted it.
    job.output_tail = fin.output_tail;
    ctx_.log(action::Severity::info, fmt::format("job {} attempt {} let go of its chips after the preemption notice "
                                                 "({})",
                                                 job.summary.job_id, fin.attempt, protocol::enum_name(fin.outcome)));
    if (auto s = ctx_.scheduler().checkpoint_ack(*held, ctx_.to_scheduler_time(now)); !s) {
      ctx_.log(action::Severity::warn, fmt::format("job {}: {}", job.summary.job_id, s.error().message));
    }
    return ResultOutcome{nullptr, true};
  } else if (current) {
    job.output_tail = fin.output_tail;
    job.result = fin.result;
    job.summary.exit_code = fin.exit_code;
    job.summary.duration_ms = fin.duration_ms;
    JobState state = JobState::failed;
    switch (fin.outcome) {
      case protocol::JobOutcome::succeeded: state = JobState::succeeded; break;
      case protocol::JobOutcome::failed:
      case protocol::JobOutcome::failed_to_start: state = JobState::failed; break;
      case protocol::JobOutcome::timed_out: state = JobState::timed_out; break;
      case protocol::JobOutcome::cancelled: state = JobState::cancelled; break;
    }
    std::string detail = fin.detail;
    if (detail.empty()) {
      detail = fmt::format("{} on {} after {} ms (exit code {})", protocol::enum_name(fin.outcome), node_id,
                           fin.duration_ms, fin.exit_code);
    }
    // The agent knows it was stopped, not why.
    if (state == JobState::cancelled && !job.cancel_reason.empty()) {
      detail = text::utf8_head(fmt::format("{} ({})", job.cancel_reason, detail), protocol::kMessageText.max_len);
    }
    finish(job, state, std::move(detail), now);
    return ResultOutcome{&job, false};
  } else {
    ctx_.log(action::Severity::debug, fmt::format("ignoring a stale result for job {} attempt {} from node {}",
                                                  fin.job_id, fin.attempt, node_id));
    const auto& stopping = attempts_.earlier_stopping(fin.job_id);
    const bool stopping_attempt = stopping && stopping->attempt == fin.attempt && stopping->node_id == node_id;
    // An agent keeps an unacknowledged result while it runs a later attempt of the same job,
    // so only the end of the job's latest attempt shows the stopping one gone; an older one
    // waits for the heartbeats.
    const bool latest_attempt = fin.attempt >= job.summary.attempt;
    if (stopping_attempt || (latest_attempt && (ctx_.bridge.stop_hold_of(fin.job_id, node_id) ||
                                                (stopping_on_node_.count(node_id) != 0 &&
                                                 stopping_on_node_.at(node_id).count(fin.job_id) != 0)))) {
      old_attempt_gone(fin.job_id, node_id, now);
    }
  }
  return {};
}

JobTable::HelloOutcome JobTable::reconcile_hello(const NodeRecord& node, const protocol::Hello& hello,
                                                 protocol::Welcome& welcome, TimeMs now,
                                                 const LeaseLifecycle& leases) {
  const std::set<std::uint64_t> running(hello.running_jobs.begin(), hello.running_jobs.end());
  const std::vector<std::uint64_t> unrestorable = reconcile_reported_jobs(hello, welcome, now, leases);
  // A revoked attempt the agent no longer runs has stopped; a new attempt waiting for it
  // starts after the welcome.
  HelloOutcome outcome;
  for (const auto& [id, attempt] : attempts_.all()) {
    if (attempt.earlier_stopping && attempt.earlier_stopping->node_id == hello.node_id && !running.count(id)) {
      outcome.stopped.push_back(id);
    }
  }
  outcome.lost = fail_vanished_jobs(hello, now, leases) + unrestorable.size();
  for (std::uint64_t id : unrestorable) {
    attempt_lost(jobs_.at(id), fmt::format("its chips on {} could not be given back after a restart", hello.node_id),
                 now, leases);
  }
  hold_chips_told_to_stop(node, welcome.cancel_jobs, now);
  return outcome;
}

void JobTable::resume_on(const std::string& peer, const std::string& node_id, const std::set<std::uint64_t>& running,
                         const std::vector<std::uint64_t>& stopped, TimeMs now) {
  // A cancel decided while the node had no session (its lease ended while the coordinator was
  // down, say) reaches the agent now.
  for (std::uint64_t id : index_.on_node(node_id)) {
    const JobRecord& job = jobs_.at(id);
    if (job.cancel_requested && running.count(id) && attempts_.own_lease(id)) {
      ctx_.to_agent(peer, protocol::JobCancel{id, job.lease_id != 0 ? fmt::format("its lease L{} ended", job.lease_id)
                                                                    : std::string("cancel requested")});
    }
  }
  for (std::uint64_t id : stopped) attempt_stopped(id, now);
  start_deferred_on(node_id, now);
}

std::vector<std::uint64_t> JobTable::reconcile_reported_jobs(const protocol::Hello& hello, protocol::Welcome& welcome,
                                                             TimeMs now, const LeaseLifecycle& leases) {
  const std::set<std::uint64_t> running(hello.running_jobs.begin(), hello.running_jobs.end());
  std::set<std::uint64_t> reported = running;
  reported.insert(hello.finished_jobs.begin(), hello.finished_jobs.end());
  std::vector<std::uint64_t> unrestorable;
  for (std::uint64_t id : reported) {
    auto it = jobs_.find(id);
    const bool ours = it != jobs_.end() && !protocol::is_terminal(it->second.summary.state) &&
                      it->second.summary.state != JobState::queued && it->second.summary.node_id == hello.node_id;
    if (!ours) {
      if (running.count(id)) welcome.cancel_jobs.push_back(id);
      continue;
    }
    JobRecord& job = it->second;
    // After a coordinator restart the scheduler does not know the chips this job holds yet; a
    // job that ended meanwhile holds them until its job_finished (which follows) is stored.
    if ((job.lease_id == 0 || !leases.runs_on_lease_chips(job)) && !attempts_.own_lease(id)) {
      scheduler::Placement placement{hello.node_id, {}};
      for (std::uint32_t chip : job.summary.chip_indices) placement.chips.push_back(static_cast<int>(chip));
      auto lease = ctx_.scheduler().restore_lease(
          job_request(job), {placement}, ctx_.to_scheduler_time(job.started_at_ms), ctx_.to_scheduler_time(now));
      if (!lease) {
        ctx_.log(action::Severity::warn, fmt::format("job {} cannot keep its chips on {}: {}; it is stopped", id,
                                                     hello.node_id, lease.error().message));
        if (running.count(id)) welcome.cancel_jobs.push_back(id);
        unrestorable.push_back(id);
        continue;
      }
      attempts_.of(id).own_lease = *lease;
    }
    // A deferred start has not been sent: what runs under its id is the earlier attempt.
    if (job.summary.state == JobState::assigned && running.count(id) && !attempts_.in(id, AttemptPhase::start_deferred)) {
      job.summary.state = JobState::running;
      save(job);
    }
  }
  return unrestorable;
}

std::size_t JobTable::fail_vanished_jobs(const protocol::Hello& hello, TimeMs now, const LeaseLifecycle& leases) {
  const std::set<std::uint64_t> reported = [&] {
    std::set<std::uint64_t> ids(hello.running_jobs.begin(), hello.running_jobs.end());
    ids.insert(hello.finished_jobs.begin(), hello.finished_jobs.end());
    return ids;
  }();
  std::vector<std::uint64_t> vanished;
  for (std::uint64_t id : index_.on_node(hello.node_id)) {
    const JobRecord& job = jobs_.at(id);
    if (job.summary.state != JobState::queued && !reported.count(id) &&
        !attempts_.in(id, AttemptPhase::start_deferred)) {
      vanished.push_back(id);
    }
  }
  for (std::uint64_t id : vanished) {
    JobRecord& job = jobs_.at(id);
    // The agent may yet get a start that crossed this hello: until its heartbeats show the job
    // is not there, its chips stay held and a new attempt on this node waits (deferred start).
    const std::uint32_t attempt = job.summary.attempt;
    const bool held = hold_chips_of_stopping_job(job, now).has_value();
    attempt_lost(job, fmt::format("node {} re-registered without it (the agent restarted)", hello.node_id), now,
                 leases);
    if (held) attempts_.of(id).earlier_stopping = StoppingAttempt{hello.node_id, attempt, now};
  }
  return vanished.size();
}

void JobTable::hold_chips_told_to_stop(const NodeRecord& node, const std::vector<std::uint64_t>& cancelled,
                                       TimeMs now) {
  // What it is told to stop keeps its chips until it is gone: held where the core knows them,
  // otherwise the whole node takes no new work meanwhile.
  const std::string& node_id = node.summary.node_id;
  ctx_.bridge.node_changed(node_id);
  auto& stopping_here = stopping_on_node_[node_id];
  stopping_here.clear();
  for (std::uint64_t id : cancelled) {
    auto last = last_placement_.find(id);
    std::vector<std::uint32_t> chips;
    if (last != last_placement_.end()) {
      if (auto here = last->second.find(node_id); here != last->second.end()) chips = here->second;
    }
    if (chips.empty()) {
      // Where it runs is unknown (it predates this coordinator): hold every chip not leased.
      std::set<std::uint32_t> leased;
      for (const auto& lease : ctx_.scheduler().leases()) {
        for (const auto& p : lease.placement) {
          if (p.node == node_id) leased.insert(p.chips.begin(), p.chips.end());
        }
      }
      for (const auto& chip : node.summary.chips) {
        if (chip.healthy && !leased.count(chip.index)) chips.push_back(chip.index);
      }
    }
    hold_stopping_chips(id, node_id, chips, now);
    if (!ctx_.bridge.stop_hold_of(id, node_id)) stopping_here.emplace(id, now);
    // A job queued again meanwhile starts on this node only once this old attempt is gone.
    if (auto job = jobs_.find(id); job != jobs_.end() && job->second.summary.state == JobState::queued) {
      attempts_.of(id).earlier_stopping = StoppingAttempt{node_id, job->second.summary.attempt, now};
    }
  }
}

void JobTable::reconcile_heartbeat(const std::string& peer, const std::string& node_id, const protocol::Heartbeat& beat,
                                   TimeMs now) {
  const std::set<std::uint64_t> running(beat.running_jobs.begin(), beat.running_jobs.end());
  std::vector<std::uint64_t> gone;
  if (auto stopping_here = stopping_on_node_.find(node_id); stopping_here != stopping_on_node_.end()) {
    for (const auto& [id, since] : stopping_here->second) {
      if (!running.count(id)) gone.push_back(id);
    }
  }
  for (std::uint64_t job : ctx_.bridge.stop_held_jobs_on(node_id)) {
    if (!running.count(job)) gone.push_back(job);
  }
  for (std::uint64_t id : gone) old_attempt_gone(id, node_id, now);
  for (std::uint64_t id : running) {
    auto it = jobs_.find(id);
    const bool ours =
        it != jobs_.end() && !protocol::is_terminal(it->second.summary.state) && it->second.summary.node_id == node_id;
    if (!ours) {
      ctx_.to_agent(peer, protocol::JobCancel{id, "the coordinator no longer assigns this job to this node"});
      if (!ctx_.bridge.stop_hold_of(id, node_id) && stopping_on_node_[node_id].emplace(id, now).second) {
        ctx_.bridge.node_changed(node_id);
      }
    } else if (attempts_.in(id, AttemptPhase::start_deferred)) {
      // What runs is the attempt being stopped; the new one waits for it to go.
      ctx_.to_agent(peer, protocol::JobCancel{id, "an earlier attempt of this job must stop before the next starts"});
    }
  }
}

std::size_t JobTable::fail_over_from(const std::string& node_id, TimeMs now, const LeaseLifecycle& leases) {
  std::vector<std::uint64_t> affected;
  for (std::uint64_t id : index_.on_node(node_id)) {
    if (jobs_.at(id).summary.state != JobState::queued) affected.push_back(id);
  }
  for (std::uint64_t id : affected) {
    attempt_lost(jobs_.at(id),
                 fmt::format("node {} went silent for {} heartbeats", node_id, ctx_.knobs.liveness_missed_beats), now,
                 leases);
  }
  std::vector<std::uint64_t> stopped;
  for (const auto& [id, attempt] : attempts_.all()) {
    if (attempt.earlier_stopping && attempt.earlier_stopping->node_id == node_id) stopped.push_back(id);
  }
  for (std::uint64_t id : stopped) attempt_stopped(id, now);
  return affected.size();
}

bool JobTable::may_rerun(const JobRecord& job, const NodeRecord& node, TimeMs now) const {
  return may_be_rerun(job) && job.summary.node_id == node.summary.node_id &&
         now - job.finished_at_ms <= ctx_.knobs.quarantine_rerun_window_ms;
}

void JobTable::rerun_failures_of(const NodeRecord& node, TimeMs now) {
  std::vector<std::uint64_t> failed;
  for (const auto& [finished_at_ms, id] : rerun_candidates_) {
    if (may_rerun(jobs_.at(id), node, now)) failed.push_back(id);
  }
  std::sort(failed.begin(), failed.end());
  for (std::uint64_t id : failed) rerun(id, node, now);
}

void JobTable::rerun(std::uint64_t id, const NodeRecord& node, TimeMs now) {
  JobRecord rerun = rerun_record(jobs_.at(id), now);
  // Same revision, and the quarantined node takes no work: the rerun lands on a healthy peer.
  rerun.summary.hardware_revision = node.summary.hardware_revision;
  rerun.summary.detail = fmt::format("rerun of job {}, which failed on {}, quarantined since", id,
                                     node.summary.node_id);
  rerun.rerun_of = id;
  if (auto s = submit_to_scheduler(rerun, now); !s) {
    ctx_.log(action::Severity::warn, fmt::format("cannot rerun job {}: {}", id, s.error().message));
    return;
  }
  const std::uint64_t rerun_id = next_job_id_++;
  activate(rerun_id, rerun);
  save(jobs_[rerun_id] = std::move(rerun));
  JobRecord& first = jobs_.at(id);
  first.rerun_job_id = rerun_id;
  save(first);
  ctx_.log(action::Severity::info,
           fmt::format("job {} failed on quarantined node {}: rerun as job {} on a healthy node "
                       "of revision {}",
                       id, node.summary.node_id, rerun_id, node.summary.hardware_revision));
}

void JobTable::attempt_lost(JobRecord& job, const std::string& why, TimeMs now, const LeaseLifecycle& leases) {
  forget_request(job, now);
  const DevLease* lease = job.lease_id != 0 ? leases.find(job.lease_id) : nullptr;
  if (job.cancel_requested) {
    finish(job, JobState::cancelled, fmt::format("cancelled; attempt {} ended: {}", job.summary.attempt, why), now);
  } else if (job.lease_id != 0 && (!lease || lease->summary.state == LeaseState::ended)) {
    finish(job, JobState::cancelled,
           fmt::format("attempt {} ended: {}; its lease L{} has ended", job.summary.attempt, why, job.lease_id), now);
  } else if (job.summary.gang_size > 0) {
    // Its peers hold their rendezvous with this attempt: a new one alone would meet nobody.
    finish(job, JobState::lost,
           fmt::format("attempt {} lost: {}; a rank of a gang is not retried alone", job.summary.attempt, why), now);
  } else if (job.summary.attempt - std::min(job.summary.attempt, job.preemptions) < job.summary.max_attempts &&
             job.summary.attempt < 100) {
    job.summary.state = JobState::queued;
    job.summary.detail = fmt::format("attempt {} lost: {}; requeued", job.summary.attempt, why);
    if (!job.summary.node_id.empty()) {
      auto& placed = last_placement_[job.summary.job_id][job.summary.node_id];
      for (std::uint32_t chip : job.summary.chip_indices) {
        if (std::find(placed.begin(), placed.end(), chip) == placed.end()) placed.push_back(chip);
      }
    }
    job.summary.chip_indices.clear();
    job.summary.node_id.clear();
    if (job.lease_id == 0) {
      if (auto s = submit_to_scheduler(job, now); !s) {
        finish(job, JobState::lost, fmt::format("attempt {} lost: {}; cannot be requeued: {}", job.summary.attempt,
                                                why, s.error().message),
               now);
        return;
      }
    }
    save(job);
    ctx_.log(action::Severity::warn, fmt::format("job {}: {}", job.summary.job_id, job.summary.detail));
  } else {
    finish(job, JobState::lost,
           fmt::format("attempt {} of {} lost: {}", job.summary.attempt, job.summary.max_attempts, why), now);
  }
}

void JobTable::finish(JobRecord& job, JobState state, std::string detail, TimeMs now) {
  KILN_ASSERT(protocol::is_terminal(state), "finish() takes a terminal state");
  job.summary.state = state;
  job.summary.detail = std::move(detail);
  job.finished_at_ms = now;
  active_jobs_.erase(job.summary.job_id);
  active_maintenance_jobs_.erase(job.summary.job_id);
  forget_request(job, now);
  save(job);
  ctx_.log(state == JobState::succeeded ? action::Severity::info : action::Severity::warn,
           fmt::format("job {} {}: {}", job.summary.job_id, protocol::enum_name(state), job.summary.detail));
  // A job that fails on a node already quarantined is rerun as one that failed just before
  // the quarantine is (rerun_failures_of): the order of the two does not change the outcome.
  if (auto node = ctx_.registry.nodes().find(job.summary.node_id);
      node != ctx_.registry.nodes().end() && node->second.summary.state == NodeState::quarantined &&
      may_rerun(job, node->second, now)) {
    rerun(job.summary.job_id, node->second, now);
  }
  if (job.summary.gang_size > 0 && state != JobState::succeeded && !ran_and_reported(job)) end_gang(job, now);
}

void JobTable::end_gang(const JobRecord& ended, TimeMs now) {
  const protocol::JobSummary& s = ended.summary;
  const std::string why = text::utf8_head(
      fmt::format("rank {} of its gang (job {}) ended {}: {}", s.gang_rank, s.job_id, protocol::enum_name(s.state),
                  s.detail),
      protocol::kMessageText.max_len);
  // Every rank is marked before any ends, so the ranks ended here do not end the gang again.
  std::vector<std::uint64_t> queued;
  for (std::uint32_t rank = 0; rank < s.gang_size; ++rank) {
    const std::uint64_t id = s.gang_id + rank;
    auto it = jobs_.find(id);
    if (id == s.job_id || it == jobs_.end() || !active_jobs_.count(id) || it->second.cancel_requested) continue;
    JobRecord& peer = it->second;
    if (peer.summary.state == JobState::queued) {
      peer.cancel_requested = true;
      queued.push_back(id);
    } else {
      request_cancel(peer, why);
    }
  }
  for (std::uint64_t id : queued) finish(jobs_.at(id), JobState::cancelled, why, now);
  ctx_.log(action::Severity::warn, fmt::format("gang {}: {}; its other ranks are stopped", s.gang_id, why));
}

}  // namespace kiln::coordinator

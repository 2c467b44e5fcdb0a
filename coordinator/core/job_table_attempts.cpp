// The job table's attempts and the scheduler: an attempt started on its chips, the chips an
// attempt being stopped still holds, a job's own scheduler request, and what each of the
// scheduler's decisions about that request does to the job.
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

void JobTable::start_attempt(JobRecord& job, const std::string& node_id, std::vector<std::uint32_t> chips, TimeMs now) {
  job.summary.state = JobState::assigned;
  job.summary.node_id = node_id;
  job.summary.chip_indices = chips;
  job.summary.attempt += 1;
  job.started_at_ms = now;
  // A new attempt: what its node was is read again.
  job.summary.node_quarantined.clear();
  save(job);
  // Every chip an attempt of the job used on the node: an older attempt may still run there.
  auto& placed = last_placement_[job.summary.job_id][node_id];
  for (std::uint32_t chip : job.summary.chip_indices) {
    if (std::find(placed.begin(), placed.end(), chip) == placed.end()) placed.push_back(chip);
  }
  // Bounded: the oldest jobs' placements go first (a workload that old has long been stopped).
  constexpr std::size_t kMaxPlacementsKept = 10000;
  while (last_placement_.size() > kMaxPlacementsKept) last_placement_.erase(last_placement_.begin());
  const std::uint64_t id = job.summary.job_id;
  if (const auto& stopping = attempts_.earlier_stopping(id); stopping && stopping->node_id == node_id) {
    const std::uint32_t earlier = stopping->attempt;
    attempts_.to(id, AttemptPhase::start_deferred);
    ctx_.log(action::Severity::info,
             fmt::format("job {} attempt {} has chips [{}] on {}; it starts once attempt {} has "
                         "stopped there",
                         id, job.summary.attempt, fmt::join(chips, ","), node_id, earlier));
    return;
  }
  // An earlier attempt stopping on another node is no concern of this one's (its chips are held).
  attempts_.earlier_stopped(id);
  if (auto unheld = stopping_on_node_.find(node_id); unheld != stopping_on_node_.end() && !unheld->second.empty()) {
    // Maintenance enters a quarantined node whatever it is stopping, and where those jobs run
    // is not held: wait until they are gone.
    attempts_.to(id, AttemptPhase::start_deferred);
    ctx_.log(
        action::Severity::info,
        fmt::format("job {} attempt {} has chips [{}] on {}; it starts once the {} jobs the "
                    "node is stopping are gone",
                    job.summary.job_id, job.summary.attempt, fmt::join(chips, ","), node_id, unheld->second.size()));
    return;
  }
  attempts_.to(id, AttemptPhase::dispatched);
  send_job_start(job);
}

void JobTable::send_job_start(const JobRecord& job) {
  protocol::JobStart start;
  start.job_id = job.summary.job_id;
  start.attempt = job.summary.attempt;
  start.workload = job.summary.workload;
  start.args = job.summary.args;
  start.chip_indices = job.summary.chip_indices;
  start.timeout_ms = job.timeout_ms;
  start.seed = job.seed;
  start.benchmark = job.benchmark;
  start.rendezvous = rendezvous_of(job);
  start.artifacts = job.artifacts;
  ctx_.to_agent(*ctx_.registry.peer_of(job.summary.node_id), start);
  ctx_.log(action::Severity::info,
           fmt::format("job {} attempt {} dispatched to {} chips [{}]", job.summary.job_id, job.summary.attempt,
                       job.summary.node_id, fmt::join(start.chip_indices, ",")));
}

protocol::Rendezvous JobTable::rendezvous_of(const JobRecord& job) const {
  protocol::Rendezvous r;
  if (job.summary.gang_size == 0) return r;
  r.rank = job.summary.gang_rank;
  r.world_size = job.summary.gang_size;
  // The ranks start together, so rank 0 has its node; it stays recorded after rank 0 ends.
  const std::string& master_node = jobs_.at(job.summary.gang_id).summary.node_id;
  if (auto node = ctx_.registry.nodes().find(master_node); node != ctx_.registry.nodes().end()) {
    r.master_address = node->second.summary.rendezvous_address;
  }
  r.master_port = ctx_.knobs.rendezvous_port_first +
                  static_cast<std::uint32_t>(job.summary.gang_id % ctx_.knobs.rendezvous_port_count);
  return r;
}

scheduler::Request JobTable::stop_hold_request(std::uint64_t job_id, const std::string& node_id, std::size_t chips,
                                               TimeMs now) {
  scheduler::Request req;
  req.id = ctx_.bridge.new_stop_hold(job_id, node_id);
  req.name = describe(request_owner::StopHold{job_id, node_id});
  req.cls = scheduler::RequestClass::release;
  req.chips = static_cast<int>(lease_chips_for(static_cast<std::uint32_t>(std::max<std::size_t>(chips, 1))));
  if (req.chips > 8) {
    req.chips = 1;
    req.nodes = 1;
  }
  req.node = node_id;
  req.maintenance = true;  // never preempted, outside the quotas
  // Waited for no longer than a silent node: then the chips are given back regardless.
  req.expected_duration_ms = ctx_.knobs.job_timeout_slack_ms + ctx_.knobs.liveness_timeout_ms() + kSecondMs;
  req.lease_ms = req.expected_duration_ms;
  req.submit_ms = ctx_.to_scheduler_time(now);
  return req;
}

Status JobTable::hold_chips_of_stopping_job(const JobRecord& job, TimeMs now) {
  const std::uint64_t id = job.summary.job_id;
  const auto lease = attempts_.own_lease(id);
  if (!lease || job.summary.chip_indices.empty()) {
    return fail(Errc::not_found, fmt::format("job {} holds no chips of its own", id));
  }
  const std::string node_id = job.summary.node_id;
  scheduler::Placement placement{node_id, {}};
  for (std::uint32_t chip : job.summary.chip_indices) placement.chips.push_back(static_cast<int>(chip));
  const scheduler::Request hold = stop_hold_request(id, node_id, job.summary.chip_indices.size(), now);
  // The job's lease ends and its chips pass to the hold in one step, before anything else
  // can be placed on them.
  auto handed = ctx_.scheduler().transfer_lease(*lease, {{hold, {placement}, ctx_.to_scheduler_time(now)}},
                                                ctx_.to_scheduler_time(now));
  if (!handed) {
    ctx_.bridge.drop_stop_hold(hold.id);
    return tl::unexpected(handed.error());
  }
  attempts_.of(id).own_lease.reset();
  return {};
}

void JobTable::hold_stopping_chips(std::uint64_t job_id, const std::string& node_id,
                                   const std::vector<std::uint32_t>& chips, TimeMs now) {
  if (chips.empty() || ctx_.bridge.stop_hold_of(job_id, node_id)) return;
  scheduler::Placement placement{node_id, {}};
  for (std::uint32_t chip : chips) placement.chips.push_back(static_cast<int>(chip));
  const scheduler::Request req = stop_hold_request(job_id, node_id, chips.size(), now);
  if (auto held =
          ctx_.scheduler().restore_lease(req, {placement}, ctx_.to_scheduler_time(now), ctx_.to_scheduler_time(now));
      !held) {
    ctx_.bridge.drop_stop_hold(req.id);
    ctx_.log(action::Severity::debug, fmt::format("job {}: chips of its stopping attempt on {} not held: {}", job_id,
                                                  node_id, held.error().message));
  }
}

void JobTable::old_attempt_gone(std::uint64_t job_id, const std::string& node_id, TimeMs now) {
  if (auto request = ctx_.bridge.stop_hold_of(job_id, node_id)) ctx_.bridge.end_stop_hold(*request, now);
  auto& stopping = stopping_on_node_[node_id];
  if (stopping.erase(job_id) > 0) ctx_.bridge.node_changed(node_id);
  if (const auto& earlier = attempts_.earlier_stopping(job_id); earlier && earlier->node_id == node_id) {
    attempt_stopped(job_id, now);
  }
  start_deferred_on(node_id, now);
}

void JobTable::revoke_due(TimeMs now) {
  std::vector<std::uint64_t> due;
  for (const auto& [id, attempt] : attempts_.all()) {
    if (attempt.phase == AttemptPhase::under_notice && now >= attempt.grace_deadline_ms && attempt.own_lease) {
      due.push_back(id);
    }
  }
  for (std::uint64_t id : due) {
    JobRecord& job = jobs_.at(id);
    if (!stop_and_requeue(job, "preempted: the grace period ended",
                          fmt::format("attempt {} preempted on {}; queued again keeping its age", job.summary.attempt,
                                      job.summary.node_id),
                          now)) {
      ctx_.log(action::Severity::warn, fmt::format("job {} holds no chips of its own; the scheduler revokes it itself", id));
      attempts_.to(id, AttemptPhase::dispatched);
    }
  }
}

void JobTable::attempt_stopped(std::uint64_t job_id, TimeMs now) {
  attempts_.earlier_stopped(job_id);
  if (!attempts_.in(job_id, AttemptPhase::start_deferred)) return;
  JobRecord& job = jobs_.at(job_id);
  KILN_ASSERT(job.summary.state == JobState::assigned, "a deferred start belongs to an assigned attempt");
  // It also waits for the jobs its node is stopping without held chips (start_attempt).
  const auto unheld = stopping_on_node_.find(job.summary.node_id);
  if (unheld != stopping_on_node_.end() && !unheld->second.empty()) return;
  // Without a session the start cannot go; the node's return fails the attempt over.
  attempts_.to(job_id, AttemptPhase::dispatched);
  if (!ctx_.registry.has_session(job.summary.node_id)) return;
  job.started_at_ms = now;
  save(job);
  send_job_start(job);
}

void JobTable::start_deferred_on(const std::string& node_id, TimeMs now) {
  std::vector<std::uint64_t> ready;
  for (const auto& [id, attempt] : attempts_.all()) {
    if (attempt.phase != AttemptPhase::start_deferred) continue;
    const bool own_attempt_stopping = attempt.earlier_stopping && attempt.earlier_stopping->node_id == node_id;
    if (jobs_.at(id).summary.node_id == node_id && !own_attempt_stopping) ready.push_back(id);
  }
  for (std::uint64_t id : ready) attempt_stopped(id, now);
}

scheduler::Request JobTable::job_request(const JobRecord& job) {
  scheduler::Request req;
  req.id = ctx_.bridge.request_of(request_owner::Job{job.summary.job_id});
  req.name = describe(request_owner::Job{job.summary.job_id});
  req.cls = to_request_class(job.summary.priority_class);
  if (takes_whole_node(job)) {
    req.nodes = 1;
    req.maintenance = true;
  } else {
    req.chips = static_cast<int>(lease_chips_for(job.summary.chips));
  }
  if (!job.summary.hardware_revision.empty()) req.revision = job.summary.hardware_revision;
  if (!job.requested_node_id.empty()) req.node = job.requested_node_id;
  req.expected_duration_ms = job.timeout_ms;
  // The agent enforces the job's timeout and the core times out a silent attempt: the lease's
  // own expiry is only the backstop behind both.
  // A start deferred while an earlier attempt stops (stop_hold_request) comes on top.
  req.lease_ms = std::min<DurationMs>(static_cast<DurationMs>(job.timeout_ms) + 2 * ctx_.knobs.job_timeout_slack_ms +
                                          3 * ctx_.knobs.liveness_timeout_ms() + kSecondMs,
                                      ctx_.knobs.scheduler.max_lease_ms);
  req.submit_ms = ctx_.to_scheduler_time(job.submitted_at_ms);
  return req;
}

Status JobTable::submit_to_scheduler(const JobRecord& job, TimeMs now) {
  return ctx_.scheduler().submit(job_request(job), ctx_.to_scheduler_time(now));
}

void JobTable::forget_request(JobRecord& job, TimeMs now) {
  const std::uint64_t id = job.summary.job_id;
  attempts_.forget(id);
  // Jobs inside a developer lease have no request of their own, unless the lease ended while
  // they still ran (release_lease_chips).
  const auto request = ctx_.bridge.find_request(request_owner::Job{id});
  if (request && (ctx_.scheduler().is_pending(*request) || ctx_.scheduler().lease_of(*request))) {
    if (auto s = ctx_.scheduler().cancel(*request, ctx_.to_scheduler_time(now)); !s) {
      ctx_.log(action::Severity::warn, fmt::format("job {}: {}", id, s.error().message));
    }
  }
}

JobRecord* JobTable::job_holding(std::uint64_t job_id, scheduler::LeaseId lease) {
  if (attempts_.own_lease(job_id) != lease) return nullptr;
  auto job = jobs_.find(job_id);
  if (job == jobs_.end() || protocol::is_terminal(job->second.summary.state)) return nullptr;
  return &job->second;
}

void JobTable::granted(const scheduler::LeaseGranted& granted, std::uint64_t job_id, TimeMs now) {
  auto it = jobs_.find(job_id);
  if (it == jobs_.end() || it->second.summary.state != JobState::queued) {
    // The job ended in the same step that granted it: give the chips straight back.
    if (ctx_.scheduler().lease_of(granted.request) == granted.lease) {
      (void)ctx_.scheduler().release(granted.lease, ctx_.to_scheduler_time(now));
    }
    return;
  }
  JobRecord& job = it->second;
  const scheduler::Placement& placement = granted.placement.front();
  if (const NodeRecord* node = ctx_.registry.find(placement.node);
      node && node->summary.state == NodeState::quarantined && !takes_whole_node(job)) {
    // Decided before the node was quarantined in this same step: a quarantined node takes only
    // its diagnostics. The chips go back and the job waits again, keeping its age.
    ctx_.log(action::Severity::info, fmt::format("job {} was granted chips on {}, quarantined in the same step; "
                                                 "queued again",
                                                 job.summary.job_id, placement.node));
    (void)ctx_.scheduler().cancel(granted.request, ctx_.to_scheduler_time(now));
    if (auto s = submit_to_scheduler(job, now); !s) finish(job, JobState::failed, s.error().message, now);
    return;
  }
  if (!ctx_.registry.has_session(placement.node)) {
    // The scheduler's view of the node was stale: correct it and let the job wait again.
    ctx_.log(action::Severity::error, fmt::format("job {} was granted chips on {}, which has no agent session; "
                                                  "requeued",
                                                  job.summary.job_id, placement.node));
    ctx_.bridge.forget_node_state(placement.node);
    ctx_.bridge.set_node_state(placement.node, scheduler::NodeState::lost, "no agent session", "", now);
    (void)ctx_.scheduler().cancel(granted.request, ctx_.to_scheduler_time(now));
    if (auto s = submit_to_scheduler(job, now); !s) finish(job, JobState::failed, s.error().message, now);
    return;
  }
  std::vector<std::uint32_t> chips;
  if (!job.recheck_chips.empty()) {
    // A recheck runs where the job it reruns had its wrong outputs.
    chips = job.recheck_chips;
  } else if (protocol::is_maintenance_workload(job.summary.workload)) {
    // The whole node is leased: maintenance gets every chip, the unhealthy ones too.
    for (const auto& chip : ctx_.registry.nodes().at(placement.node).summary.chips) chips.push_back(chip.index);
  } else {
    for (int chip : placement.chips) {
      if (chips.size() < job.summary.chips) chips.push_back(static_cast<std::uint32_t>(chip));
    }
  }
  attempts_.of(job.summary.job_id).own_lease = granted.lease;
  start_attempt(job, placement.node, std::move(chips), now);
}

void JobTable::send_preempt(const JobRecord& job, TimeMs grace_ms, const std::string& reason) {
  if (auto peer = ctx_.peer_of(job.summary.node_id)) {
    ctx_.to_agent(*peer, protocol::JobPreempt{
                             job.summary.job_id, static_cast<std::uint32_t>(grace_ms),
                             fmt::format("{}; checkpoint and exit within {}", reason, human_duration(grace_ms))});
  }
}

void JobTable::warn_of_preemption_in_lease(std::uint64_t lease_id, TimeMs grace_ms, const std::string& reason) {
  for (std::uint64_t id : in_lease(lease_id)) {
    const JobRecord& job = jobs_.at(id);
    if (job.summary.state != JobState::queued) send_preempt(job, grace_ms, reason);
  }
}

void JobTable::preempt_notice(const scheduler::PreemptNotice& notice, std::uint64_t job_id, TimeMs grace_ms,
                              const std::string& reason, TimeMs now) {
  JobRecord* job = job_holding(job_id, notice.lease);
  if (!job) return;
  const std::uint64_t id = job->summary.job_id;
  if (attempts_.in(id, AttemptPhase::start_deferred)) {
    // Its start still waits for an earlier attempt to stop: nothing ran on the chips, so they go
    // at once and the job is queued again keeping its age (requeued).
    ctx_.log(action::Severity::info, fmt::format("job {} on {}: {}; its start had not been sent, its chips go at once",
                                                 id, job->summary.node_id, reason));
    if (auto s = ctx_.scheduler().checkpoint_ack(notice.lease, ctx_.to_scheduler_time(now)); !s) {
      ctx_.log(action::Severity::warn, fmt::format("job {}: {}", id, s.error().message));
    }
    return;
  }
  attempts_.to(id, AttemptPhase::under_notice);
  attempts_.of(id).grace_deadline_ms = now + grace_ms;
  job->summary.detail = fmt::format("{}; notice given, {} to checkpoint", reason, human_duration(grace_ms));
  save(*job);
  send_preempt(*job, grace_ms, reason);
  ctx_.log(action::Severity::info,
           fmt::format("job {} on {}: {}", job->summary.job_id, job->summary.node_id, job->summary.detail));
  ctx_.audit("preempted", fmt::format("job {} of {}", id, job->summary.submitted_by),
             fmt::format("{} on {}: {}", job->summary.workload, job->summary.node_id, job->summary.detail));
}

void JobTable::revoked(const scheduler::Revoke& revoke, std::uint64_t job_id) {
  JobRecord* job = job_holding(job_id, revoke.lease);
  if (!job) return;
  attempts_.to(job->summary.job_id, AttemptPhase::revoked);
  if (auto peer = ctx_.peer_of(job->summary.node_id)) {
    ctx_.to_agent(*peer, protocol::JobCancel{job->summary.job_id, "preempted: the grace period ended"});
  }
}

void JobTable::requeued(const scheduler::Requeued& requeued, std::uint64_t job_id, TimeMs now) {
  JobRecord* job = job_holding(job_id, requeued.previous_lease);
  if (!job) return;
  const std::uint64_t id = job->summary.job_id;
  // Revoked, its workload was told to stop and may still run; otherwise it let go at a
  // checkpoint (or never started).
  const bool revoked = attempts_.in(id, AttemptPhase::revoked);
  attempts_.to(id, AttemptPhase::waiting);
  if (job->summary.attempt >= 99) {
    forget_request(*job, now);
    finish(*job, JobState::lost, "preempted too many times", now);
    return;
  }
  job->preemptions += 1;
  job->summary.state = JobState::queued;
  job->summary.detail = fmt::format("attempt {} preempted on {}; queued again keeping its age",
                                    job->summary.attempt, job->summary.node_id);
  if (revoked) attempts_.of(id).earlier_stopping = StoppingAttempt{job->summary.node_id, job->summary.attempt, now};
  job->summary.node_id.clear();
  job->summary.chip_indices.clear();
  save(*job);
  ctx_.log(action::Severity::info, fmt::format("job {}: {}", job->summary.job_id, job->summary.detail));
}

void JobTable::lease_lost(const scheduler::LeaseLost& lost, std::uint64_t job_id, TimeMs now,
                          const LeaseLifecycle& leases) {
  JobRecord* job = job_holding(job_id, lost.lease);
  if (!job) return;  // fail_over_from already failed it over
  attempt_lost(*job, fmt::format("node {} was lost", lost.node), now, leases);
}

void JobTable::lease_expired(const scheduler::LeaseExpired& expired, std::uint64_t job_id, TimeMs now) {
  JobRecord* job = job_holding(job_id, expired.lease);
  if (!job) return;
  // A backstop: the job's own timeout normally ends it first. Its chips are already free.
  attempts_.of(job->summary.job_id).own_lease.reset();
  if (auto peer = ctx_.peer_of(job->summary.node_id)) {
    ctx_.to_agent(*peer, protocol::JobCancel{job->summary.job_id, "its lease expired"});
  }
  finish(*job, JobState::timed_out, fmt::format("its lease on {} expired", job->summary.node_id), now);
}

}  // namespace kiln::coordinator

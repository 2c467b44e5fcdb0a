// What the core asks of the scheduler (requests, node states and inventories, through the
// scheduler bridge) and what it does with the scheduler's decisions about jobs and developer
// leases.
#include "coordinator/core/coordinator_core.h"

#include <algorithm>

#include <fmt/format.h>

#include "common/exhaustive.h"
#include "common/text/utf8.h"
#include "coordinator/core/core_rules.h"

namespace kiln::coordinator {

using namespace detail;

protocol::QueueExplanation CoordinatorCore::explain(const protocol::QueueWhy& why, TimeMs now) const {
  protocol::QueueExplanation out;
  auto from_scheduler = [&](std::optional<scheduler::RequestId> request, const std::string& prefix) {
    KILN_ASSERT(request.has_value(), "a pending job or lease has a request in the scheduler");
    auto e = bridge_.scheduler().explain(*request, to_scheduler_time(now));
    out.pending = e.pending;
    out.reasons = e.reasons;
    if (e.expected_start_ms) {
      out.expected_start_ms = static_cast<std::uint64_t>(std::max<TimeMs>(0, to_wall_time(*e.expected_start_ms)));
    }
    out.text = prefix + explanation_text(e, now);
  };
  if (why.lease_id != 0) {
    const DevLease& lease = dev_leases_.all().at(why.lease_id);
    out.state = std::string(protocol::enum_name(lease.summary.state));
    if (lease.summary.state == LeaseState::pending) {
      from_scheduler(bridge_.find_request(request_owner::DevLease{why.lease_id}), fmt::format("lease L{} is pending: ", why.lease_id));
    } else if (lease.summary.state == LeaseState::ended) {
      out.text = fmt::format("lease L{} is not pending: it ended ({})", why.lease_id, lease.summary.detail);
    } else {
      std::vector<std::string> where;
      for (const auto& p : lease.summary.placement) {
        where.push_back(fmt::format("{} chips [{}]", p.node_id, fmt::join(p.chip_indices, ",")));
      }
      out.text = fmt::format("lease L{} is not pending: it is {} on {}", why.lease_id, out.state,
                             fmt::join(where, " and "));
    }
  } else {
    const JobRecord& job = jobs_.at(why.job_id);
    const auto& s = job.summary;
    out.state = std::string(protocol::enum_name(s.state));
    if (protocol::is_terminal(s.state)) {
      out.text = fmt::format("job {} is not pending: it ended {} ({})", s.job_id, out.state, s.detail);
    } else if (s.state != JobState::queued) {
      out.text = fmt::format("job {} is not pending: it is {} on {} chips [{}] (attempt {})", s.job_id, out.state,
                             s.node_id, fmt::join(s.chip_indices, ","), s.attempt);
    } else if (job.lease_id != 0) {
      auto lease = dev_leases_.all().find(job.lease_id);
      if (lease != dev_leases_.all().end() && lease->second.summary.state == LeaseState::pending) {
        from_scheduler(bridge_.find_request(request_owner::DevLease{job.lease_id}),
                       fmt::format("job {} waits for its lease L{}, which is pending: ", s.job_id, job.lease_id));
        out.pending = true;
      } else {
        out.pending = true;
        out.reasons.push_back(fmt::format("it runs inside lease L{} and waits for {} of its chips to be free of "
                                          "other jobs in the lease",
                                          job.lease_id, s.chips));
        out.text = fmt::format("job {} is pending: {}", s.job_id, out.reasons.back());
      }
    } else {
      from_scheduler(bridge_.find_request(request_owner::Job{s.job_id}), fmt::format("job {} is pending: ", s.job_id));
    }
  }
  out.text = text::utf8_head(out.text, protocol::kMessageText.max_len);
  for (auto& r : out.reasons) r = text::utf8_head(r, protocol::kMessageText.max_len);
  if (out.reasons.size() > 64) out.reasons.resize(64);
  return out;
}

std::string CoordinatorCore::explanation_text(const scheduler::Explanation& e, TimeMs now) const {
  std::string out = fmt::format("{}", fmt::join(e.reasons, "; "));
  if (!e.pending) return out.empty() ? "not pending" : out;
  if (!out.empty()) out += "; ";
  if (e.expected_start_ms) {
    const TimeMs at = to_wall_time(*e.expected_start_ms);
    out += at <= now ? "expected to start now"
                     : fmt::format("expected to start in {} (at {})", human_duration(at - now), clock_text(at));
  } else {
    out += "no expected start: no eligible capacity in sight";
  }
  return out;
}

scheduler::Request CoordinatorCore::job_request(const JobRecord& job) {
  scheduler::Request req;
  req.id = bridge_.request_of(request_owner::Job{job.summary.job_id});
  req.name = describe(request_owner::Job{job.summary.job_id});
  req.cls = to_request_class(job.summary.priority_class);
  if (protocol::is_maintenance_workload(job.summary.workload)) {
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
  req.lease_ms = std::min<DurationMs>(static_cast<DurationMs>(job.timeout_ms) + 2 * knobs_.job_timeout_slack_ms +
                                          3 * knobs_.liveness_timeout_ms() + kSecondMs,
                                      knobs_.scheduler.max_lease_ms);
  req.submit_ms = to_scheduler_time(job.submitted_at_ms);
  return req;
}

Status CoordinatorCore::submit_to_scheduler(const JobRecord& job, TimeMs now) {
  return bridge_.scheduler().submit(job_request(job), to_scheduler_time(now));
}

void CoordinatorCore::forget_request(JobRecord& job, TimeMs now) {
  const std::uint64_t id = job.summary.job_id;
  attempts_.forget(id);
  // Jobs inside a developer lease have no request of their own, unless the lease ended while
  // they still ran (release_lease_chips).
  const auto request = bridge_.find_request(request_owner::Job{id});
  if (request && (bridge_.scheduler().is_pending(*request) || bridge_.scheduler().lease_of(*request))) {
    if (auto s = bridge_.scheduler().cancel(*request, to_scheduler_time(now)); !s) {
      log(action::Severity::warn, fmt::format("job {}: {}", id, s.error().message));
    }
  }
}

scheduler::NodeInfo CoordinatorCore::scheduler_node_info(const NodeRecord& node) const {
  scheduler::NodeInfo info;
  info.id = node.summary.node_id;
  info.revision = node.summary.hardware_revision;
  for (const auto& chip : node.summary.chips) {
    // Unhealthy chips are not leased; maintenance still gets the whole node (on_granted).
    if (!chip.healthy) continue;
    info.chips.push_back(scheduler::ChipInfo{static_cast<int>(chip.index), static_cast<int>(chip.numa_node),
                                             static_cast<int>(chip.numa_node)});
  }
  return info;
}

void CoordinatorCore::sync_node_states(TimeMs now) {
  set_scheduler_node_states(now);
  // The nodes waiting to have the chips of their latest hello taken: draining meanwhile, so
  // the upsert (which schedules at once) places nothing on them before their state is known.
  std::vector<std::string> waiting;
  for (const auto& id : bridge_.nodes_with_inventory_pending()) {
    if (registry_.has_session(id)) waiting.push_back(id);
  }
  if (waiting.empty()) return;
  for (const auto& id : waiting) upsert_scheduler_node(registry_.nodes().at(id), now);
  set_scheduler_node_states(now);
}

void CoordinatorCore::set_scheduler_node_states(TimeMs now) {
  std::map<std::string, std::uint64_t> maintenance_waiting;
  for (std::uint64_t id : active_jobs_) {
    const JobRecord& job = jobs_.at(id);
    if (protocol::is_maintenance_workload(job.summary.workload) && job.summary.state == JobState::queued) {
      maintenance_waiting.emplace(job.requested_node_id, id);
    }
  }
  for (const auto& [id, node] : registry_.nodes()) {
    const auto& s = node.summary;
    if (s.state == NodeState::lost || !registry_.has_session(id)) {
      bridge_.set_node_state(id, scheduler::NodeState::lost, "no agent session", "", now);
    } else if (s.state == NodeState::quarantined) {
      bridge_.set_node_state(id, scheduler::NodeState::quarantined, s.quarantine_reason, s.quarantine_owner, now);
    } else if (node.draining) {
      bridge_.set_node_state(id, scheduler::NodeState::draining, node.drain_reason, "", now);
    } else if (const std::string* pending = bridge_.inventory_pending(id)) {
      bridge_.set_node_state(id, scheduler::NodeState::draining, pending->empty() ? "registering its chips" : *pending,
                             "", now);
    } else if (auto st = stopping_on_node_.find(id); st != stopping_on_node_.end() && !st->second.empty()) {
      bridge_.set_node_state(id, scheduler::NodeState::draining,
                               fmt::format("stopping {} jobs it no longer runs for the coordinator", st->second.size()),
                               "", now);
    } else if (auto m = maintenance_waiting.find(id); m != maintenance_waiting.end()) {
      // Maintenance takes the whole node: it drains first and takes no new regular work.
      bridge_.set_node_state(id, scheduler::NodeState::draining,
                               fmt::format("draining for maintenance job {}", m->second), "", now);
    } else {
      bridge_.set_node_state(id, scheduler::NodeState::up, "", "", now);
    }
  }
}

DevLease* CoordinatorCore::lease_holding(const RequestOwner& owner,
                                                          std::optional<scheduler::LeaseId> lease) {
  const auto* of_lease = std::get_if<request_owner::DevLease>(&owner);
  if (!of_lease) return nullptr;
  DevLease* dev = dev_leases_.find(of_lease->lease_id);
  if (!dev || dev->scheduler_lease != lease) return nullptr;
  return dev;
}

JobRecord* CoordinatorCore::job_holding(const RequestOwner& owner, scheduler::LeaseId lease) {
  const auto* of_job = std::get_if<request_owner::Job>(&owner);
  if (!of_job || attempts_.own_lease(of_job->job_id) != lease) return nullptr;
  auto job = jobs_.find(of_job->job_id);
  if (job == jobs_.end() || protocol::is_terminal(job->second.summary.state)) return nullptr;
  return &job->second;
}

void CoordinatorCore::pump_scheduler(TimeMs now) {
  // Handlers may call the scheduler again; what that decides is carried out in the same loop.
  // The nodes' states are brought up to date before each decision is carried out.
  while (true) {
    sync_node_states(now);
    auto decision = bridge_.poll_decision();
    if (!decision) break;
    const RequestOwner& owner = decision->owner;
    std::visit(Exhaustive{
                   [&](const scheduler::LeaseGranted& act) { on_granted(act, owner, now); },
                   [&](const scheduler::PreemptNotice& act) { on_preempt_notice(act, owner, now); },
                   [&](const scheduler::Revoke& act) { on_revoke(act, owner, now); },
                   [&](const scheduler::Requeued& act) { on_requeued(act, owner, now); },
                   [&](const scheduler::LeaseLost& act) { on_lease_lost(act, owner, now); },
                   [&](const scheduler::LeaseExpired& act) { on_lease_expired(act, owner, now); },
               },
               decision->action);
  }
  dispatch_lease_jobs(now);
  refresh_chip_counts();
}

void CoordinatorCore::on_granted(const scheduler::LeaseGranted& granted, const RequestOwner& owner, TimeMs now) {
  KILN_ASSERT(!granted.placement.empty(), "a granted lease has chips");
  // Withdrawn in the same step that granted it (a revoked job waiting for its old attempt).
  if (bridge_.scheduler().lease_of(granted.request) != granted.lease) return;
  if (const auto* of_lease = std::get_if<request_owner::DevLease>(&owner)) {
    DevLease* lease = dev_leases_.find(of_lease->lease_id);
    if (!lease || lease->summary.state != LeaseState::pending) {
      // Released in the same step that granted it: give the chips straight back.
      if (bridge_.scheduler().lease_of(granted.request) == granted.lease) {
        (void)bridge_.scheduler().release(granted.lease, to_scheduler_time(now));
      }
      return;
    }
    lease->scheduler_lease = granted.lease;
    lease->summary.state = LeaseState::granted;
    lease->summary.granted_at_ms = static_cast<std::uint64_t>(std::max<TimeMs>(0, now));
    lease->summary.expires_at_ms = static_cast<std::uint64_t>(std::max<TimeMs>(0, to_wall_time(granted.expires_at_ms)));
    lease->summary.grace_deadline_ms = 0;
    lease->summary.placement.clear();
    std::vector<std::string> where;
    for (const auto& p : granted.placement) {
      protocol::LeasePlacement placement{p.node, {}};
      for (int chip : p.chips) placement.chip_indices.push_back(static_cast<std::uint32_t>(chip));
      where.push_back(fmt::format("{} chips [{}]", p.node, fmt::join(p.chips, ",")));
      lease->summary.placement.push_back(std::move(placement));
    }
    lease_event(*lease, LeaseEventKind::granted,
                fmt::format("granted {} until {}{}", fmt::join(where, " and "),
                            clock_text(static_cast<TimeMs>(lease->summary.expires_at_ms)),
                            granted.borrowed ? " (on borrowed capacity: reclaimed first)" : ""),
                now);
    return;
  }
  auto it = jobs_.find(std::get<request_owner::Job>(owner).job_id);
  if (it == jobs_.end() || it->second.summary.state != JobState::queued) {
    // The job ended in the same step that granted it: give the chips straight back.
    if (bridge_.scheduler().lease_of(granted.request) == granted.lease) {
      (void)bridge_.scheduler().release(granted.lease, to_scheduler_time(now));
    }
    return;
  }
  JobRecord& job = it->second;
  const scheduler::Placement& placement = granted.placement.front();
  if (!registry_.has_session(placement.node)) {
    // The scheduler's view of the node was stale: correct it and let the job wait again.
    log(action::Severity::error, fmt::format("job {} was granted chips on {}, which has no agent session; "
                                             "requeued",
                                             job.summary.job_id, placement.node));
    bridge_.forget_node_state(placement.node);
    bridge_.set_node_state(placement.node, scheduler::NodeState::lost, "no agent session", "", now);
    (void)bridge_.scheduler().cancel(granted.request, to_scheduler_time(now));
    if (auto s = submit_to_scheduler(job, now); !s) finish(job, JobState::failed, s.error().message, now);
    return;
  }
  std::vector<std::uint32_t> chips;
  if (protocol::is_maintenance_workload(job.summary.workload)) {
    // The whole node is leased: maintenance gets every chip, the unhealthy ones too.
    for (const auto& chip : registry_.nodes().at(placement.node).summary.chips) chips.push_back(chip.index);
  } else {
    for (int chip : placement.chips) {
      if (chips.size() < job.summary.chips) chips.push_back(static_cast<std::uint32_t>(chip));
    }
  }
  attempts_.of(job.summary.job_id).own_lease = granted.lease;
  start_attempt(job, placement.node, std::move(chips), now);
}

std::string CoordinatorCore::preempted_for_text(scheduler::RequestId demand) const {
  const auto owner = bridge_.owner_of(demand);
  if (!owner) return "preempted for other work";
  if (const auto* of_job = std::get_if<request_owner::Job>(&*owner); of_job && jobs_.count(of_job->job_id)) {
    return fmt::format("preempted for job {} ({})", of_job->job_id,
                       protocol::enum_name(jobs_.at(of_job->job_id).summary.priority_class));
  }
  return "preempted for " + describe(*owner);
}

void CoordinatorCore::on_preempt_notice(const scheduler::PreemptNotice& notice, const RequestOwner& owner,
                                        TimeMs now) {
  const TimeMs grace_ms = std::clamp<TimeMs>(to_wall_time(notice.grace_deadline_ms) - now, 0, 24 * kHourMs);
  const std::string reason = preempted_for_text(notice.preempted_for);
  auto notify = [&](JobRecord& job) {
    if (auto peer = peer_of(job.summary.node_id)) {
      to_agent(*peer, protocol::JobPreempt{job.summary.job_id, static_cast<std::uint32_t>(grace_ms),
                                           fmt::format("{}; checkpoint and exit within {}", reason,
                                                       human_duration(grace_ms))});
    }
  };
  if (std::holds_alternative<request_owner::DevLease>(owner)) {
    DevLease* lease = lease_holding(owner, notice.lease);
    if (!lease) return;
    const auto deadline = static_cast<std::uint64_t>(std::max<TimeMs>(0, now + grace_ms));
    // A notice given before a coordinator restart still holds: the earlier deadline stands.
    const bool noticed = lease->summary.state == LeaseState::preempting && lease->summary.grace_deadline_ms > 0;
    lease->summary.grace_deadline_ms = noticed ? std::min(lease->summary.grace_deadline_ms, deadline) : deadline;
    lease->summary.state = LeaseState::preempting;
    for (std::uint64_t id : jobs_in_lease(lease->summary.lease_id)) {
      JobRecord& job = jobs_.at(id);
      if (job.summary.state != JobState::queued) notify(job);
    }
    lease_event(*lease, LeaseEventKind::preempt_notice,
                fmt::format("{}: release the lease in {} (at {}); it is then revoked and queued again keeping "
                            "its age",
                            reason, human_duration(grace_ms), clock_text(now + grace_ms, grace_ms < kHourMs)),
                now);
    return;
  }
  JobRecord* job = job_holding(owner, notice.lease);
  if (!job) return;
  const std::uint64_t id = job->summary.job_id;
  if (attempts_.in(id, AttemptPhase::start_deferred)) {
    // Its start still waits for an earlier attempt to stop: nothing ran on the chips, so they go
    // at once and the job is queued again keeping its age (on_requeued).
    log(action::Severity::info, fmt::format("job {} on {}: {}; its start had not been sent, its chips go at once", id,
                                            job->summary.node_id, reason));
    if (auto s = bridge_.scheduler().checkpoint_ack(notice.lease, to_scheduler_time(now)); !s) {
      log(action::Severity::warn, fmt::format("job {}: {}", id, s.error().message));
    }
    return;
  }
  attempts_.to(id, AttemptPhase::under_notice);
  attempts_.of(id).grace_deadline_ms = now + grace_ms;
  job->summary.detail = fmt::format("{}; notice given, {} to checkpoint", reason, human_duration(grace_ms));
  save(*job);
  notify(*job);
  log(action::Severity::info, fmt::format("job {} on {}: {}", job->summary.job_id, job->summary.node_id,
                                          job->summary.detail));
}

void CoordinatorCore::on_revoke(const scheduler::Revoke& revoke, const RequestOwner& owner, TimeMs now) {
  if (std::holds_alternative<request_owner::DevLease>(owner)) {
    DevLease* lease = lease_holding(owner, revoke.lease);
    if (!lease) return;
    for (std::uint64_t id : jobs_in_lease(lease->summary.lease_id)) {
      JobRecord& job = jobs_.at(id);
      if (job.summary.state == JobState::queued || job.cancel_requested) continue;
      job.cancel_requested = true;
      save(job);
      if (auto peer = peer_of(job.summary.node_id)) {
        to_agent(*peer, protocol::JobCancel{id, fmt::format("lease L{} revoked: its preemption grace ended",
                                                            lease->summary.lease_id)});
      }
    }
    return;
  }
  JobRecord* job = job_holding(owner, revoke.lease);
  if (!job) return;
  attempts_.to(job->summary.job_id, AttemptPhase::revoked);
  if (auto peer = peer_of(job->summary.node_id)) {
    to_agent(*peer, protocol::JobCancel{job->summary.job_id, "preempted: the grace period ended"});
  }
  (void)now;
}

void CoordinatorCore::on_requeued(const scheduler::Requeued& requeued, const RequestOwner& owner, TimeMs now) {
  if (std::holds_alternative<request_owner::DevLease>(owner)) {
    DevLease* lease = lease_holding(owner, requeued.previous_lease);
    if (!lease) return;
    lease->scheduler_lease.reset();
    lease->summary.state = LeaseState::pending;
    lease->summary.placement.clear();
    lease->summary.grace_deadline_ms = 0;
    lease->summary.expires_at_ms = 0;
    lease_event(*lease, LeaseEventKind::requeued, "preempted; queued again keeping its age", now);
    return;
  }
  JobRecord* job = job_holding(owner, requeued.previous_lease);
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
  log(action::Severity::info, fmt::format("job {}: {}", job->summary.job_id, job->summary.detail));
}

void CoordinatorCore::on_lease_lost(const scheduler::LeaseLost& lost, const RequestOwner& owner, TimeMs now) {
  if (std::holds_alternative<request_owner::DevLease>(owner)) {
    DevLease* lease = lease_holding(owner, lost.lease);
    if (!lease) return;
    lease_node_lost(*lease, lost.node, now);
    return;
  }
  JobRecord* job = job_holding(owner, lost.lease);
  if (!job) return;  // mark_node_lost already failed it over
  attempt_lost(*job, fmt::format("node {} was lost", lost.node), now);
}

void CoordinatorCore::on_lease_expired(const scheduler::LeaseExpired& expired, const RequestOwner& owner,
                                       TimeMs now) {
  if (std::holds_alternative<request_owner::DevLease>(owner)) {
    DevLease* lease = lease_holding(owner, expired.lease);
    if (!lease) return;
    end_lease(*lease, "expired", now);
    return;
  }
  JobRecord* job = job_holding(owner, expired.lease);
  if (!job) return;
  // A backstop: the job's own timeout normally ends it first. Its chips are already free.
  attempts_.of(job->summary.job_id).own_lease.reset();
  if (auto peer = peer_of(job->summary.node_id)) {
    to_agent(*peer, protocol::JobCancel{job->summary.job_id, "its lease expired"});
  }
  finish(*job, JobState::timed_out, fmt::format("its lease on {} expired", job->summary.node_id), now);
}

}  // namespace kiln::coordinator

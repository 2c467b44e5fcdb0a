// The scheduler bridge: what the core asks of the scheduler core (requests, node states and
// inventories) and what it does with the scheduler's decisions.
#include "coordinator/core/coordinator_core.h"

#include <algorithm>

#include <fmt/format.h>

#include "common/text/utf8.h"
#include "coordinator/core/core_rules.h"

namespace kiln::coordinator {

using namespace detail;

protocol::QueueExplanation CoordinatorCore::explain(const protocol::QueueWhy& why, TimeMs now) const {
  protocol::QueueExplanation out;
  auto from_scheduler = [&](scheduler::RequestId request, const std::string& prefix) {
    auto e = scheduler_.explain(request, to_scheduler_time(now));
    out.pending = e.pending;
    out.reasons = e.reasons;
    if (e.expected_start_ms) {
      out.expected_start_ms = static_cast<std::uint64_t>(std::max<TimeMs>(0, to_wall_time(*e.expected_start_ms)));
    }
    out.text = prefix + explanation_text(e, now);
  };
  if (why.lease_id != 0) {
    const DevLease& lease = leases_.at(why.lease_id);
    out.state = std::string(protocol::enum_name(lease.summary.state));
    if (lease.summary.state == LeaseState::pending) {
      from_scheduler(kLeaseRequestBase + why.lease_id, fmt::format("lease L{} is pending: ", why.lease_id));
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
      auto lease = leases_.find(job.lease_id);
      if (lease != leases_.end() && lease->second.summary.state == LeaseState::pending) {
        from_scheduler(kLeaseRequestBase + job.lease_id,
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
      from_scheduler(s.job_id, fmt::format("job {} is pending: ", s.job_id));
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

scheduler::Request CoordinatorCore::job_request(const JobRecord& job) const {
  scheduler::Request req;
  req.id = job.summary.job_id;
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
  return scheduler_.submit(job_request(job), to_scheduler_time(now));
}

void CoordinatorCore::forget_request(JobRecord& job, TimeMs now) {
  const std::uint64_t id = job.summary.job_id;
  attempts_.forget(id);
  // Jobs inside a developer lease have no request of their own, unless the lease ended while
  // they still ran (release_lease_chips).
  if (scheduler_.is_pending(id) || scheduler_.lease_of(id)) {
    if (auto s = scheduler_.cancel(id, to_scheduler_time(now)); !s) {
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

bool CoordinatorCore::scheduler_knows_other_chips(const scheduler::NodeInfo& info) const {
  for (const auto& known : scheduler_.nodes()) {
    if (known.info.id != info.id) continue;
    if (known.info.chips.size() != info.chips.size() || known.info.revision != info.revision) return true;
    for (std::size_t i = 0; i < info.chips.size(); ++i) {
      if (known.info.chips[i].index != info.chips[i].index) return true;
    }
    return false;
  }
  return true;
}

bool CoordinatorCore::node_holds_leases(const std::string& node_id) const {
  for (const auto& lease : scheduler_.leases()) {
    for (const auto& p : lease.placement) {
      if (p.node == node_id) return true;
    }
  }
  return false;
}

void CoordinatorCore::upsert_scheduler_node(const NodeRecord& node, TimeMs now) {
  const std::string& node_id = node.summary.node_id;
  const scheduler::NodeInfo info = scheduler_node_info(node);
  // Only the chips of the latest hello are dispatched: until the scheduler has taken them the
  // node takes no new work (sync_node_states), and the upsert is tried again at every sync.
  // The scheduler keeps a node's leases by chip position, so a busy node keeps its chip list.
  std::string refused;
  if (info.chips.empty()) {
    refused = "it reports no healthy chips";
  } else if (node_holds_leases(node_id) && scheduler_knows_other_chips(info)) {
    refused = "its chips changed while leases hold some of them; it takes work once they have ended";
  } else if (auto s = scheduler_.upsert_node(info, to_scheduler_time(now)); !s) {
    refused = s.error().message;
  }
  auto pending = inventory_pending_.find(node_id);
  if (refused.empty()) {
    if (pending != inventory_pending_.end()) {
      if (!pending->second.empty()) {
        log(action::Severity::info,
            fmt::format("node {}: the {} chips of its latest hello are scheduled", node_id, info.chips.size()));
      }
      inventory_pending_.erase(pending);
    }
    return;
  }
  if (pending == inventory_pending_.end() || pending->second != refused) {
    log(action::Severity::warn, fmt::format("node {} takes no new work: {}", node_id, refused));
    inventory_pending_[node_id] = refused;
  }
}

void CoordinatorCore::set_scheduler_node_state(const std::string& node_id, scheduler::NodeState state,
                                               std::string reason, std::string owner, TimeMs now) {
  auto known = scheduler_node_state_.find(node_id);
  if (known != scheduler_node_state_.end() && known->second == state) return;
  if (auto s = scheduler_.set_node_state(node_id, state, std::move(reason), std::move(owner), to_scheduler_time(now));
      !s) {
    return;  // not in the scheduler (no healthy chips): nothing to tell it
  }
  scheduler_node_state_[node_id] = state;
}

void CoordinatorCore::sync_node_states(TimeMs now) {
  set_scheduler_node_states(now);
  // The nodes waiting to have the chips of their latest hello taken: draining meanwhile, so
  // the upsert (which schedules at once) places nothing on them before their state is known.
  std::vector<std::string> waiting;
  for (const auto& [id, why] : inventory_pending_) {
    if (node_has_session(id)) waiting.push_back(id);
  }
  if (waiting.empty()) return;
  for (const auto& id : waiting) upsert_scheduler_node(nodes_.at(id), now);
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
  for (const auto& [id, node] : nodes_) {
    const auto& s = node.summary;
    if (s.state == NodeState::lost || !node_has_session(id)) {
      set_scheduler_node_state(id, scheduler::NodeState::lost, "no agent session", "", now);
    } else if (s.state == NodeState::quarantined) {
      set_scheduler_node_state(id, scheduler::NodeState::quarantined, s.quarantine_reason, s.quarantine_owner, now);
    } else if (node.draining) {
      set_scheduler_node_state(id, scheduler::NodeState::draining, node.drain_reason, "", now);
    } else if (auto pending = inventory_pending_.find(id); pending != inventory_pending_.end()) {
      set_scheduler_node_state(id, scheduler::NodeState::draining,
                               pending->second.empty() ? "registering its chips" : pending->second, "", now);
    } else if (auto st = stopping_on_node_.find(id); st != stopping_on_node_.end() && !st->second.empty()) {
      set_scheduler_node_state(id, scheduler::NodeState::draining,
                               fmt::format("stopping {} jobs it no longer runs for the coordinator", st->second.size()),
                               "", now);
    } else if (auto m = maintenance_waiting.find(id); m != maintenance_waiting.end()) {
      // Maintenance takes the whole node: it drains first and takes no new regular work.
      set_scheduler_node_state(id, scheduler::NodeState::draining,
                               fmt::format("draining for maintenance job {}", m->second), "", now);
    } else {
      set_scheduler_node_state(id, scheduler::NodeState::up, "", "", now);
    }
  }
}

JobRecord* CoordinatorCore::job_holding(scheduler::RequestId request, scheduler::LeaseId lease) {
  if (attempts_.own_lease(request) != lease) return nullptr;
  auto job = jobs_.find(request);
  if (job == jobs_.end() || protocol::is_terminal(job->second.summary.state)) return nullptr;
  return &job->second;
}

void CoordinatorCore::pump_scheduler(TimeMs now) {
  // Handlers may call the scheduler again; what that decides is carried out in the same loop.
  // The nodes' states are brought up to date before each decision is carried out.
  while (true) {
    sync_node_states(now);
    auto a = scheduler_.poll_action();
    if (!a) break;
    // Holds of stopping attempts are the core's own bookkeeping: nothing to carry out.
    const scheduler::RequestId request = std::visit([](const auto& act) { return act.request; }, *a);
    if (is_hold_request(request)) {
      if (!std::holds_alternative<scheduler::LeaseGranted>(*a) && !std::holds_alternative<scheduler::PreemptNotice>(*a)) {
        stop_holds_.erase(request);
      }
      continue;
    }
    std::visit(
        [&](const auto& act) {
          using T = std::decay_t<decltype(act)>;
          if constexpr (std::is_same_v<T, scheduler::LeaseGranted>) {
            on_granted(act, now);
          } else if constexpr (std::is_same_v<T, scheduler::PreemptNotice>) {
            on_preempt_notice(act, now);
          } else if constexpr (std::is_same_v<T, scheduler::Revoke>) {
            on_revoke(act, now);
          } else if constexpr (std::is_same_v<T, scheduler::Requeued>) {
            on_requeued(act, now);
          } else if constexpr (std::is_same_v<T, scheduler::LeaseLost>) {
            on_lease_lost(act, now);
          } else if constexpr (std::is_same_v<T, scheduler::LeaseExpired>) {
            on_lease_expired(act, now);
          }
        },
        *a);
  }
  dispatch_lease_jobs(now);
  refresh_chip_counts();
}

void CoordinatorCore::on_granted(const scheduler::LeaseGranted& granted, TimeMs now) {
  KILN_ASSERT(!granted.placement.empty(), "a granted lease has chips");
  // Withdrawn in the same step that granted it (a revoked job waiting for its old attempt).
  if (scheduler_.lease_of(granted.request) != granted.lease) return;
  if (is_lease_request(granted.request)) {
    DevLease* lease = find_lease(granted.request - kLeaseRequestBase);
    if (!lease || lease->summary.state != LeaseState::pending) {
      // Released in the same step that granted it: give the chips straight back.
      if (scheduler_.lease_of(granted.request) == granted.lease) {
        (void)scheduler_.release(granted.lease, to_scheduler_time(now));
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
  auto it = jobs_.find(granted.request);
  if (it == jobs_.end() || it->second.summary.state != JobState::queued) {
    // The job ended in the same step that granted it: give the chips straight back.
    if (scheduler_.lease_of(granted.request) == granted.lease) {
      (void)scheduler_.release(granted.lease, to_scheduler_time(now));
    }
    return;
  }
  JobRecord& job = it->second;
  const scheduler::Placement& placement = granted.placement.front();
  if (!node_has_session(placement.node)) {
    // The scheduler's view of the node was stale: correct it and let the job wait again.
    log(action::Severity::error, fmt::format("job {} was granted chips on {}, which has no agent session; "
                                             "requeued",
                                             job.summary.job_id, placement.node));
    scheduler_node_state_.erase(placement.node);
    set_scheduler_node_state(placement.node, scheduler::NodeState::lost, "no agent session", "", now);
    (void)scheduler_.cancel(granted.request, to_scheduler_time(now));
    if (auto s = submit_to_scheduler(job, now); !s) finish(job, JobState::failed, s.error().message, now);
    return;
  }
  std::vector<std::uint32_t> chips;
  if (protocol::is_maintenance_workload(job.summary.workload)) {
    // The whole node is leased: maintenance gets every chip, the unhealthy ones too.
    for (const auto& chip : nodes_.at(placement.node).summary.chips) chips.push_back(chip.index);
  } else {
    for (int chip : placement.chips) {
      if (chips.size() < job.summary.chips) chips.push_back(static_cast<std::uint32_t>(chip));
    }
  }
  attempts_.of(job.summary.job_id).own_lease = granted.lease;
  start_attempt(job, placement.node, std::move(chips), now);
}

void CoordinatorCore::on_preempt_notice(const scheduler::PreemptNotice& notice, TimeMs now) {
  const TimeMs grace_ms = std::clamp<TimeMs>(to_wall_time(notice.grace_deadline_ms) - now, 0, 24 * kHourMs);
  const std::string reason = is_lease_request(notice.preempted_for)
                                 ? fmt::format("preempted for lease L{}", notice.preempted_for - kLeaseRequestBase)
                             : jobs_.count(notice.preempted_for)
                                 ? fmt::format("preempted for job {} ({})", notice.preempted_for,
                                               protocol::enum_name(jobs_.at(notice.preempted_for).summary.priority_class))
                                 : fmt::format("preempted for request {}", notice.preempted_for);
  auto notify = [&](JobRecord& job) {
    if (auto peer = peer_of(job.summary.node_id)) {
      to_agent(*peer, protocol::JobPreempt{job.summary.job_id, static_cast<std::uint32_t>(grace_ms),
                                           fmt::format("{}; checkpoint and exit within {}", reason,
                                                       human_duration(grace_ms))});
    }
  };
  if (is_lease_request(notice.request)) {
    DevLease* lease = find_lease(notice.request - kLeaseRequestBase);
    if (!lease || lease->scheduler_lease != notice.lease) return;
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
                fmt::format("{}: release the lease within {} (by {}); it is then revoked and queued again keeping "
                            "its age",
                            reason, human_duration(grace_ms), clock_text(now + grace_ms)),
                now);
    return;
  }
  JobRecord* job = job_holding(notice.request, notice.lease);
  if (!job) return;
  const std::uint64_t id = job->summary.job_id;
  if (attempts_.in(id, AttemptPhase::start_deferred)) {
    // Its start still waits for an earlier attempt to stop: nothing ran on the chips, so they go
    // at once and the job is queued again keeping its age (on_requeued).
    log(action::Severity::info, fmt::format("job {} on {}: {}; its start had not been sent, its chips go at once", id,
                                            job->summary.node_id, reason));
    if (auto s = scheduler_.checkpoint_ack(notice.lease, to_scheduler_time(now)); !s) {
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

void CoordinatorCore::on_revoke(const scheduler::Revoke& revoke, TimeMs now) {
  if (is_lease_request(revoke.request)) {
    DevLease* lease = find_lease(revoke.request - kLeaseRequestBase);
    if (!lease || lease->scheduler_lease != revoke.lease) return;
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
  JobRecord* job = job_holding(revoke.request, revoke.lease);
  if (!job) return;
  attempts_.to(job->summary.job_id, AttemptPhase::revoked);
  if (auto peer = peer_of(job->summary.node_id)) {
    to_agent(*peer, protocol::JobCancel{job->summary.job_id, "preempted: the grace period ended"});
  }
  (void)now;
}

void CoordinatorCore::on_requeued(const scheduler::Requeued& requeued, TimeMs now) {
  if (is_lease_request(requeued.request)) {
    DevLease* lease = find_lease(requeued.request - kLeaseRequestBase);
    if (!lease || lease->scheduler_lease != requeued.previous_lease) return;
    lease->scheduler_lease.reset();
    lease->summary.state = LeaseState::pending;
    lease->summary.placement.clear();
    lease->summary.grace_deadline_ms = 0;
    lease->summary.expires_at_ms = 0;
    lease_event(*lease, LeaseEventKind::requeued, "preempted; queued again keeping its age", now);
    return;
  }
  JobRecord* job = job_holding(requeued.request, requeued.previous_lease);
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

void CoordinatorCore::on_lease_lost(const scheduler::LeaseLost& lost, TimeMs now) {
  if (is_lease_request(lost.request)) {
    DevLease* lease = find_lease(lost.request - kLeaseRequestBase);
    if (!lease || lease->scheduler_lease != lost.lease) return;
    lease_node_lost(*lease, lost.node, now);
    return;
  }
  JobRecord* job = job_holding(lost.request, lost.lease);
  if (!job) return;  // mark_node_lost already failed it over
  attempt_lost(*job, fmt::format("node {} was lost", lost.node), now);
}

void CoordinatorCore::on_lease_expired(const scheduler::LeaseExpired& expired, TimeMs now) {
  if (is_lease_request(expired.request)) {
    DevLease* lease = find_lease(expired.request - kLeaseRequestBase);
    if (!lease || lease->scheduler_lease != expired.lease) return;
    end_lease(*lease, "expired", now);
    return;
  }
  JobRecord* job = job_holding(expired.request, expired.lease);
  if (!job) return;
  // A backstop: the job's own timeout normally ends it first. Its chips are already free.
  attempts_.of(job->summary.job_id).own_lease.reset();
  if (auto peer = peer_of(job->summary.node_id)) {
    to_agent(*peer, protocol::JobCancel{job->summary.job_id, "its lease expired"});
  }
  finish(*job, JobState::timed_out, fmt::format("its lease on {} expired", job->summary.node_id), now);
}

}  // namespace kiln::coordinator

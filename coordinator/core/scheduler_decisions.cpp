// What the core asks of the scheduler (node states and inventories, through the scheduler
// bridge), the pump that carries the scheduler's decisions to the room of their owner, and, as
// methods of the job table, what each decision does to a job's attempt.
#include "coordinator/core/scheduler_decisions.h"

#include <algorithm>

#include <fmt/format.h>

#include "common/exhaustive.h"
#include "common/text/utf8.h"
#include "coordinator/core/core_rules.h"
#include "coordinator/core/job_attempts.h"
#include "coordinator/core/lease_lifecycle.h"

namespace kiln::coordinator {

using namespace detail;

void SchedulerDecisions::pump(TimeMs now) {
  // Handlers may call the scheduler again; what that decides is carried out in the same loop.
  // The nodes' states are brought up to date before each decision is carried out.
  while (true) {
    sync_node_states(now);
    auto decision = ctx_.bridge.poll_decision();
    if (!decision) break;
    // Each decision goes to the room of the request's owner.
    auto to_owner = [&](auto&& for_lease, auto&& for_job) {
      std::visit(Exhaustive{
                     [&](const request_owner::DevLease& o) { for_lease(o.lease_id); },
                     [&](const request_owner::Job& o) { for_job(o.job_id); },
                     [](const request_owner::StopHold&) {
                       KILN_ASSERT(false, "the bridge keeps the decisions about stop holds to itself");
                     },
                 },
                 decision->owner);
    };
    std::visit(Exhaustive{
                   [&](const scheduler::LeaseGranted& act) {
                     KILN_ASSERT(!act.placement.empty(), "a granted lease has chips");
                     // Withdrawn in the same step that granted it (a revoked job waiting for its old attempt).
                     if (ctx_.scheduler().lease_of(act.request) != act.lease) return;
                     to_owner([&](std::uint64_t lease) { leases_.granted(act, lease, now); },
                              [&](std::uint64_t job) { jobs_.granted(act, job, now); });
                   },
                   [&](const scheduler::PreemptNotice& act) {
                     const TimeMs grace_ms =
                         std::clamp<TimeMs>(ctx_.from_scheduler_time(act.grace_deadline_ms) - now, 0, 24 * kHourMs);
                     const std::string reason = preempted_for_text(act.preempted_for);
                     to_owner([&](std::uint64_t lease) { leases_.preempt_notice(act, lease, grace_ms, reason, now); },
                              [&](std::uint64_t job) { jobs_.preempt_notice(act, job, grace_ms, reason, now); });
                   },
                   [&](const scheduler::Revoke& act) {
                     to_owner([&](std::uint64_t lease) { leases_.revoked(act, lease); },
                              [&](std::uint64_t job) { jobs_.revoked(act, job); });
                   },
                   [&](const scheduler::Requeued& act) {
                     to_owner([&](std::uint64_t lease) { leases_.requeued(act, lease, now); },
                              [&](std::uint64_t job) { jobs_.requeued(act, job, now); });
                   },
                   [&](const scheduler::LeaseLost& act) {
                     to_owner([&](std::uint64_t lease) { leases_.lease_lost(act, lease, now); },
                              [&](std::uint64_t job) { jobs_.lease_lost(act, job, now); });
                   },
                   [&](const scheduler::LeaseExpired& act) {
                     to_owner([&](std::uint64_t lease) { leases_.lease_expired(act, lease, now); },
                              [&](std::uint64_t job) { jobs_.lease_expired(act, job, now); });
                   },
               },
               decision->action);
  }
  leases_.dispatch_jobs(now);
  refresh_chip_counts();
}

void SchedulerDecisions::recovered_node(const NodeRecord& node, TimeMs now) {
  recount_.insert(node.summary.node_id);
  ctx_.bridge.node_changed(node.summary.node_id);
  upsert_node(node, now);
  ctx_.bridge.set_node_state(node.summary.node_id, scheduler::NodeState::lost, "waiting for its agent to register", "",
                             now);
}

void SchedulerDecisions::inventory_reported(const NodeRecord& node) {
  if (ctx_.bridge.knows_other_chips(scheduler_node_info(node))) ctx_.bridge.inventory_changed(node.summary.node_id);
}

// Only the chips of the latest hello are dispatched: until the scheduler has taken them the
// node takes no new work (sync_node_states).
void SchedulerDecisions::upsert_node(const NodeRecord& node, TimeMs now) {
  ctx_.bridge.upsert_node(scheduler_node_info(node), now);
}

void SchedulerDecisions::refresh_chip_counts() {
  // Only the nodes where a job was placed or left, or a lease granted or ended, since the last
  // count: a heartbeat that changed nothing counts nothing.
  std::set<std::string> changed = jobs_.index().take_nodes_changed();
  changed.merge(recount_);
  recount_.clear();
  for (std::string& node_id : ctx_.scheduler().take_nodes_with_lease_changes()) changed.insert(std::move(node_id));
  for (const std::string& node_id : changed) {
    auto node = ctx_.registry.nodes().find(node_id);
    if (node == ctx_.registry.nodes().end()) continue;
    std::set<std::uint32_t> used = jobs_.index().chips_on(node_id);
    for (const auto& [chip, request] : ctx_.scheduler().leased_chips(node_id)) {
      // Chips held while a cancelled attempt stops belong to no active job: not shown as used.
      if (!ctx_.bridge.is_stop_hold(request)) used.insert(static_cast<std::uint32_t>(chip));
    }
    node->second.summary.chips_used = static_cast<std::uint32_t>(used.size());
  }
}

void SchedulerDecisions::queue_why(const std::string& client, std::uint64_t corr, const protocol::QueueWhy& why,
                                   TimeMs now) const {
  if ((why.job_id == 0) == (why.lease_id == 0)) {
    ctx_.reply_error(client, corr, Errc::invalid_argument,
                     "queue_why takes exactly one of job_id and lease_id; `kiln queue --why ID` takes a job id "
                     "or a lease id such as L3");
  } else if (why.job_id != 0 && !jobs_.find(why.job_id)) {
    ctx_.reply_error(client, corr, Errc::not_found,
                     fmt::format("no job {}; `kiln jobs` lists the known jobs", why.job_id));
  } else if (why.lease_id != 0 && !leases_.find(why.lease_id)) {
    ctx_.reply_error(client, corr, Errc::not_found,
                     fmt::format("no lease L{}; `kiln leases` lists the leases", why.lease_id));
  } else {
    ctx_.sink.to_client(client, explain(why, now), corr);
  }
}

protocol::QueueExplanation SchedulerDecisions::explain(const protocol::QueueWhy& why, TimeMs now) const {
  protocol::QueueExplanation out;
  auto from_scheduler = [&](std::optional<scheduler::RequestId> request, const std::string& prefix) {
    KILN_ASSERT(request.has_value(), "a pending job or lease has a request in the scheduler");
    auto e = ctx_.scheduler().explain(*request, ctx_.to_scheduler_time(now));
    out.pending = e.pending;
    out.reasons = e.reasons;
    if (e.expected_start_ms) {
      out.expected_start_ms =
          static_cast<std::uint64_t>(std::max<TimeMs>(0, ctx_.from_scheduler_time(*e.expected_start_ms)));
    }
    out.text = prefix + explanation_text(e, now);
  };
  if (why.lease_id != 0) {
    const DevLease& lease = *leases_.find(why.lease_id);
    out.state = std::string(protocol::enum_name(lease.summary.state));
    if (lease.summary.state == LeaseState::pending) {
      from_scheduler(ctx_.bridge.find_request(request_owner::DevLease{why.lease_id}),
                     fmt::format("lease L{} is pending: ", why.lease_id));
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
    const JobRecord& job = *jobs_.find(why.job_id);
    const auto& s = job.summary;
    out.state = std::string(protocol::enum_name(s.state));
    if (protocol::is_terminal(s.state)) {
      out.text = fmt::format("job {} is not pending: it ended {} ({})", s.job_id, out.state, s.detail);
    } else if (s.state != JobState::queued) {
      out.text = fmt::format("job {} is not pending: it is {} on {} chips [{}] (attempt {})", s.job_id, out.state,
                             s.node_id, fmt::join(s.chip_indices, ","), s.attempt);
    } else if (job.lease_id != 0) {
      const DevLease* lease = leases_.find(job.lease_id);
      if (lease && lease->summary.state == LeaseState::pending) {
        from_scheduler(ctx_.bridge.find_request(request_owner::DevLease{job.lease_id}),
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
      from_scheduler(ctx_.bridge.find_request(request_owner::Job{s.job_id}),
                     fmt::format("job {} is pending: ", s.job_id));
    }
  }
  out.text = text::utf8_head(out.text, protocol::kMessageText.max_len);
  for (auto& r : out.reasons) r = text::utf8_head(r, protocol::kMessageText.max_len);
  if (out.reasons.size() > 64) out.reasons.resize(64);
  return out;
}

std::string SchedulerDecisions::explanation_text(const scheduler::Explanation& e, TimeMs now) const {
  std::string out = fmt::format("{}", fmt::join(e.reasons, "; "));
  if (!e.pending) return out.empty() ? "not pending" : out;
  if (!out.empty()) out += "; ";
  if (e.expected_start_ms) {
    const TimeMs at = ctx_.from_scheduler_time(*e.expected_start_ms);
    out += at <= now ? "expected to start now"
                     : fmt::format("expected to start in {} (at {})", human_duration(at - now), ctx_.clock.text(at));
  } else {
    out += "no expected start: no eligible capacity in sight";
  }
  return out;
}

scheduler::NodeInfo SchedulerDecisions::scheduler_node_info(const NodeRecord& node) const {
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

void SchedulerDecisions::sync_node_states(TimeMs now) {
  set_scheduler_node_states(now);
  // The nodes waiting to have the chips of their latest hello taken: draining meanwhile, so
  // the upsert (which schedules at once) places nothing on them before their state is known.
  std::vector<std::string> waiting;
  for (const auto& id : ctx_.bridge.nodes_with_inventory_pending()) {
    if (ctx_.registry.has_session(id)) waiting.push_back(id);
  }
  if (waiting.empty()) return;
  for (const auto& id : waiting) upsert_node(ctx_.registry.nodes().at(id), now);
  set_scheduler_node_states(now);
}

void SchedulerDecisions::set_scheduler_node_states(TimeMs now) {
  for (const std::string& id : ctx_.bridge.take_changed_nodes()) {
    const NodeRecord* node = ctx_.registry.find(id);
    if (node == nullptr) continue;  // a maintenance job's node that never registered
    NodeStateToTell told = state_to_tell(*node);
    ctx_.bridge.set_node_state(id, told.state, std::move(told.reason), std::move(told.owner), now);
  }
}

SchedulerDecisions::NodeStateToTell SchedulerDecisions::state_to_tell(const NodeRecord& node) const {
  const auto& s = node.summary;
  const std::string& id = s.node_id;
  if (s.state == NodeState::lost || !ctx_.registry.has_session(id)) {
    return {scheduler::NodeState::lost, "no agent session", ""};
  }
  if (s.state == NodeState::quarantined) {
    return {scheduler::NodeState::quarantined, s.quarantine_reason, s.quarantine_owner};
  }
  if (node.draining) return {scheduler::NodeState::draining, node.drain_reason, ""};
  if (const std::string* pending = ctx_.bridge.inventory_pending(id)) {
    return {scheduler::NodeState::draining, pending->empty() ? "registering its chips" : *pending, ""};
  }
  if (const std::size_t stopping = jobs_.unheld_stopping_on(id); stopping > 0) {
    return {scheduler::NodeState::draining,
            fmt::format("stopping {} jobs it no longer runs for the coordinator", stopping), ""};
  }
  if (const std::optional<std::uint64_t> m = jobs_.maintenance_waiting_on(id)) {
    // Maintenance takes the whole node: it drains first and takes no new regular work.
    return {scheduler::NodeState::draining, fmt::format("draining for maintenance job {}", *m), ""};
  }
  return {scheduler::NodeState::up, "", ""};
}

std::optional<std::string> SchedulerDecisions::chip_count_error() const {
  std::map<std::string, std::set<std::uint32_t>> used;
  for (const auto& [id, job] : jobs_.all()) {
    const auto state = job.summary.state;
    if (state != protocol::JobState::assigned && state != protocol::JobState::running) continue;
    used[job.summary.node_id].insert(job.summary.chip_indices.begin(), job.summary.chip_indices.end());
  }
  for (const auto& lease : ctx_.scheduler().leases()) {
    if (ctx_.bridge.is_stop_hold(lease.request)) continue;
    for (const auto& p : lease.placement) {
      for (int chip : p.chips) used[p.node].insert(static_cast<std::uint32_t>(chip));
    }
  }
  for (const auto& [id, node] : ctx_.registry.nodes()) {
    auto it = used.find(id);
    const std::size_t counted = it == used.end() ? 0 : it->second.size();
    if (node.summary.chips_used != counted) {
      return fmt::format("node {} shows {} chips in use, its jobs and leases hold {}", id, node.summary.chips_used,
                         counted);
    }
  }
  return std::nullopt;
}

std::vector<std::string> SchedulerDecisions::nodes_out_of_sync() const {
  std::vector<std::string> stale;
  for (const auto& [id, node] : ctx_.registry.nodes()) {
    const std::optional<scheduler::NodeState> told = ctx_.bridge.told_state(id);
    if (told && !ctx_.bridge.changed(id) && *told != state_to_tell(node).state) stale.push_back(id);
  }
  return stale;
}

std::string SchedulerDecisions::preempted_for_text(scheduler::RequestId demand) const {
  const auto owner = ctx_.bridge.owner_of(demand);
  if (!owner) return "preempted for other work";
  if (const auto* of_job = std::get_if<request_owner::Job>(&*owner)) {
    if (const JobRecord* job = jobs_.find(of_job->job_id)) {
      return fmt::format("preempted for job {} ({})", of_job->job_id, protocol::enum_name(job->summary.priority_class));
    }
  }
  return "preempted for " + describe(*owner);
}

// ---- the job table's side of the scheduler's decisions: what each does to a job's attempt

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

void JobTable::lease_lost(const scheduler::LeaseLost& lost, std::uint64_t job_id, TimeMs now) {
  JobRecord* job = job_holding(job_id, lost.lease);
  if (!job) return;  // fail_over_from already failed it over
  attempt_lost(*job, fmt::format("node {} was lost", lost.node), now);
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

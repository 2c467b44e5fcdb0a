// What the core asks of the scheduler (node states and inventories, through the scheduler
// bridge), the scheduler's decisions handed to the router with their owner, and, as methods of
// the job table, what each decision does to a job's attempt.
#include "coordinator/core/scheduler_decisions.h"

#include <algorithm>

#include <fmt/format.h>

#include "common/text/utf8.h"
#include "coordinator/core/core_rules.h"
#include "coordinator/core/job_table.h"
#include "coordinator/core/lease_lifecycle.h"

namespace kiln::coordinator {

using namespace detail;

std::optional<OwnedDecision> SchedulerDecisions::next_decision(TimeMs now, const JobTable& jobs) {
  // The nodes' states are brought up to date before each decision is carried out.
  while (true) {
    sync_node_states(now, jobs);
    auto decision = ctx_.bridge.poll_decision();
    if (!decision) return std::nullopt;
    OwnedDecision owned{std::move(decision->action), std::move(decision->owner), 0, ""};
    if (const auto* granted = std::get_if<scheduler::LeaseGranted>(&owned.action)) {
      KILN_ASSERT(!granted->placement.empty(), "a granted lease has chips");
      // Withdrawn in the same step that granted it (a revoked job waiting for its old attempt).
      if (ctx_.scheduler().lease_of(granted->request) != granted->lease) continue;
    }
    if (const auto* notice = std::get_if<scheduler::PreemptNotice>(&owned.action)) {
      owned.grace_ms = std::clamp<TimeMs>(ctx_.from_scheduler_time(notice->grace_deadline_ms) - now, 0, 24 * kHourMs);
      owned.preempted_for = preempted_for_text(notice->preempted_for, jobs);
    }
    return owned;
  }
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

void SchedulerDecisions::refresh_chip_counts(std::set<std::string> jobs_moved, const ActiveJobIndex& jobs) {
  // Only the nodes where a job was placed or left, or a lease granted or ended, since the last
  // count: a heartbeat that changed nothing counts nothing.
  std::set<std::string> changed = std::move(jobs_moved);
  changed.merge(recount_);
  recount_.clear();
  for (std::string& node_id : ctx_.scheduler().take_nodes_with_lease_changes()) changed.insert(std::move(node_id));
  for (const std::string& node_id : changed) {
    auto node = ctx_.registry.nodes().find(node_id);
    if (node == ctx_.registry.nodes().end()) continue;
    std::set<std::uint32_t> used = jobs.chips_on(node_id);
    for (const auto& [chip, request] : ctx_.scheduler().leased_chips(node_id)) {
      // Chips held while a cancelled attempt stops belong to no active job: not shown as used.
      if (!ctx_.bridge.is_stop_hold(request)) used.insert(static_cast<std::uint32_t>(chip));
    }
    node->second.summary.chips_used = static_cast<std::uint32_t>(used.size());
  }
}

void SchedulerDecisions::queue_why(const std::string& client, std::uint64_t corr, const protocol::QueueWhy& why,
                                   TimeMs now, const JobTable& jobs, const LeaseLifecycle& leases) const {
  if ((why.job_id == 0) == (why.lease_id == 0)) {
    ctx_.reply_error(client, corr, Errc::invalid_argument,
                     "queue_why takes exactly one of job_id and lease_id; `kiln queue --why ID` takes a job id "
                     "or a lease id such as L3");
  } else if (why.job_id != 0 && !jobs.find(why.job_id)) {
    ctx_.reply_error(client, corr, Errc::not_found,
                     fmt::format("no job {}; `kiln jobs` lists the known jobs", why.job_id));
  } else if (why.lease_id != 0 && !leases.find(why.lease_id)) {
    ctx_.reply_error(client, corr, Errc::not_found,
                     fmt::format("no lease L{}; `kiln leases` lists the leases", why.lease_id));
  } else {
    ctx_.sink.to_client(client, explain(why, now, jobs, leases), corr);
  }
}

protocol::QueueExplanation SchedulerDecisions::explain(const protocol::QueueWhy& why, TimeMs now, const JobTable& jobs,
                                                      const LeaseLifecycle& leases) const {
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
    out.text = prefix + explanation_text(ctx_, e, now);
  };
  if (why.lease_id != 0) {
    const DevLease& lease = *leases.find(why.lease_id);
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
    const JobRecord& job = *jobs.find(why.job_id);
    const auto& s = job.summary;
    out.state = std::string(protocol::enum_name(s.state));
    if (protocol::is_terminal(s.state)) {
      out.text = fmt::format("job {} is not pending: it ended {} ({})", s.job_id, out.state, s.detail);
    } else if (s.state != JobState::queued) {
      out.text = fmt::format("job {} is not pending: it is {} on {} chips [{}] (attempt {})", s.job_id, out.state,
                             s.node_id, fmt::join(s.chip_indices, ","), s.attempt);
    } else if (job.lease_id != 0) {
      const DevLease* lease = leases.find(job.lease_id);
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

std::string explanation_text(const CoreContext& ctx, const scheduler::Explanation& e, TimeMs now) {
  std::string out = fmt::format("{}", fmt::join(e.reasons, "; "));
  if (!e.pending) return out.empty() ? "not pending" : out;
  if (!out.empty()) out += "; ";
  if (e.expected_start_ms) {
    const TimeMs at = ctx.from_scheduler_time(*e.expected_start_ms);
    out += at <= now ? "expected to start now"
                     : fmt::format("expected to start in {} (at {})", human_duration(at - now), ctx.clock.text(at));
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

void SchedulerDecisions::sync_node_states(TimeMs now, const JobTable& jobs) {
  set_scheduler_node_states(now, jobs);
  // The nodes waiting to have the chips of their latest hello taken: draining meanwhile, so
  // the upsert (which schedules at once) places nothing on them before their state is known.
  std::vector<std::string> waiting;
  for (const auto& id : ctx_.bridge.nodes_with_inventory_pending()) {
    if (ctx_.registry.has_session(id)) waiting.push_back(id);
  }
  if (waiting.empty()) return;
  for (const auto& id : waiting) upsert_node(ctx_.registry.nodes().at(id), now);
  set_scheduler_node_states(now, jobs);
}

void SchedulerDecisions::set_scheduler_node_states(TimeMs now, const JobTable& jobs) {
  for (const std::string& id : ctx_.bridge.take_changed_nodes()) {
    const NodeRecord* node = ctx_.registry.find(id);
    if (node == nullptr) continue;  // a maintenance job's node that never registered
    NodeStateToTell told = state_to_tell(*node, jobs);
    ctx_.bridge.set_node_state(id, told.state, std::move(told.reason), std::move(told.owner), now);
  }
}

SchedulerDecisions::NodeStateToTell SchedulerDecisions::state_to_tell(const NodeRecord& node,
                                                                      const JobTable& jobs) const {
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
  if (const std::size_t stopping = jobs.unheld_stopping_on(id); stopping > 0) {
    return {scheduler::NodeState::draining,
            fmt::format("stopping {} jobs it no longer runs for the coordinator", stopping), ""};
  }
  if (const std::optional<std::uint64_t> m = jobs.maintenance_waiting_on(id)) {
    // Maintenance takes the whole node: it drains first and takes no new regular work.
    return {scheduler::NodeState::draining, fmt::format("draining for maintenance job {}", *m), ""};
  }
  return {scheduler::NodeState::up, "", ""};
}

std::optional<std::string> SchedulerDecisions::chip_count_error(const JobTable& jobs) const {
  std::map<std::string, std::set<std::uint32_t>> used;
  for (const auto& [id, job] : jobs.all()) {
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

std::vector<std::string> SchedulerDecisions::nodes_out_of_sync(const JobTable& jobs) const {
  std::vector<std::string> stale;
  for (const auto& [id, node] : ctx_.registry.nodes()) {
    const std::optional<scheduler::NodeState> told = ctx_.bridge.told_state(id);
    if (told && !ctx_.bridge.changed(id) && *told != state_to_tell(node, jobs).state) stale.push_back(id);
  }
  return stale;
}

std::string SchedulerDecisions::preempted_for_text(scheduler::RequestId demand, const JobTable& jobs) const {
  const auto owner = ctx_.bridge.owner_of(demand);
  if (!owner) return "preempted for other work";
  if (const auto* of_job = std::get_if<request_owner::Job>(&*owner)) {
    if (const JobRecord* job = jobs.find(of_job->job_id)) {
      return fmt::format("preempted for job {} ({})", of_job->job_id, protocol::enum_name(job->summary.priority_class));
    }
  }
  return "preempted for " + describe(*owner);
}

}  // namespace kiln::coordinator

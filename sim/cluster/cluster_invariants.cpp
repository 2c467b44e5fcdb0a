// The invariants checked after every step: the coordinator's records against the simulated
// cluster, results acknowledged only once stored, chips never held twice.
#include "sim/cluster/world.h"

namespace kiln::sim::cluster {

void Simulation::World::check_invariants() {
  if (violation) return;
  for (const auto& [node, ack] : acks_this_step) check_result_ack(node, ack);
  acks_this_step.clear();
  if (violation) return;
  if (coordinator) check_coordinator();
  if (violation) return;
  for (std::uint64_t id : accepted) {
    if (stored_jobs.count(id) == 0) {
      return fail(fmt::format("job {} was acknowledged to its client (job_accepted) but is not in the store", id));
    }
  }
  for (const auto& [id, job] : stored_jobs) {
    if (counted_attempts(job) > job.summary.max_attempts) {
      return fail(fmt::format("the store holds job {} on attempt {} ({} preempted) of at most {}", id,
                              job.summary.attempt, job.preemptions, job.summary.max_attempts));
    }
  }
  for (const auto& [id, attempt] : acked_results) {
    const auto& s = stored_jobs.at(id).summary;
    if (!protocol::is_terminal(s.state)) {
      return fail(fmt::format("job {} attempt {}: its result was acknowledged to the agent, but the store now "
                              "holds the job as {}",
                              id, attempt, protocol::enum_name(s.state)));
    }
  }
}

// Preempted attempts do not count against max_attempts.
std::uint32_t Simulation::World::counted_attempts(const JobRecord& job) {
  return job.summary.attempt - std::min(job.summary.attempt, job.preemptions);
}

void Simulation::World::check_coordinator() {
  const auto& knobs = options.coordinator_knobs;
  const DurationMs liveness_ms = knobs.liveness_timeout_ms();
  const DurationMs allowance_ms = options.tick_allowance_ms;
  if (auto s = coordinator->scheduler().check_invariants(); !s) {
    return fail("the scheduler's own invariants: " + s.error().message);
  }
  if (const auto wrong = coordinator->job_index_error()) return fail("the index of active jobs: " + *wrong);
  if (const auto wrong = coordinator->job_retention_error()) return fail("the retention of ended jobs: " + *wrong);
  for (const auto& [id, job] : stored_jobs) {
    if (!protocol::is_terminal(job.summary.state) && !coordinator->jobs().count(id)) {
      return fail(fmt::format("job {} is {} in the store, but the coordinator let go of it", id,
                              protocol::enum_name(job.summary.state)));
    }
  }
  if (const auto wrong = coordinator->lease_index_error()) return fail("the index of developer leases: " + *wrong);
  if (const auto wrong = coordinator->stop_hold_index_error()) return fail("the index of stop holds: " + *wrong);
  if (const auto wrong = coordinator->chip_count_error()) return fail("chips in use: " + *wrong);
  if (const auto stale = coordinator->nodes_out_of_sync(); !stale.empty()) {
    return fail(fmt::format("the scheduler holds a stale state of node {}, which no sync will correct", stale.front()));
  }
  // Developer leases: chips held, and no lease living past its expiry.
  std::map<std::uint64_t, std::map<std::string, std::set<std::uint32_t>>> lease_chips;
  std::map<std::string, std::map<std::uint32_t, std::string>> chip_owner;  // node -> chip -> holder
  auto hold = [&](const std::string& node, std::uint32_t chip, const std::string& holder) {
    auto [owner, inserted] = chip_owner[node].emplace(chip, holder);
    if (!inserted) {
      fail(fmt::format("chip {} of node {} is held by {} and by {} at once", chip, node, owner->second, holder));
    }
    return inserted;
  };
  for (const auto& lease : coordinator->leases()) {
    if (lease.state != protocol::LeaseState::granted && lease.state != protocol::LeaseState::preempting) continue;
    if (lease.expires_at_ms > 0 &&
        wall() > static_cast<TimeMs>(lease.expires_at_ms) + liveness_ms + allowance_ms) {
      auto at = [&](std::uint64_t wall_ms) {
        return wall_ms == 0 ? std::string("-") : fmt::format("t={}", static_cast<TimeMs>(wall_ms) - options.start_wall_ms);
      };
      return fail(fmt::format("lease L{} is still {} {} ms after it expired (granted {}, expired {}, grace deadline "
                              "{}; liveness timeout {} ms)",
                              lease.lease_id, protocol::enum_name(lease.state),
                              wall() - static_cast<TimeMs>(lease.expires_at_ms), at(lease.granted_at_ms),
                              at(lease.expires_at_ms), at(lease.grace_deadline_ms), liveness_ms));
    }
    for (const auto& p : lease.placement) {
      for (std::uint32_t chip : p.chip_indices) {
        lease_chips[lease.lease_id][p.node_id].insert(chip);
        if (!hold(p.node_id, chip, fmt::format("lease L{}", lease.lease_id))) return;
      }
    }
  }
  // The scheduler's leases (jobs' and developers') past their expiry. Its clock starts at
  // midnight of the day the core started (coordinator_core.h).
  const TimeMs started_wall = options.start_wall_ms + coordinator_started_at;
  constexpr TimeMs kDayMs = 24 * kHourMs;
  const TimeMs scheduler_now = wall() - started_wall / kDayMs * kDayMs;
  for (const auto& lease : coordinator->scheduler().leases()) {
    if (lease.expires_at_ms > 0 && scheduler_now > lease.expires_at_ms + liveness_ms + allowance_ms) {
      const auto owner = coordinator->request_owner(lease.request);
      return fail(fmt::format("scheduler lease {} (of {}) is still held {} ms after it expired", lease.lease,
                              owner ? coordinator::describe(*owner) : std::string("a request the core never made"),
                              scheduler_now - lease.expires_at_ms));
    }
  }
  for (const auto& [id, job] : coordinator->jobs()) {
    const auto& s = job.summary;
    if (counted_attempts(job) > s.max_attempts) {
      return fail(fmt::format("job {} is on attempt {} ({} preempted) but allows at most {}", id, s.attempt,
                              job.preemptions, s.max_attempts));
    }
    if (s.state != JobState::assigned && s.state != JobState::running) continue;
    auto node = coordinator->nodes().find(s.node_id);
    if (node == coordinator->nodes().end()) {
      return fail(fmt::format("job {} is {} on node '{}', which the coordinator does not know", id,
                              protocol::enum_name(s.state), s.node_id));
    }
    if (node->second.summary.state == protocol::NodeState::lost) {
      return fail(fmt::format("job {} is still {} on node {}, which the coordinator marked lost", id,
                              protocol::enum_name(s.state), s.node_id));
    }
    for (std::uint32_t chip : s.chip_indices) {
      // A job on a chip its developer lease holds is covered by the lease. Any other active
      // job holds its chips itself: also one whose lease ended, or was revoked and granted
      // elsewhere, while the job is still being stopped.
      if (job.lease_id != 0) {
        auto lease = lease_chips.find(job.lease_id);
        if (lease != lease_chips.end() && lease->second[s.node_id].count(chip) != 0) continue;
      }
      if (!hold(s.node_id, chip, fmt::format("job {}", id))) return;
    }
    const TimeMs started = job.started_at_ms - options.start_wall_ms;
    if (now > started + job.timeout_ms + knobs.job_timeout_slack_ms + allowance_ms) {
      return fail(fmt::format("job {} is still {} on node {} {} ms after its dispatch; its timeout is {} ms plus "
                              "{} ms of slack",
                              id, protocol::enum_name(s.state), s.node_id, now - started, job.timeout_ms,
                              knobs.job_timeout_slack_ms));
    }
    auto agent = agent_by_node_id.find(s.node_id);
    if (agent != agent_by_node_id.end()) {
      // After a start the recovered nodes have the restart grace to register.
      const TimeMs heard = std::max(agents[agent->second].last_heard_by_coordinator, coordinator_started_at);
      const TimeMs registered_by = coordinator_started_at + std::max<TimeMs>(knobs.restart_grace_ms, liveness_ms);
      if (now > std::max(heard + liveness_ms, registered_by) + allowance_ms) {
        return fail(fmt::format("job {} is still {} on node {}, which the coordinator has not heard from for "
                                "{} ms (liveness timeout {} ms)",
                                id, protocol::enum_name(s.state), s.node_id, now - heard, liveness_ms));
      }
    }
  }
  // A quarantined node returns only after passing diagnostics (being lost in between does
  // not count).
  for (const auto& [node_id, node] : coordinator->nodes()) {
    const auto state = node.summary.state;
    if (state == protocol::NodeState::quarantined) {
      if (in_quarantine.insert(node_id).second) diagnostics_passed.erase(node_id);
    } else if (state != protocol::NodeState::lost && in_quarantine.count(node_id)) {
      if (!diagnostics_passed.count(node_id)) {
        return fail(fmt::format("node {} left quarantine ({}) without passing diagnostics", node_id,
                                protocol::enum_name(state)));
      }
      in_quarantine.erase(node_id);
    }
  }
  for (const auto& [node_id, node] : coordinator->nodes()) {
    auto held = chip_owner.find(node_id);
    const std::size_t expected = held == chip_owner.end() ? 0 : held->second.size();
    if (node.summary.chips_used != expected) {
      return fail(fmt::format("node {} reports {} chips used but its active jobs and leases hold {}", node_id,
                              node.summary.chips_used, expected));
    }
  }
}

bool Simulation::World::all_jobs_terminal() const {
  if (!coordinator) return false;
  for (const auto& lease : coordinator->leases()) {
    if (lease.state != protocol::LeaseState::ended) return false;
  }
  for (const auto& [id, job] : stored_jobs) {
    if (!protocol::is_terminal(job.summary.state)) return false;
  }
  for (const auto& [id, job] : coordinator->jobs()) {
    if (!protocol::is_terminal(job.summary.state)) return false;
  }
  return true;
}

}  // namespace kiln::sim::cluster

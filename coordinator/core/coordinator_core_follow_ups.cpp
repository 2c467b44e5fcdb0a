// The router's side of what the rooms hand back: the follow-ups of a lease's life and of a node's
// change, each carried out where the room returned it and in the order its type documents
// (lease_lifecycle.h, agent_messages.h), and the flows that cross rooms step by step: a hello, a
// job's end, a lost node, the leases due, the jobs inside granted leases. No room holds another:
// every call here hands a room what it reads of the others as const references.
#include <fmt/format.h>

#include "common/exhaustive.h"
#include "coordinator/core/coordinator_core.h"

namespace kiln::coordinator {

void CoordinatorCore::carry_out(std::optional<LeaseFollowUp> follow_up, TimeMs now) {
  // A lease revoked at the end of its grace that cannot be queued again ends: a second follow-up.
  while (follow_up) {
    follow_up = std::visit(
        Exhaustive{
            [&](const lease_follow_up::Ended& ended) -> std::optional<LeaseFollowUp> {
              if (ended.hand_over) jobs_.take_over_lease_chips(ended.lease_id, *ended.hand_over, now);
              jobs_.lease_ended(ended.lease_id, ended.why, now);
              leases_.record_end(ended, jobs_);
              return std::nullopt;
            },
            [&](const lease_follow_up::Revoked& revoked) -> std::optional<LeaseFollowUp> {
              jobs_.cancel_running_in_lease(revoked.lease_id, revoked.why);
              if (!revoked.requeue) return std::nullopt;
              if (revoked.hand_over) jobs_.take_over_lease_chips(revoked.lease_id, *revoked.hand_over, now);
              return leases_.requeue_revoked(revoked.lease_id, now, jobs_);
            },
            [&](const lease_follow_up::Noticed& noticed) -> std::optional<LeaseFollowUp> {
              jobs_.warn_of_preemption_in_lease(noticed.lease_id, noticed.grace_ms, noticed.reason);
              leases_.record_notice(noticed, now, jobs_);
              return std::nullopt;
            },
        },
        *follow_up);
  }
}

void CoordinatorCore::carry_out(const NodeFollowUps& follow_ups, TimeMs now) {
  for (const NodeFollowUp& follow_up : follow_ups) {
    std::visit(Exhaustive{
                   [&](const node_follow_up::StatesChanged&) { scheduling_.sync_node_states(now, jobs_); },
                   [&](const node_follow_up::Quarantined& quarantined) {
                     scheduling_.sync_node_states(now, jobs_);
                     const NodeRecord& node = registry_.nodes().at(quarantined.node_id);
                     jobs_.node_quarantined(node, now);
                     jobs_.rerun_failures_of(node, now);
                   },
                   [&](const node_follow_up::NoteOnJob& note) { jobs_.add_to_detail(note.job_id, note.note); },
               },
               follow_up);
  }
}

void CoordinatorCore::register_node(const std::string& peer, const Caller& caller, const protocol::Envelope& m,
                                    const protocol::Hello& hello, TimeMs now) {
  std::optional<HelloTaken> taken = agents_.hello(peer, caller, m, hello, now);
  if (!taken) return;
  const NodeRecord& node = registry_.nodes().at(taken->node_id);
  const JobTable::HelloOutcome jobs = jobs_.reconcile_hello(node, hello, taken->welcome, now, leases_);
  // The node's state first (draining while it stops jobs or its chips changed), then its
  // chips: updating them schedules at once.
  scheduling_.inventory_reported(node);
  scheduling_.sync_node_states(now, jobs_);
  scheduling_.upsert_node(node, now);
  scheduling_.sync_node_states(now, jobs_);
  agents_.welcome(peer, m, *taken);
  jobs_.resume_on(peer, hello.node_id, taken->running, jobs.stopped, now);
  agents_.registered(hello, *taken, jobs.lost);
}

void CoordinatorCore::job_ended(const std::string& node_id, const JobRecord& job, TimeMs now) {
  carry_out(agents_.diagnostics_ended(node_id, job, now), now);
  carry_out(agents_.install_ended(node_id, job, now), now);
  carry_out(agents_.recheck_ended(node_id, job), now);
}

void CoordinatorCore::lose_silent_nodes(TimeMs now) {
  for (const std::string& node_id : agents_.silent_nodes(now)) {
    agents_.lose(node_id);
    jobs_.forget_stopping_on(node_id);
    // The scheduler first, so that nothing requeued below is placed on this node again.
    scheduling_.sync_node_states(now, jobs_);
    const std::size_t failed_over = jobs_.fail_over_from(node_id, now, leases_);
    for (const std::uint64_t lease_id : leases_.holding_chips_on(node_id)) {
      carry_out(leases_.node_lost(lease_id, node_id, now, jobs_), now);
    }
    agents_.loss_recorded(node_id, failed_over, now);
  }
}

void CoordinatorCore::end_due_leases(TimeMs now) {
  for (const std::uint64_t lease_id : leases_.due(now)) carry_out(leases_.end_if_due(lease_id, now, jobs_), now);
}

void CoordinatorCore::dispatch_lease_jobs(TimeMs now) {
  // Dispatching into one lease changes nothing of another's, so each records its jobs after all.
  for (const protocol::LeaseSummary* lease : leases_.granted()) jobs_.dispatch_in_lease(*lease, now);
  leases_.jobs_dispatched(jobs_);
}

}  // namespace kiln::coordinator

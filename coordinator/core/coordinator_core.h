// The coordinator's pure core: node registry with liveness, the job state machine, developer
// leases, and the scheduler core (coordinator/scheduler) that decides who gets which chips.
// Messages and `now` go in; actions come out through poll_action(). No sockets, clocks,
// threads or files: the shell (and the simulation tests) supply all of that.
#pragma once

#include <deque>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "common/error.h"
#include "common/protocol/codec.h"
#include "common/time.h"
#include "coordinator/core/actions.h"
#include "coordinator/core/dev_leases.h"
#include "coordinator/core/job_attempt.h"
#include "coordinator/core/knobs.h"
#include "coordinator/core/node_registry.h"
#include "coordinator/core/record_book.h"
#include "coordinator/core/records.h"
#include "coordinator/core/scheduler_bridge.h"
#include "coordinator/scheduler/scheduler.h"

namespace kiln::coordinator {

// The two clocks the core is given at every input. Deadlines (liveness, job timeouts, lease
// expiry, preemption grace) run on the monotonic clock, so a step of the system clock neither
// loses every node nor expires every lease; the wall clock is for display and for the times
// people set (a lease booked to start at 14:00).
struct Now {
  TimeMs monotonic_ms = 0;
  TimeMs wall_ms = 0;
  constexpr Now(TimeMs monotonic, TimeMs wall) : monotonic_ms(monotonic), wall_ms(wall) {}
  // One clock for both, as in simulations and tests, where time never steps.
  constexpr Now(TimeMs both) : monotonic_ms(both), wall_ms(both) {}  // NOLINT(google-explicit-constructor)
};

class CoordinatorCore {
 public:
  // `recovered` is what the store held at start-up. Nodes come back without a session and
  // have one liveness timeout from `now` to register again before their jobs are failed over;
  // queued jobs go back to the scheduler keeping their age, running ones get their chips back
  // when their agent re-registers still running them. Pending developer leases are queued again
  // keeping their age; granted ones hold their chips again at once (until their expiry), and are
  // queued again if a node of theirs does not register within the liveness timeout.
  CoordinatorCore(CoordinatorKnobs knobs, Snapshot recovered, Now now);

  void on_agent_message(const std::string& peer, const Caller& caller,
                        const protocol::Envelope& message, Now now);
  void on_client_message(const std::string& client, const Caller& caller,
                         const protocol::Envelope& message, Now now);
  void on_tick(Now now);

  std::optional<Action> poll_action();
  // On the monotonic clock of Now.
  std::optional<TimeMs> next_deadline() const;

  // Read-only views, for the invariant checkers of the simulation tests.
  const std::map<std::uint64_t, JobRecord>& jobs() const { return jobs_; }
  const std::map<std::string, NodeRecord>& nodes() const { return registry_.nodes(); }
  std::optional<std::string> peer_of(const std::string& node_id) const { return registry_.peer_of(node_id); }
  const scheduler::Scheduler& scheduler() const { return bridge_.scheduler(); }
  // Whom a scheduler request is for, and a job's request (if it ever had one).
  std::optional<RequestOwner> request_owner(scheduler::RequestId request) const { return bridge_.owner_of(request); }
  std::optional<scheduler::RequestId> request_of_job(std::uint64_t job_id) const {
    return bridge_.find_request(request_owner::Job{job_id});
  }
  std::vector<protocol::LeaseSummary> leases() const { return dev_leases_.summaries(); }

 private:
  // ---- agents
  void handle_hello(const std::string& peer, const Caller& caller, const protocol::Envelope& m,
                    const protocol::Hello& hello, TimeMs now);
  // The parts of a hello: admitted (its key, a common version, not a stale copy), the node's
  // inventory taken, the jobs it reports reconciled, those it no longer runs failed over, the
  // chips of those it is told to stop held.
  std::optional<std::uint32_t> admit_hello(const std::string& peer, const Caller& caller, const protocol::Envelope& m,
                                           const protocol::Hello& hello);
  void take_inventory(NodeRecord& node, const protocol::Hello& hello, TimeMs now);
  // Returns the jobs whose chips could not be given back (to be failed over).
  std::vector<std::uint64_t> reconcile_reported_jobs(const protocol::Hello& hello, protocol::Welcome& welcome,
                                                     TimeMs now);
  std::size_t fail_vanished_jobs(const protocol::Hello& hello, TimeMs now);
  void hold_chips_told_to_stop(const NodeRecord& node, const std::vector<std::uint64_t>& cancelled, TimeMs now);
  void handle_job_started(const std::string& node_id, const protocol::JobStarted& started, TimeMs now);
  void handle_job_finished(const std::string& peer, const std::string& node_id,
                           const protocol::Envelope& m, const protocol::JobFinished& finished,
                           TimeMs now);
  void handle_health_report(const std::string& node_id, const protocol::HealthReport& report, TimeMs now);
  void apply_diag_result(const std::string& node_id, const JobRecord& job, TimeMs now);
  void apply_install_result(const std::string& node_id, const JobRecord& job, TimeMs now);
  void quarantine(NodeRecord& node, const std::string& reason, const std::string& owner, TimeMs now);
  // The diagnostics level that returns a quarantined node: higher for a flapping one.
  std::uint32_t release_diag_level(const NodeRecord& node) const;
  // CI jobs that failed on a quarantined node, before its quarantine or after, run again once on
  // a healthy node of its revision.
  bool may_rerun(const JobRecord& job, const NodeRecord& node, TimeMs now) const;
  void rerun_failures_of(const NodeRecord& node, TimeMs now);
  void rerun(std::uint64_t job_id, const NodeRecord& node, TimeMs now);
  void handle_heartbeat(const std::string& peer, const std::string& node_id,
                        const protocol::Envelope& m, const protocol::Heartbeat& beat, TimeMs now);

  // ---- clients
  void handle_submit(const std::string& client, const Caller& caller, const protocol::Envelope& m,
                     const protocol::SubmitJob& submit, std::uint64_t lease_id, TimeMs now);
  // Why a submission is refused, if it is: the caller's role, the lease, the node, the queue.
  std::optional<Error> refuse_submit(const Caller& caller, const protocol::SubmitJob& submit, std::uint64_t lease_id);
  std::optional<Error> refuse_submit_in_lease(const Caller& caller, const protocol::SubmitJob& submit,
                                              std::uint64_t lease_id);
  void handle_cancel(const std::string& client, const Caller& caller, const protocol::Envelope& m,
                     const protocol::CancelJob& cancel, TimeMs now);
  void handle_drain(const std::string& client, const Caller& caller, const protocol::Envelope& m,
                    const protocol::DrainNode& drain, TimeMs now);
  void handle_request_lease(const std::string& client, const Caller& caller, const protocol::Envelope& m,
                            const protocol::RequestLease& request, TimeMs now);
  void handle_release_lease(const std::string& client, const Caller& caller, const protocol::Envelope& m,
                            const protocol::ReleaseLease& release, TimeMs now);
  void handle_put_record(const std::string& client, const Caller& caller, const protocol::Envelope& m,
                         const protocol::PutRecord& put, TimeMs now);
  void handle_watch_lease(const std::string& client, const Caller& caller, const protocol::Envelope& m,
                          const protocol::WatchLease& watch, TimeMs now);
  protocol::QueueExplanation explain(const protocol::QueueWhy& why, TimeMs now) const;
  // The queue in scheduling order (queue_listing.cpp).
  protocol::QueueList queue_list(const protocol::ListQueue& request, TimeMs now) const;
  protocol::JobList job_list(const protocol::ListJobs& request) const;

  // ---- jobs
  // One attempt of an active job ended without a result from the agent (node lost, agent
  // restarted without it): requeue while attempts remain, otherwise the job is lost.
  void attempt_lost(JobRecord& job, const std::string& why, TimeMs now);
  void finish(JobRecord& job, protocol::JobState state, std::string detail, TimeMs now);
  void mark_node_lost(NodeRecord& node, TimeMs now);
  void start_attempt(JobRecord& job, const std::string& node_id, std::vector<std::uint32_t> chips, TimeMs now);
  void dispatch_lease_jobs(TimeMs now);
  // The old attempt of a revoked job has stopped (or can no longer be waited for): a new attempt
  // waiting for it starts.
  void attempt_stopped(std::uint64_t job_id, TimeMs now);
  // An attempt told to stop that does not report its end is waited for no longer than a silent
  // node would be.
  TimeMs stopping_given_up_at(const StoppingAttempt& stopping) const {
    return stopping.since_ms + knobs_.job_timeout_slack_ms + knobs_.liveness_timeout_ms();
  }
  void send_job_start(const JobRecord& job);
  // Revokes, before the scheduler's own timer would, the jobs whose grace has ended: their
  // chips stay held until the attempt has stopped, the job is queued again keeping its age.
  void revoke_due_jobs(TimeMs now);
  void hold_stopping_chips(std::uint64_t job_id, const std::string& node_id, const std::vector<std::uint32_t>& chips,
                           TimeMs now);
  // An attempt a node was told to stop is gone: its held chips are free again.
  void old_attempt_gone(std::uint64_t job_id, const std::string& node_id, TimeMs now);
  // Starts deferred on a node until the jobs it stops without held chips are gone: go now if
  // they are.
  void start_deferred_on(const std::string& node_id, TimeMs now);
  // A new hold request (its id allocated) for chips of a stopping attempt on a node.
  scheduler::Request stop_hold_request(std::uint64_t job_id, const std::string& node_id, std::size_t chips, TimeMs now);
  // The chips a job holds as a scheduler lease of its own pass to a hold in one step: its attempt
  // is being stopped, and nothing new starts on them until it is gone.
  Status hold_chips_of_stopping_job(const JobRecord& job, TimeMs now);
  void refresh_chip_counts();

  // ---- the scheduler
  scheduler::Request job_request(const JobRecord& job);
  Status submit_to_scheduler(const JobRecord& job, TimeMs now);
  // Ends whatever the scheduler holds for a job of its own (pending request or lease).
  void forget_request(JobRecord& job, TimeMs now);
  // Tells the scheduler what each node can take now: up, draining (asked to, or waiting for
  // maintenance), quarantined, or lost (no session).
  void sync_node_states(TimeMs now);
  void set_scheduler_node_states(TimeMs now);
  scheduler::NodeInfo scheduler_node_info(const NodeRecord& node) const;
  // Only the chips of the latest hello are dispatched: until the scheduler has taken them the
  // node takes no new work (sync_node_states).
  void upsert_scheduler_node(const NodeRecord& node, TimeMs now) { bridge_.upsert_node(scheduler_node_info(node), now); }
  // Carries out what the scheduler decided, until it has nothing more to say.
  void pump_scheduler(TimeMs now);
  void on_granted(const scheduler::LeaseGranted& granted, const RequestOwner& owner, TimeMs now);
  void on_preempt_notice(const scheduler::PreemptNotice& notice, const RequestOwner& owner, TimeMs now);
  void on_revoke(const scheduler::Revoke& revoke, const RequestOwner& owner, TimeMs now);
  void on_requeued(const scheduler::Requeued& requeued, const RequestOwner& owner, TimeMs now);
  void on_lease_lost(const scheduler::LeaseLost& lost, const RequestOwner& owner, TimeMs now);
  void on_lease_expired(const scheduler::LeaseExpired& expired, const RequestOwner& owner, TimeMs now);
  // The developer lease a decision is about, if it is about one and the lease still holds `lease`.
  DevLease* lease_holding(const RequestOwner& owner, std::optional<scheduler::LeaseId> lease);
  // The active job a decision is about, if it is about one and the job still holds `lease`.
  JobRecord* job_holding(const RequestOwner& owner, scheduler::LeaseId lease);
  // Why a preemption notice was given, in words: for whom.
  std::string preempted_for_text(scheduler::RequestId demand) const;
  // The core's clock: the wall clock at start-up, advanced by the monotonic clock. Every time
  // the core keeps or stores is on it; it reads as the wall clock until the system clock steps.
  TimeMs clock(const Now& now);
  // "HH:MM UTC" of a time on the core's clock, as the wall clock reads it now (with seconds:
  // "HH:MM:SS UTC").
  std::string clock_text(TimeMs core_ms, bool with_seconds = false) const;
  TimeMs to_scheduler_time(TimeMs core_ms) const { return bridge_.to_scheduler_time(core_ms); }
  TimeMs to_wall_time(TimeMs scheduled) const { return bridge_.to_core_time(scheduled); }
  std::string explanation_text(const scheduler::Explanation& explanation, TimeMs now) const;

  // ---- developer leases
  // The caller's lease (or any, for ops and admin); otherwise replies why not and gives nullptr.
  DevLease* callers_lease(const std::string& client, const Caller& caller, const protocol::Envelope& m,
                          std::uint64_t lease_id, std::string_view otherwise);
  void lease_event(DevLease& lease, protocol::LeaseEventKind kind, std::string message, TimeMs now);
  void end_lease(DevLease& lease, const std::string& why, TimeMs now);
  // Gives back the chips a developer lease holds in the scheduler, except those of its jobs that
  // still run: they keep theirs as leases of their own until they end.
  void release_lease_chips(DevLease& lease, TimeMs now);
  // Expiry, and revocation at the end of the grace, of developer leases whose jobs still run:
  // done here, before the scheduler's own timers would free those jobs' chips.
  void end_due_leases(TimeMs now);
  scheduler::Request lease_request(const DevLease& lease);
  Status resubmit_lease(DevLease& lease, TimeMs now);
  void answer_watches(TimeMs now);
  protocol::LeaseEvent status_event(const DevLease& lease, TimeMs now) const;
  std::vector<std::uint64_t> jobs_in_lease(std::uint64_t lease_id) const;
  // Whether an active job runs on chips its developer lease holds (otherwise it holds a
  // scheduler lease of its own: its lease ended or was requeued while it ran).
  bool runs_on_lease_chips(const JobRecord& job) const;
  // Puts a recovered lease back: pending ones in the queue, granted ones on their chips.
  void recover_lease(LeaseRecord record, TimeMs now);
  // A node of a granted lease was lost: the lease is queued again keeping its age.
  void lease_node_lost(DevLease& lease, const std::string& node_id, TimeMs now);

  void reply_error(const std::string& client, std::uint64_t corr, Errc code, std::string message);
  void to_agent(const std::string& peer, protocol::Body body, std::uint64_t corr = 0);
  void log(action::Severity severity, std::string text);
  void save(const JobRecord& job);
  void save(const NodeRecord& node);

  CoordinatorKnobs knobs_;
  TimeMs mono_origin_ms_ = 0;  // the monotonic clock at start-up
  TimeMs core_origin_ms_ = 0;  // the wall clock at start-up: where the core's clock starts
  TimeMs wall_offset_ms_ = 0;  // the wall clock minus the core's, at the latest input
  NodeRegistry registry_;
  std::map<std::uint64_t, JobRecord> jobs_;
  std::set<std::uint64_t> active_jobs_;  // queued, assigned or running
  std::uint64_t next_job_id_ = 1;
  ActionSink sink_;  // every part of the core puts its actions here, in order
  SchedulerBridge bridge_;
  // The phase of each job's current attempt, the chips it holds as a lease of its own, and an
  // earlier attempt still stopping (job_attempt.h). A new attempt granted on the node where an
  // earlier one is still being stopped starts only once it has (the agent knows a job by its id
  // and would take the start for a duplicate); until then the job holds its chips as `assigned`.
  AttemptBook attempts_;
  // Where each job's latest attempt ran, to hold its chips while it is being stopped.
  std::map<std::uint64_t, std::map<std::string, std::vector<std::uint32_t>>> last_placement_;
  // Jobs a node was told to stop because they are no longer its (after a partition, say), by
  // node, with when: the node takes no new work until they are gone from its heartbeats, so
  // nothing new starts on chips a stopping workload still uses.
  std::map<std::string, std::map<std::uint64_t, TimeMs>> stopping_on_node_;
  DevLeases dev_leases_;
  RecordBook records_;
};

}  // namespace kiln::coordinator

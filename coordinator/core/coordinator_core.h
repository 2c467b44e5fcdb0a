// The coordinator's pure core: node registry with liveness, the job state machine, developer
// leases, and the scheduler core (coordinator/scheduler) that decides who gets which chips.
// Messages and `now` go in; actions come out through poll_action(). No sockets, clocks,
// threads or files: the shell (and the simulation tests) supply all of that.
//
// CoordinatorCore is a router over rooms, each a class with the state it owns as private
// members; the router converts `now` to the core's clock, hands each message to the room it is
// for, and carries out the scheduler's decisions after each input (pump):
//
// - AgentSessions (agent_messages.h): hello, health reports, quarantine, drains, nodes lost.
//   The nodes and sessions are the NodeRegistry's (node_registry.h).
// - JobTable (job_table.h): the jobs, their attempts (AttemptBook, attempt_book.h), where
//   each attempt ran and what each node is stopping; submission, cancel, results, failover,
//   reruns, timeouts, revocation at the end of a notice.
// - LeaseLifecycle (lease_lifecycle.h): developer leases over DevLeases (dev_leases.h):
//   requests, releases, watches, expiry, recovery, and which leases are granted (the job table
//   dispatches the jobs inside them).
// - SchedulerDecisions (scheduler_decisions.h): node states told to the scheduler, each of its
//   decisions handed back with its owner (the router's pump gives it to that room), `kiln
//   queue` and its --why.
// - RecordBook (record_book.h): changes, bundles and qualification results, answered here; run
//   reports read from the store (action::ReadRecords).
// - Rollouts (rollouts.h): nodes converging on what their environment should run.
//
// The rooms share a CoreContext (core_context.h: knobs, the ActionSink, the core's clock, the
// registry and the SchedulerBridge) and hold no other room: what they read of another is handed
// to each call as a const reference, and what they decide for another comes back to the router
// as a small value (OwnedDecision, LeaseFollowUp, NodeFollowUps, HelloTaken, ...), which it
// carries out in the order each type documents (docs/architecture.md, section 3), then hands
// the rest to the room that returned it. A room's methods are defined in its own .cpp files; the
// router's carrying out of follow-ups and the flows that cross rooms (a hello, a lost node) are
// in coordinator_core_follow_ups.cpp.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/protocol/codec.h"
#include "common/time.h"
#include "coordinator/core/actions.h"
#include "coordinator/core/agent_messages.h"
#include "coordinator/core/core_context.h"
#include "coordinator/core/dev_leases.h"
#include "coordinator/core/job_table.h"
#include "coordinator/core/job_watch.h"
#include "coordinator/core/knobs.h"
#include "coordinator/core/lease_lifecycle.h"
#include "coordinator/core/node_registry.h"
#include "coordinator/core/record_book.h"
#include "coordinator/core/records.h"
#include "coordinator/core/rollouts.h"
#include "coordinator/core/scheduler_bridge.h"
#include "coordinator/core/scheduler_decisions.h"
#include "records/waiver.h"
#include "coordinator/scheduler/scheduler.h"

namespace kiln::coordinator {

class CoordinatorCore {
 public:
  // `recovered` is what the store held at start-up. Nodes come back without a session and
  // have one liveness timeout from `now` to register again before their jobs are failed over;
  // queued jobs go back to the scheduler keeping their age, running ones get their chips back
  // when their agent re-registers still running them. Pending developer leases are queued again
  // keeping their age; granted ones hold their chips again at once (until their expiry), and are
  // queued again if a node of theirs does not register within the liveness timeout.
  // `waiver_register`: whose approvers may waive which gates (RecordBook).
  CoordinatorCore(CoordinatorKnobs knobs, Snapshot recovered, Now now,
                  std::shared_ptr<const qualification::RiskRegister> waiver_register = nullptr);
  // The rooms hold references to the context, which point into this object.
  CoordinatorCore(const CoordinatorCore&) = delete;
  CoordinatorCore& operator=(const CoordinatorCore&) = delete;

  void on_agent_message(const std::string& peer, const Caller& caller,
                        const protocol::Envelope& message, Now now);
  void on_client_message(const std::string& client, const Caller& caller,
                         const protocol::Envelope& message, Now now);
  void on_tick(Now now);
  // The answer to action::RecallJob: the ended job as the store holds it, nullopt when it holds
  // none, or why it could not be read. The requests that named the job are taken now.
  void on_job_recalled(std::uint64_t job_id, Result<std::optional<JobRecord>> found);
  // The answer to action::ReadRecords: the records the store holds for its query (for a
  // GetRecord, none or the one; for a ListRecords, in seq order, at most the query's limit), or
  // why they could not be read. The client gets its reply now.
  void on_records_read(const action::ReadRecords& read, Result<std::vector<protocol::RecordEntry>> found);
  // The answer to action::RecallRecord: the record as the store holds it (none or the one), or
  // why it could not be read. The puts that waited for it and for nothing else are taken now.
  void on_record_recalled(protocol::RecordKind kind, const std::string& key,
                          Result<std::vector<protocol::RecordEntry>> found);
  // The shell's loop did not run for `paused_ms` (the process was stopped, starved or swapped
  // out): heartbeats sent meanwhile may still be unread, so no node is lost for that silence.
  // Each gets a liveness timeout from now, or the restart grace when the pause was longer than
  // that (its agent gave up and is reconnecting, as after a restart).
  void on_resumed(Now now, DurationMs paused_ms);
  // What the environments repository says each environment runs (the shell reads it), or why
  // its newest commit could not be read.
  void on_desired_environments(DesiredFleet fleet, Now now);
  void on_environments_problem(std::string problem) { rollouts_.set_problem(std::move(problem)); }

  std::optional<Action> poll_action();
  // The qualification records it holds documents of (tickets, baselines, waivers): however long
  // the history, the others are in the store only.
  std::size_t held_record_count() const { return records_.held_count(); }
  // On the monotonic clock of Now.
  std::optional<TimeMs> next_deadline() const;

  // Read-only views, for the invariant checkers of the simulation tests.
  const std::map<std::uint64_t, JobRecord>& jobs() const { return jobs_.all(); }
  const std::map<std::string, NodeRecord>& nodes() const { return registry_.nodes(); }
  std::optional<std::string> peer_of(const std::string& node_id) const { return registry_.peer_of(node_id); }
  const scheduler::Scheduler& scheduler() const { return bridge_.scheduler(); }
  // Whom a scheduler request is for, and a job's request (if it ever had one).
  std::optional<RequestOwner> request_owner(scheduler::RequestId request) const { return bridge_.owner_of(request); }
  std::optional<scheduler::RequestId> request_of_job(std::uint64_t job_id) const {
    return bridge_.find_request(request_owner::Job{job_id});
  }
  std::vector<protocol::LeaseSummary> leases() const { return leases_.summaries(); }
  // Nodes whose state in the scheduler went stale without being marked for the next sync: none,
  // or an index of the core is wrong (SchedulerDecisions::nodes_out_of_sync).
  std::vector<std::string> nodes_out_of_sync() const { return scheduling_.nodes_out_of_sync(jobs_); }
  // What the index of active jobs gets wrong, if anything (JobTable::index_error).
  std::optional<std::string> job_index_error() const { return jobs_.index_error(); }
  // What the retention of ended jobs gets wrong, if anything (JobTable::retention_error).
  std::optional<std::string> job_retention_error() const { return jobs_.retention_error(); }
  // What the index of developer leases gets wrong, if anything (DevLeases::index_error).
  std::optional<std::string> lease_index_error() const { return leases_.index_error(); }
  // What the index of stop holds by node gets wrong, if anything (SchedulerBridge::stop_hold_index_error).
  std::optional<std::string> stop_hold_index_error() const { return bridge_.stop_hold_index_error(); }
  std::optional<std::string> chip_count_error() const { return scheduling_.chip_count_error(jobs_); }

 private:
  CoreContext context() { return CoreContext{knobs_, sink_, clock_, registry_, bridge_}; }
  // Carries out what the scheduler decided, until it has nothing more to say, each decision by
  // the room of its owner; then the jobs of granted developer leases are dispatched and the
  // nodes' chip counts brought up to date.
  void pump(TimeMs now);
  void carry_out(const OwnedDecision& decision, TimeMs now);
  // What a lease's life does to the jobs inside it, until the lease lifecycle asks for nothing
  // more (coordinator_core_follow_ups.cpp).
  void carry_out(std::optional<LeaseFollowUp> follow_up, TimeMs now);
  // What a node's change asks of the scheduler and the job table, in order.
  void carry_out(const NodeFollowUps& follow_ups, TimeMs now);
  // A hello: the session and inventory (AgentSessions), the node's jobs (JobTable), the node told
  // to the scheduler, the welcome, the node's work resumed.
  void register_node(const std::string& peer, const Caller& caller, const protocol::Envelope& m,
                     const protocol::Hello& hello, TimeMs now);
  // A job's current attempt ended: its result as diagnostics, install or recheck.
  void job_ended(const std::string& node_id, const JobRecord& job, TimeMs now);
  // Nodes silent past their liveness deadline are lost: their attempts failed over, the leases
  // on them queued again.
  void lose_silent_nodes(TimeMs now);
  // Expiry and revocation of developer leases at their deadlines, lease by lease.
  void end_due_leases(TimeMs now);
  // Jobs inside a granted developer lease start on its chips, first come first served.
  void dispatch_lease_jobs(TimeMs now);
  // A job taken by the job table, then the nodes' states told to the scheduler.
  Result<std::uint64_t> accept(const Caller& caller, const protocol::SubmitJob& submit, std::uint64_t lease_id,
                               TimeMs now);
  void submit(const std::string& client, const Caller& caller, const protocol::Envelope& m,
              const protocol::SubmitJob& submit, std::uint64_t lease_id, TimeMs now);
  // The installs a rollout decided on, submitted in order.
  void start_installs(const std::vector<InstallDue>& installs, TimeMs now);
  void take_client_message(const std::string& client, const Caller& caller, const protocol::Envelope& m,
                           Now clock_now);
  void put_audit(const std::string& client, const Caller& caller, std::uint64_t corr, const protocol::PutAudit& put);
  void audit_waiver(const Caller& caller, const std::string& document,
                    const std::optional<qualification::Waiver>& replaced, TimeMs now);
  void put_record(const std::string& client, const Caller& caller, const protocol::Envelope& m,
                  const protocol::PutRecord& put, TimeMs now);
  void get_record(const std::string& client, std::uint64_t corr, const protocol::GetRecord& get);
  void list_records(const std::string& client, std::uint64_t corr, const protocol::ListRecords& list);
  void set_ticket_state(const std::string& client, const Caller& caller, const protocol::Envelope& m,
                        const protocol::SetTicketState& request, TimeMs now);

  CoordinatorKnobs knobs_;
  CoreClock clock_;
  ActionSink sink_;  // every room puts its actions here, in order
  NodeRegistry registry_;
  SchedulerBridge bridge_;
  RecordBook records_;
  JobTable jobs_;
  LeaseLifecycle leases_;
  SchedulerDecisions scheduling_;
  AgentSessions agents_;
  Rollouts rollouts_;
  JobWatches job_watches_;
  // Client requests that name a job let go of, until the store reads it back (on_job_recalled).
  struct RecallWaiter {
    std::string client;
    Caller caller;
    protocol::Envelope message;
    Now now;
  };
  std::map<std::uint64_t, std::vector<RecallWaiter>> waiting_for_recall_;
  // Puts that wait for the records they decide by (on_record_recalled), taken in the order they
  // came, and the records being read back for them.
  void recall(const std::vector<std::pair<protocol::RecordKind, std::string>>& records);
  std::deque<RecallWaiter> puts_waiting_;
  std::set<std::pair<protocol::RecordKind, std::string>> records_recalling_;
};

}  // namespace kiln::coordinator

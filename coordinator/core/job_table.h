// The job table: every job the coordinator knows, the state machine of each active job's
// attempts (attempt_book.h), where each attempt ran, and the attempts nodes are stopping. It
// takes submissions and cancels, what agents report about jobs, and the scheduler's decisions
// about jobs' own requests; it starts, fails over, requeues and ends attempts.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/protocol/codec.h"
#include "common/protocol/messages.h"
#include "coordinator/core/active_jobs.h"
#include "coordinator/core/core_context.h"
#include "coordinator/core/attempt_book.h"
#include "coordinator/core/records.h"
#include "coordinator/scheduler/scheduler.h"

namespace kiln::coordinator {

class LeaseLifecycle;

// Placed as maintenance: the whole node leased, allowed onto its quarantined node (diagnostics,
// installs, and the rerun that rechecks a node quarantined for that job's wrong outputs).
bool takes_whole_node(const JobRecord& job);

class JobTable {
 public:
  explicit JobTable(CoreContext context) : ctx_(context) {}

  // ---- recovery: the jobs from the store, then (once the leases are back) the queued ones
  // given to the scheduler again keeping their age; returns how many were.
  void recover(std::vector<JobRecord> jobs);
  std::size_t requeue_recovered(TimeMs now, const LeaseLifecycle& leases);

  // ---- views
  // The jobs held in memory (job_retention.h): every active one, the newest ended ones, and
  // the newest rollout install of each node.
  const std::map<std::uint64_t, JobRecord>& all() const { return jobs_; }
  const JobRecord* find(std::uint64_t job_id) const;
  // The newest install a rollout asked of each node, by node.
  const std::map<std::string, std::uint64_t>& newest_rollout_installs() const { return newest_rollout_install_; }
  // ---- retention: a job id this coordinator gave out that it no longer holds is in the store.
  bool may_recall(std::uint64_t job_id) const { return job_id != 0 && job_id < next_job_id_ && !jobs_.count(job_id); }
  // An ended job read back from the store, held until forget_ended() lets it go again.
  void take_recalled(JobRecord job);
  // Lets go of the oldest ended jobs beyond [knobs] ended_jobs_in_memory, once nothing decides
  // by them any more at `now`. Called between two events, never while a reference into the table
  // is held.
  void forget_ended(TimeMs now);
  std::size_t active_count() const { return active_jobs_.size(); }
  // The active jobs of a developer lease.
  std::vector<std::uint64_t> in_lease(std::uint64_t lease_id) const;
  // Whether a job of the lease is assigned or running.
  bool runs_in_lease(std::uint64_t lease_id) const;
  protocol::JobList list(const protocol::ListJobs& request) const;
  // The active jobs by state, node and timeout, as last saved.
  const ActiveJobIndex& index() const { return index_; }
  ActiveJobIndex& index() { return index_; }
  // What the index gets wrong against a reading of every job, if anything (for the simulation's
  // invariants).
  std::optional<std::string> index_error() const;
  // What the retention's view gets wrong against a reading of every job held, if anything: each
  // ended job is let go, pinned or a rerun candidate (within the window at the latest
  // forget_ended), and no more are held than the knob allows (for the simulation's invariants).
  std::optional<std::string> retention_error() const;
  // The queued maintenance job (the oldest, if several) the node drains for, if any.
  std::optional<std::uint64_t> maintenance_waiting_on(const std::string& node_id) const;
  // How many jobs a node was told to stop without their chips being held.
  std::size_t unheld_stopping_on(const std::string& node_id) const;
  std::optional<TimeMs> next_deadline() const;

  // ---- clients
  // A job submitted by a client or on the core's own behalf (a rollout's install): the job's id,
  // or why it was refused. The router tells the scheduler the nodes' states next (a maintenance
  // job drains its node) and answers the client.
  Result<std::uint64_t> accept(const Caller& caller, const protocol::SubmitJob& submit, std::uint64_t lease_id,
                               TimeMs now, const LeaseLifecycle& leases);
  // The ranks of a gang, into a lease of whole nodes: accepted or refused as a whole, the client
  // answered either way. Whether it was accepted.
  bool submit_gang(const std::string& client, const Caller& caller, const protocol::Envelope& m,
                   const protocol::SubmitGang& gang, TimeMs now, const LeaseLifecycle& leases);
  void cancel(const std::string& client, const Caller& caller, const protocol::Envelope& m,
              const protocol::CancelJob& cancel, TimeMs now);
  void get(const std::string& client, std::uint64_t corr, const protocol::GetJob& get) const;
  // Reruns `failing` on its quarantined node, on the chips it had (recheck_node): its id, or why
  // not (one such rerun at a time).
  Result<std::uint64_t> submit_recheck(const JobRecord& failing, const NodeRecord& node, const Caller& caller,
                                       TimeMs now);

  // ---- agents
  void job_started(const std::string& node_id, const protocol::JobStarted& started);
  // What a result did: the job whose current attempt it ended, if it did; or its attempt let go
  // of its chips at a checkpoint under a preemption notice, and the scheduler requeues it (the
  // router carries that out, saving the requeue, before the result is acknowledged).
  struct ResultOutcome {
    const JobRecord* ended = nullptr;
    bool let_go_under_notice = false;
  };
  ResultOutcome job_finished(const std::string& node_id, const protocol::JobFinished& finished, TimeMs now);
  // A hello's jobs: those it reports get their chips back, those it no longer runs are failed
  // over, those it is told to stop (welcome.cancel_jobs) keep their chips until gone.
  struct HelloOutcome {
    std::vector<std::uint64_t> stopped;  // earlier attempts the node no longer runs
    std::size_t lost = 0;                // attempts failed over
  };
  HelloOutcome reconcile_hello(const NodeRecord& node, const protocol::Hello& hello, protocol::Welcome& welcome,
                               TimeMs now, const LeaseLifecycle& leases);
  // After the welcome: cancels decided while the node had no session go out, and attempts
  // waiting for the stopped ones start.
  void resume_on(const std::string& peer, const std::string& node_id, const std::set<std::uint64_t>& running,
                 const std::vector<std::uint64_t>& stopped, TimeMs now);
  void reconcile_heartbeat(const std::string& peer, const std::string& node_id, const protocol::Heartbeat& beat,
                           TimeMs now);
  // The node was lost: nothing it was stopping is waited for (first, before the scheduler
  // learns it), then its attempts are failed over; returns how many were.
  void forget_stopping_on(const std::string& node_id) {
    stopping_on_node_.erase(node_id);
    ctx_.bridge.node_changed(node_id);
  }
  std::size_t fail_over_from(const std::string& node_id, TimeMs now, const LeaseLifecycle& leases);
  // CI jobs that failed on a node now quarantined run again on a healthy node of its revision.
  void rerun_failures_of(const NodeRecord& node, TimeMs now);
  // The node was just quarantined: it takes only its diagnostics. Attempts there that had not
  // started (dispatched without a job_started yet, or waiting to be sent) are withdrawn and
  // queued again keeping their age, costing no attempt; those already running carry the
  // quarantine's reason with their results (JobSummary node_quarantined).
  void node_quarantined(const NodeRecord& node, TimeMs now);
  // A note for people added to an ended job's detail (why a diagnostics pass did not release its node).
  void add_to_detail(std::uint64_t job_id, const std::string& note);

  // ---- ticks
  void time_out_overdue(TimeMs now);
  // Stopping attempts that do not report their end are waited for no longer than a silent node.
  void give_up_stopping(TimeMs now);
  // Revokes, before the scheduler's own timer would, the jobs whose grace has ended: their
  // chips stay held until the attempt has stopped, the job is queued again keeping its age.
  void revoke_due(TimeMs now);

  // ---- developer leases
  // The lease ended: its queued jobs are cancelled, its running ones told to stop.
  void lease_ended(std::uint64_t lease_id, const std::string& why, TimeMs now);
  void cancel_running_in_lease(std::uint64_t lease_id, const std::string& why);
  // The lease gives back `held`: its running jobs keep their chips as leases of their own.
  void take_over_lease_chips(std::uint64_t lease_id, scheduler::LeaseId held, TimeMs now);
  // Queued jobs of a granted lease start on its free chips, first come first served.
  void dispatch_in_lease(const protocol::LeaseSummary& lease, TimeMs now);
  void warn_of_preemption_in_lease(std::uint64_t lease_id, TimeMs grace_ms, const std::string& reason);

  // ---- the scheduler's decisions about a job's own request
  void granted(const scheduler::LeaseGranted& granted, std::uint64_t job_id, TimeMs now);
  void preempt_notice(const scheduler::PreemptNotice& notice, std::uint64_t job_id, TimeMs grace_ms,
                      const std::string& reason, TimeMs now);
  void revoked(const scheduler::Revoke& revoke, std::uint64_t job_id);
  void requeued(const scheduler::Requeued& requeued, std::uint64_t job_id, TimeMs now);
  void lease_lost(const scheduler::LeaseLost& lost, std::uint64_t job_id, TimeMs now, const LeaseLifecycle& leases);
  void lease_expired(const scheduler::LeaseExpired& expired, std::uint64_t job_id, TimeMs now);

 private:
  // Why a submission is refused, if it is: the caller's role, the lease, the node, the queue.
  std::optional<Error> refuse_submit(const Caller& caller, const protocol::SubmitJob& submit, std::uint64_t lease_id,
                                     const LeaseLifecycle& leases);
  std::optional<Error> refuse_submit_in_lease(const Caller& caller, const protocol::SubmitJob& submit,
                                              std::uint64_t lease_id, const LeaseLifecycle& leases);
  std::optional<Error> refuse_gang(const Caller& caller, const protocol::SubmitGang& gang,
                                   const LeaseLifecycle& leases);
  // A new queued job (its id not yet taken) of what was submitted.
  JobRecord new_job(const Caller& caller, const protocol::SubmitJob& submit, std::uint64_t lease_id, TimeMs now,
                    const LeaseLifecycle& leases) const;
  // A rank of a gang ended without succeeding: every other rank is stopped, since the
  // survivors would only wait at the rendezvous or fail there.
  void end_gang(const JobRecord& ended, TimeMs now);
  // Starts every rank of the gang that `rank0` heads on nodes of its own among the lease's,
  // or none; `busy` gains the chips they take.
  void dispatch_gang(const JobRecord& rank0, const protocol::LeaseSummary& lease,
                     std::map<std::string, std::set<std::uint32_t>>& busy, TimeMs now);
  // The chips of `p` a job of `chips` chips could take now: healthy ones not busy.
  std::vector<std::uint32_t> free_lease_chips(const protocol::LeasePlacement& p,
                                              const std::map<std::string, std::set<std::uint32_t>>& busy,
                                              std::uint32_t chips) const;
  protocol::Rendezvous rendezvous_of(const JobRecord& job) const;
  // Returns the jobs whose chips could not be given back (to be failed over).
  std::vector<std::uint64_t> reconcile_reported_jobs(const protocol::Hello& hello, protocol::Welcome& welcome,
                                                     TimeMs now, const LeaseLifecycle& leases);
  std::size_t fail_vanished_jobs(const protocol::Hello& hello, TimeMs now, const LeaseLifecycle& leases);
  void hold_chips_told_to_stop(const NodeRecord& node, const std::vector<std::uint64_t>& cancelled, TimeMs now);
  bool may_rerun(const JobRecord& job, const NodeRecord& node, TimeMs now) const;
  void rerun(std::uint64_t job_id, const NodeRecord& node, TimeMs now);
  // A new queued job (its id not yet taken) that runs `original` again as it was submitted.
  JobRecord rerun_record(const JobRecord& original, TimeMs now) const;
  // A running attempt is told to stop; the job ends when its result comes, and says why.
  void request_cancel(JobRecord& job, const std::string& why);
  // One attempt of an active job ended without a result from the agent (node lost, agent
  // restarted without it): requeue while attempts remain, otherwise the job is lost.
  void attempt_lost(JobRecord& job, const std::string& why, TimeMs now, const LeaseLifecycle& leases);
  // A dispatched attempt holding chips of its own is told to stop (`why`, to the agent); its chips
  // stay held until it is gone, and the job is queued again keeping its age, the attempt not
  // counted against max_attempts. False, changing nothing, when it holds no chips of its own.
  bool stop_and_requeue(JobRecord& job, const std::string& why, const std::string& detail, TimeMs now);
  // The job, its attempt over without a result, is queued again keeping its age, with `detail`;
  // the attempt is not counted against max_attempts.
  void requeue_uncounted(JobRecord& job, const std::string& detail, TimeMs now);
  void finish(JobRecord& job, protocol::JobState state, std::string detail, TimeMs now);
  void start_attempt(JobRecord& job, const std::string& node_id, std::vector<std::uint32_t> chips, TimeMs now);
  // The old attempt of a revoked job has stopped (or can no longer be waited for): a new attempt
  // waiting for it starts.
  void attempt_stopped(std::uint64_t job_id, TimeMs now);
  // An attempt told to stop that does not report its end is waited for no longer than a silent
  // node would be.
  TimeMs stopping_given_up_at(TimeMs since_ms) const {
    return since_ms + ctx_.knobs.job_timeout_slack_ms + ctx_.knobs.liveness_timeout_ms();
  }
  void send_job_start(const JobRecord& job);
  void send_preempt(const JobRecord& job, TimeMs grace_ms, const std::string& reason);
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
  scheduler::Request job_request(const JobRecord& job);
  Status submit_to_scheduler(const JobRecord& job, TimeMs now);
  // Ends whatever the scheduler holds for a job of its own (pending request or lease).
  void forget_request(JobRecord& job, TimeMs now);
  // The active job a decision is about, if the job still holds `lease`.
  JobRecord* job_holding(std::uint64_t job_id, scheduler::LeaseId lease);
  // The job is queued, assigned or running.
  void activate(std::uint64_t id, const JobRecord& job);
  // Every change of a job is saved through here, which keeps the index and the retention with it.
  void save(const JobRecord& job);
  // Keeps the retention's view of a job held in memory: ended, and neither a rollout's newest
  // install of its node nor a failure that may still be rerun, it may be let go.
  void track_retention(const JobRecord& job);

  CoreContext ctx_;
  std::map<std::uint64_t, JobRecord> jobs_;
  std::set<std::uint64_t> active_jobs_;  // queued, assigned or running
  // The maintenance jobs among them: few, however long the queue, so what a node drains for is
  // found without reading the queue.
  std::set<std::uint64_t> active_maintenance_jobs_;
  std::uint64_t next_job_id_ = 1;
  // The ended jobs held that forget_ended() may let go, oldest (lowest id) first.
  std::set<std::uint64_t> ended_;
  std::map<std::string, std::uint64_t> newest_rollout_install_;
  // The failures a quarantine of their node may rerun (may_be_rerun), by when they ended: held
  // until the rerun window has passed, and all rerun_failures_of reads.
  std::set<std::pair<TimeMs, std::uint64_t>> rerun_candidates_;
  TimeMs forgotten_at_ = 0;  // the latest forget_ended(): the candidates are those of its window
  // The phase of each job's current attempt, the chips it holds as a lease of its own, and an
  // earlier attempt still stopping (attempt_book.h). A new attempt granted on the node where an
  // earlier one is still being stopped starts only once it has (the agent knows a job by its id
  // and would take the start for a duplicate); until then the job holds its chips as `assigned`.
  AttemptBook attempts_;
  ActiveJobIndex index_;
  // Where each job's latest attempt ran, to hold its chips while it is being stopped.
  std::map<std::uint64_t, std::map<std::string, std::vector<std::uint32_t>>> last_placement_;
  // Jobs a node was told to stop because they are no longer its (after a partition, say), by
  // node, with when: the node takes no new work until they are gone from its heartbeats, so
  // nothing new starts on chips a stopping workload still uses.
  std::map<std::string, std::map<std::uint64_t, TimeMs>> stopping_on_node_;
};

}  // namespace kiln::coordinator

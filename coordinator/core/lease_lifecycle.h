// The life of developer leases (kiln lease) as the core drives it, over DevLeases (dev_leases.h):
// requests, releases, watches, expiry, revocation at the end of a notice, recovery after a
// restart, nodes lost under a lease, and the scheduler's decisions about lease requests. It holds
// no other room: what it reads of the jobs inside a lease is handed to each call, and what a
// lease's life does to those jobs comes back to the router as a LeaseFollowUp.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "common/error.h"
#include "common/protocol/codec.h"
#include "common/protocol/messages.h"
#include "coordinator/core/core_context.h"
#include "coordinator/core/dev_leases.h"
#include "coordinator/core/records.h"
#include "coordinator/scheduler/scheduler.h"

namespace kiln::coordinator {

class JobTable;

// What a step of a lease's life does to the jobs inside it. The router has the job table carry it
// out, then hands what is left to the lease lifecycle (CoordinatorCore::carry_out), which may ask
// for more.
namespace lease_follow_up {
// The lease ended (released, expired, or lost and not queued again): first the chips it gave back
// pass to its running jobs (`hand_over`: JobTable::take_over_lease_chips), then its queued jobs
// are cancelled and its running ones told to stop (JobTable::lease_ended); then the lease records
// its end (LeaseLifecycle::record_end).
struct Ended {
  std::uint64_t lease_id = 0;
  std::string why;
  std::optional<scheduler::LeaseId> hand_over;
  std::optional<Caller> actor;  // who ended it, when not the coordinator
  // A release: the client is answered once the lease has ended.
  std::string client;
  std::uint64_t corr = 0;
};
// Revoked: its running jobs are told to stop (JobTable::cancel_running_in_lease). At the end of a
// grace the core enforces (`requeue`), the lease also gives back its chips, which its running jobs
// keep (`hand_over`), and is queued again keeping its age (LeaseLifecycle::requeue_revoked).
struct Revoked {
  std::uint64_t lease_id = 0;
  std::string why;
  bool requeue = false;
  std::optional<scheduler::LeaseId> hand_over;
};
// Under a preemption notice: its running jobs are warned (JobTable::warn_of_preemption_in_lease),
// then the lease records the notice (LeaseLifecycle::record_notice).
struct Noticed {
  std::uint64_t lease_id = 0;
  TimeMs grace_ms = 0;
  std::string reason;
};
}  // namespace lease_follow_up
using LeaseFollowUp = std::variant<lease_follow_up::Ended, lease_follow_up::Revoked, lease_follow_up::Noticed>;

// A lease request the scheduler has taken: the client is answered (LeaseLifecycle::answer_request)
// once the router has carried out what the scheduler decided, a grant among it.
struct LeaseAsked {
  std::string client;
  std::uint64_t corr = 0;
  std::uint64_t lease_id = 0;
  scheduler::RequestId request = 0;
};

class LeaseLifecycle {
 public:
  explicit LeaseLifecycle(CoreContext context)
      : ctx_(context),
        dev_leases_(context.sink, context.knobs.max_ended_leases_kept, context.knobs.max_lease_watches) {}

  // ---- recovery: puts a lease from the store back, pending ones in the queue, granted ones
  // on their chips; then the ended ones beyond those kept are forgotten.
  [[nodiscard]] std::optional<LeaseFollowUp> recover(LeaseRecord record, TimeMs now, const JobTable& jobs);
  void prune_ended() { dev_leases_.prune_ended(); }

  // ---- views
  const DevLease* find(std::uint64_t lease_id) const { return dev_leases_.find(lease_id); }
  std::vector<protocol::LeaseSummary> summaries() const { return dev_leases_.summaries(); }
  std::size_t active() const { return dev_leases_.active(); }
  protocol::LeaseList list(const protocol::ListLeases& request) const;
  // Whether an active job runs on chips its developer lease holds (otherwise it holds a
  // scheduler lease of its own: its lease ended or was requeued while it ran).
  bool runs_on_lease_chips(const JobRecord& job) const;
  std::optional<TimeMs> next_deadline() const { return dev_leases_.next_deadline(); }
  std::optional<std::string> index_error() const { return dev_leases_.index_error(); }
  // The granted leases, whose queued jobs the router has the job table start on their chips
  // (JobTable::dispatch_in_lease) before each records its jobs (jobs_dispatched).
  std::vector<const protocol::LeaseSummary*> granted() const;
  void jobs_dispatched(const JobTable& jobs);

  // ---- clients
  // A request refused is answered now; one taken is answered by answer_request.
  std::optional<LeaseAsked> request(const std::string& client, const Caller& caller, const protocol::Envelope& m,
                                    const protocol::RequestLease& request, TimeMs now);
  // Granted, or pending with why and when it should start.
  void answer_request(const LeaseAsked& asked, TimeMs now);
  // A release allowed ends the lease: the client is answered once it has (record_end).
  [[nodiscard]] std::optional<LeaseFollowUp> release(const std::string& client, const Caller& caller,
                                                     const protocol::Envelope& m, const protocol::ReleaseLease& release,
                                                     TimeMs now);
  void watch(const std::string& client, const Caller& caller, const protocol::Envelope& m,
             const protocol::WatchLease& watch, TimeMs now);

  // ---- ticks
  // Expiry, and revocation at the end of the grace, of developer leases whose jobs still run:
  // done here, before the scheduler's own timers would free those jobs' chips. The router takes
  // the leases with a deadline due one by one (end_if_due), carrying out each one's follow-up.
  std::vector<std::uint64_t> due(TimeMs now) const { return dev_leases_.due(now); }
  [[nodiscard]] std::optional<LeaseFollowUp> end_if_due(std::uint64_t lease_id, TimeMs now, const JobTable& jobs);
  void answer_watches(TimeMs now);

  // ---- the follow-ups' second halves, once the job table has carried out the first
  void record_end(const lease_follow_up::Ended& ended, const JobTable& jobs);
  [[nodiscard]] std::optional<LeaseFollowUp> requeue_revoked(std::uint64_t lease_id, TimeMs now,
                                                             const JobTable& jobs);
  void record_notice(const lease_follow_up::Noticed& noticed, TimeMs now, const JobTable& jobs);

  // ---- nodes
  // The leases holding chips on a node just lost, each then handed to node_lost by the router.
  std::vector<std::uint64_t> holding_chips_on(const std::string& node_id) const;
  // A lease given back its chips after a coordinator restart, on a node the scheduler already
  // counted as lost: the scheduler ends nothing, so it is queued again here.
  [[nodiscard]] std::optional<LeaseFollowUp> node_lost(std::uint64_t lease_id, const std::string& node_id, TimeMs now,
                                                       const JobTable& jobs);

  // ---- the scheduler's decisions about a lease's request
  void granted(const scheduler::LeaseGranted& granted, std::uint64_t lease_id, TimeMs now, const JobTable& jobs);
  [[nodiscard]] std::optional<LeaseFollowUp> preempt_notice(const scheduler::PreemptNotice& notice,
                                                            std::uint64_t lease_id, TimeMs grace_ms,
                                                            const std::string& reason, TimeMs now);
  [[nodiscard]] std::optional<LeaseFollowUp> revoked(const scheduler::Revoke& revoke, std::uint64_t lease_id);
  void requeued(const scheduler::Requeued& requeued, std::uint64_t lease_id, const JobTable& jobs);
  [[nodiscard]] std::optional<LeaseFollowUp> lease_lost(const scheduler::LeaseLost& lost, std::uint64_t lease_id,
                                                        TimeMs now, const JobTable& jobs);
  [[nodiscard]] std::optional<LeaseFollowUp> lease_expired(const scheduler::LeaseExpired& expired,
                                                           std::uint64_t lease_id);

 private:
  // The caller's lease (or any, for ops and admin); otherwise replies why not and gives nullptr.
  DevLease* callers_lease(const std::string& client, const Caller& caller, const protocol::Envelope& m,
                          std::uint64_t lease_id, std::string_view otherwise);
  // Tells the lease's watchers and writes the audit line; `actor`: who caused it, when not the
  // coordinator.
  void lease_event(DevLease& lease, protocol::LeaseEventKind kind, std::string message, const JobTable& jobs,
                   const Caller* actor = nullptr);
  // Gives back the chips a developer lease holds in the scheduler, except those of its jobs that
  // still run: they keep theirs as leases of their own until they end, handed the lease's
  // scheduler lease this returns (a follow-up's `hand_over`); a pending request is cancelled.
  std::optional<scheduler::LeaseId> release_lease_chips(const DevLease& lease, TimeMs now);
  scheduler::Request lease_request(const DevLease& lease);
  Status resubmit_lease(DevLease& lease, TimeMs now);
  protocol::LeaseEvent status_event(const DevLease& lease, TimeMs now) const;
  // A node of a granted lease was lost: the lease is queued again keeping its age, or ends.
  std::optional<LeaseFollowUp> lease_node_lost(DevLease& lease, const std::string& node_id, TimeMs now,
                                               const JobTable& jobs);
  // The developer lease a decision is about, if it still holds `lease`.
  DevLease* lease_holding(std::uint64_t lease_id, std::optional<scheduler::LeaseId> lease);

  CoreContext ctx_;
  DevLeases dev_leases_;
};

}  // namespace kiln::coordinator

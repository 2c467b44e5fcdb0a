// The life of developer leases (kiln lease) as the core drives it, over DevLeases (dev_leases.h):
// requests, releases, watches, expiry, revocation at the end of a notice, recovery after a
// restart, nodes lost under a lease, the scheduler's decisions about lease requests, and the
// dispatch of the jobs that run on a lease's chips (whose attempts the job table keeps).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
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
  LeaseLifecycle(CoreContext context, JobTable& jobs)
      : ctx_(context),
        jobs_(jobs),
        dev_leases_(context.sink, context.knobs.max_ended_leases_kept, context.knobs.max_lease_watches) {}

  // ---- recovery: puts a lease from the store back, pending ones in the queue, granted ones
  // on their chips; then the ended ones beyond those kept are forgotten.
  void recover(LeaseRecord record, TimeMs now);
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

  // ---- clients
  // A request refused is answered now; one taken is answered by answer_request.
  std::optional<LeaseAsked> request(const std::string& client, const Caller& caller, const protocol::Envelope& m,
                                    const protocol::RequestLease& request, TimeMs now);
  // Granted, or pending with why and when it should start.
  void answer_request(const LeaseAsked& asked, TimeMs now);
  void release(const std::string& client, const Caller& caller, const protocol::Envelope& m,
               const protocol::ReleaseLease& release, TimeMs now);
  void watch(const std::string& client, const Caller& caller, const protocol::Envelope& m,
             const protocol::WatchLease& watch, TimeMs now);

  // ---- ticks
  // Expiry, and revocation at the end of the grace, of developer leases whose jobs still run:
  // done here, before the scheduler's own timers would free those jobs' chips.
  void end_due(TimeMs now);
  void answer_watches(TimeMs now);

  // ---- nodes and jobs
  // A lease given back its chips after a coordinator restart, on a node the scheduler already
  // counted as lost: the scheduler ends nothing, so it is queued again here.
  void node_lost(const std::string& node_id, TimeMs now);
  // Jobs inside a developer lease run on its chips, first come first served.
  void dispatch_jobs(TimeMs now);

  // ---- the scheduler's decisions about a lease's request
  void granted(const scheduler::LeaseGranted& granted, std::uint64_t lease_id, TimeMs now);
  void preempt_notice(const scheduler::PreemptNotice& notice, std::uint64_t lease_id, TimeMs grace_ms,
                      const std::string& reason, TimeMs now);
  void revoked(const scheduler::Revoke& revoke, std::uint64_t lease_id);
  void requeued(const scheduler::Requeued& requeued, std::uint64_t lease_id, TimeMs now);
  void lease_lost(const scheduler::LeaseLost& lost, std::uint64_t lease_id, TimeMs now);
  void lease_expired(const scheduler::LeaseExpired& expired, std::uint64_t lease_id, TimeMs now);

 private:
  // The caller's lease (or any, for ops and admin); otherwise replies why not and gives nullptr.
  DevLease* callers_lease(const std::string& client, const Caller& caller, const protocol::Envelope& m,
                          std::uint64_t lease_id, std::string_view otherwise);
  // Tells the lease's watchers and writes the audit line; `actor`: who caused it, when not the
  // coordinator.
  void lease_event(DevLease& lease, protocol::LeaseEventKind kind, std::string message,
                   const Caller* actor = nullptr);
  void end_lease(DevLease& lease, const std::string& why, TimeMs now, const Caller* actor = nullptr);
  // Gives back the chips a developer lease holds in the scheduler, except those of its jobs that
  // still run: they keep theirs as leases of their own until they end.
  void release_lease_chips(DevLease& lease, TimeMs now);
  scheduler::Request lease_request(const DevLease& lease);
  Status resubmit_lease(DevLease& lease, TimeMs now);
  protocol::LeaseEvent status_event(const DevLease& lease, TimeMs now) const;
  // A node of a granted lease was lost: the lease is queued again keeping its age.
  void lease_node_lost(DevLease& lease, const std::string& node_id, TimeMs now);
  // The developer lease a decision is about, if it still holds `lease`.
  DevLease* lease_holding(std::uint64_t lease_id, std::optional<scheduler::LeaseId> lease);

  CoreContext ctx_;
  JobTable& jobs_;
  DevLeases dev_leases_;
};

}  // namespace kiln::coordinator

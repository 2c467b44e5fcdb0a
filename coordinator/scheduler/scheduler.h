// The scheduler core: who gets which chips, when. Pure and sans-IO, in the style of
// quinn-proto's Endpoint: inputs are method calls carrying `now`, outputs are actions the shell
// polls, and `next_deadline()` says when to call `on_tick` if nothing else happens. No clocks,
// sockets, files or randomness: the coordinator shell and the fleet simulator drive the same code.
#pragma once

#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "common/time.h"
#include "coordinator/scheduler/knobs.h"
#include "coordinator/scheduler/types.h"

namespace kiln::scheduler {

class Scheduler {
 public:
  explicit Scheduler(SchedulerKnobs knobs);
  ~Scheduler();
  Scheduler(Scheduler&&) noexcept;
  Scheduler& operator=(Scheduler&&) noexcept;
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // --- inputs ---------------------------------------------------------------------------------
  // Adds a node, or updates its revision and chip topology (refused while it holds leases and
  // the chips would change). A new node starts `up`.
  Status upsert_node(const NodeInfo& node, TimeMs now);
  // Only `up` nodes get new leases. `lost` ends every lease on the node (LeaseLost). `reason`
  // and `owner` are kept with the node (quarantine: why, and who brings it back).
  Status set_node_state(std::string_view node, NodeState state, std::string reason,
                        std::string owner, TimeMs now);
  Status submit(const Request& request, TimeMs now);
  // Re-establishes a lease that was running before the holder (the coordinator) restarted: the
  // request holds exactly these chips from `start_ms`, without a LeaseGranted action. Refused
  // when a node or chip is unknown or already leased, or the request is already known.
  Result<LeaseId> restore_lease(const Request& request, const std::vector<Placement>& placement,
                                TimeMs start_ms, TimeMs now);
  // Ends a lease (its request is complete) and, in the same step, gives some of its chips to
  // requests that already run on them: jobs inside a developer's lease that are still stopping
  // when the lease ends keep their chips until they end.
  struct Handover {
    Request request;
    std::vector<Placement> placement;
    TimeMs start_ms = 0;
  };
  Result<std::vector<LeaseId>> transfer_lease(LeaseId lease, const std::vector<Handover>& handovers, TimeMs now);
  // Withdraws a pending request, or ends its lease if it is running.
  Status cancel(RequestId request, TimeMs now);
  // The holder is done with the lease; its request is complete.
  Status release(LeaseId lease, TimeMs now);
  // The workload checkpointed. Under a preemption notice this lets the lease go at once and the
  // request is requeued from this checkpoint; otherwise it records how little work a preemption
  // would now lose.
  Status checkpoint_ack(LeaseId lease, TimeMs now);
  // Timers: grace deadlines, lease expiry, reservation windows opening, preemption targets.
  void on_tick(TimeMs now);

  // --- outputs --------------------------------------------------------------------------------
  std::optional<Action> poll_action();
  std::optional<TimeMs> next_deadline() const;

  // Why a request is pending and when it is expected to start; pure, changes nothing.
  Explanation explain(RequestId request, TimeMs now) const;
  // The same for the first `limit` pending requests (all by default) at once, in scheduling order;
  // pure, changes nothing. The pass reads no request after them: later ones never change what
  // an earlier one is told, and a page of `kiln queue` costs its page, not the queue.
  std::vector<Explanation> explain_queue(TimeMs now,
                                         std::size_t limit = std::numeric_limits<std::size_t>::max()) const;

  // --- views ----------------------------------------------------------------------------------
  const SchedulerKnobs& knobs() const;
  std::vector<NodeView> nodes() const;
  std::optional<NodeView> node(std::string_view id) const;
  std::vector<LeaseView> leases() const;
  std::vector<RequestId> pending() const;  // in scheduling order
  bool is_pending(RequestId request) const;
  std::optional<LeaseId> lease_of(RequestId request) const;
  // The chips of a node that leases hold (chip index, holding request).
  std::vector<std::pair<int, RequestId>> leased_chips(std::string_view node) const;
  // The nodes where a lease was granted, ended or handed over since the last call.
  std::vector<std::string> take_nodes_with_lease_changes();
  // Internal consistency: no chip in two leases, every known request either pending or
  // holding exactly one live lease. Meant to run after every step of a simulation.
  Status check_invariants() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kiln::scheduler

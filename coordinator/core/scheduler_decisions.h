// The core's side of the scheduler's decisions: it tells the scheduler (through the bridge) what
// each node can take, carries the scheduler's decisions to the room of their owner (the job
// table for a job's request, the developer leases for a lease's), keeps each node's count of
// chips in use, and answers what people ask of the queue (`kiln queue`, `kiln queue --why`).
// It keeps no state of its own: the bridge holds the scheduler and whom each request is for.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/protocol/messages.h"
#include "coordinator/core/core_context.h"
#include "coordinator/core/records.h"
#include "coordinator/scheduler/scheduler.h"

namespace kiln::coordinator {

class JobTable;
class LeaseLifecycle;

class SchedulerDecisions {
 public:
  SchedulerDecisions(CoreContext context, JobTable& jobs, LeaseLifecycle& leases)
      : ctx_(context), jobs_(jobs), leases_(leases) {}

  // Carries out what the scheduler decided, until it has nothing more to say; then the jobs of
  // granted developer leases are dispatched and the nodes' chip counts brought up to date.
  void pump(TimeMs now);

  // Tells the scheduler what each node can take now: up, draining (asked to, or waiting for
  // maintenance), quarantined, or lost (no session).
  void sync_node_states(TimeMs now);
  // A node from the store: the scheduler learns it as lost until its agent says hello.
  void recovered_node(const NodeRecord& node, TimeMs now);
  // A hello reported the node's chips: until the scheduler has taken them the node takes no
  // new work (sync_node_states).
  void inventory_reported(const NodeRecord& node);
  void upsert_node(const NodeRecord& node, TimeMs now);
  // The chips in use on each node: those of active jobs and of the scheduler's leases, except
  // those held while a stopped attempt goes.
  void refresh_chip_counts();
  // A node whose count of chips in use disagrees with a count over every job and lease, if any
  // (for the simulation's invariants).
  std::optional<std::string> chip_count_error() const;

  std::string explanation_text(const scheduler::Explanation& explanation, TimeMs now) const;
  void queue_why(const std::string& client, std::uint64_t corr, const protocol::QueueWhy& why, TimeMs now) const;
  // The queue in scheduling order (queue_listing.cpp).
  protocol::QueueList queue_list(const protocol::ListQueue& request, TimeMs now) const;

  // The nodes the scheduler was told a state of that is no longer theirs, though not marked
  // changed (SchedulerBridge::node_changed): none, unless a change of a node went unmarked. Reads
  // every node: for the simulation's invariants and the tests, never per message.
  std::vector<std::string> nodes_out_of_sync() const;

 private:
  struct NodeStateToTell {
    scheduler::NodeState state;
    std::string reason;
    std::string owner;
  };
  // What the node can take now: lost (no session), quarantined, draining (asked to, registering
  // its chips, stopping jobs, or waiting for maintenance), or up.
  NodeStateToTell state_to_tell(const NodeRecord& node) const;
  void set_scheduler_node_states(TimeMs now);
  scheduler::NodeInfo scheduler_node_info(const NodeRecord& node) const;
  protocol::QueueExplanation explain(const protocol::QueueWhy& why, TimeMs now) const;
  // Up to `limit` of those explained requests that are a job or a lease, `more` if others follow.
  protocol::QueueList queue_page(const std::vector<scheduler::Explanation>& explanations, std::size_t limit) const;
  // Why a preemption notice was given, in words: for whom.
  std::string preempted_for_text(scheduler::RequestId demand) const;

  CoreContext ctx_;
  JobTable& jobs_;
  LeaseLifecycle& leases_;
  // Nodes recovered from the store, whose saved count of chips in use is counted again.
  std::set<std::string> recount_;
};

}  // namespace kiln::coordinator

// The core's side of the scheduler's decisions: it tells the scheduler (through the bridge) what
// each node can take, hands the router the scheduler's next decision with what its owner's room
// needs to carry it out (the router gives it to the job table for a job's request, to the lease
// lifecycle for a lease's), keeps each node's count of chips in use, and answers what people ask
// of the queue (`kiln queue`, `kiln queue --why`). It holds no other room: what it reads of the
// jobs and leases is handed to each call. Its own state is the nodes whose chips it counts again;
// the bridge holds the scheduler and whom each request is for.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/protocol/messages.h"
#include "coordinator/core/active_jobs.h"
#include "coordinator/core/core_context.h"
#include "coordinator/core/records.h"
#include "coordinator/scheduler/scheduler.h"

namespace kiln::coordinator {

class JobTable;
class LeaseLifecycle;

// A decision of the scheduler about a job's or a developer lease's request, for the room of its
// owner, which the router hands it to.
struct OwnedDecision {
  scheduler::Action action;
  RequestOwner owner;  // a job or a developer lease: the bridge keeps those about stop holds
  // A preemption notice: the grace left on the core's clock, and for whom, in words.
  TimeMs grace_ms = 0;
  std::string preempted_for;
};

// The scheduler's explanation of a pending request in words, its expected start on the core's
// clock (`kiln queue --why`, a pending lease).
std::string explanation_text(const CoreContext& ctx, const scheduler::Explanation& explanation, TimeMs now);

class SchedulerDecisions {
 public:
  explicit SchedulerDecisions(CoreContext context) : ctx_(context) {}

  // The scheduler's next decision about a job or a lease, the nodes' states told to it first;
  // nullopt when it has nothing more to say. The router carries each out (CoordinatorCore::pump),
  // then has the jobs of granted developer leases dispatched and the chips counted again.
  std::optional<OwnedDecision> next_decision(TimeMs now, const JobTable& jobs);

  // Tells the scheduler what each node can take now: up, draining (asked to, or waiting for
  // maintenance), quarantined, or lost (no session).
  void sync_node_states(TimeMs now, const JobTable& jobs);
  // A node from the store: the scheduler learns it as lost until its agent says hello.
  void recovered_node(const NodeRecord& node, TimeMs now);
  // A hello reported the node's chips: until the scheduler has taken them the node takes no
  // new work (sync_node_states).
  void inventory_reported(const NodeRecord& node);
  void upsert_node(const NodeRecord& node, TimeMs now);
  // The chips in use on each node: those of active jobs and of the scheduler's leases, except
  // those held while a stopped attempt goes. `jobs_moved`: the nodes where a job was placed or
  // left since the last count (ActiveJobIndex::take_nodes_changed).
  void refresh_chip_counts(std::set<std::string> jobs_moved, const ActiveJobIndex& jobs);
  // A node whose count of chips in use disagrees with a count over every job and lease, if any
  // (for the simulation's invariants).
  std::optional<std::string> chip_count_error(const JobTable& jobs) const;

  void queue_why(const std::string& client, std::uint64_t corr, const protocol::QueueWhy& why, TimeMs now,
                 const JobTable& jobs, const LeaseLifecycle& leases) const;
  // The queue in scheduling order (queue_listing.cpp).
  protocol::QueueList queue_list(const protocol::ListQueue& request, TimeMs now, const JobTable& jobs,
                                 const LeaseLifecycle& leases) const;

  // The nodes the scheduler was told a state of that is no longer theirs, though not marked
  // changed (SchedulerBridge::node_changed): none, unless a change of a node went unmarked. Reads
  // every node: for the simulation's invariants and the tests, never per message.
  std::vector<std::string> nodes_out_of_sync(const JobTable& jobs) const;

 private:
  struct NodeStateToTell {
    scheduler::NodeState state;
    std::string reason;
    std::string owner;
  };
  // What the node can take now: lost (no session), quarantined, draining (asked to, registering
  // its chips, stopping jobs, or waiting for maintenance), or up.
  NodeStateToTell state_to_tell(const NodeRecord& node, const JobTable& jobs) const;
  void set_scheduler_node_states(TimeMs now, const JobTable& jobs);
  scheduler::NodeInfo scheduler_node_info(const NodeRecord& node) const;
  protocol::QueueExplanation explain(const protocol::QueueWhy& why, TimeMs now, const JobTable& jobs,
                                     const LeaseLifecycle& leases) const;
  // Up to `limit` of those explained requests that are a job or a lease, `more` if others follow.
  protocol::QueueList queue_page(const std::vector<scheduler::Explanation>& explanations, std::size_t limit,
                                 const JobTable& jobs, const LeaseLifecycle& leases) const;
  // Why a preemption notice was given, in words: for whom.
  std::string preempted_for_text(scheduler::RequestId demand, const JobTable& jobs) const;

  CoreContext ctx_;
  // Nodes recovered from the store, whose saved count of chips in use is counted again.
  std::set<std::string> recount_;
};

}  // namespace kiln::coordinator

// The coordinator core's side of the scheduler core: it owns the scheduler, allocates the ids of
// its requests and knows whom each one is for (a job, a developer lease, or the chips of an
// attempt being stopped), keeps the scheduler's clock, tells it what each node can take, and
// hands the core the scheduler's decisions together with their owner.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <variant>
#include <vector>

#include "common/time.h"
#include "coordinator/core/actions.h"
#include "coordinator/scheduler/scheduler.h"

namespace kiln::coordinator {

namespace request_owner {
struct Job {
  std::uint64_t job_id = 0;
};
struct DevLease {
  std::uint64_t lease_id = 0;
};
// The chips of an attempt being stopped on a node (revoked at the end of its grace, timed out,
// or cancelled when its node came back from a partition), held until the attempt is gone so
// that nothing new starts on them meanwhile. An attempt may be stopping on two nodes at once.
struct StopHold {
  std::uint64_t job_id = 0;
  std::string node_id;
};
}  // namespace request_owner

using RequestOwner = std::variant<request_owner::Job, request_owner::DevLease, request_owner::StopHold>;

// How messages name a request's owner: "job 12", "lease L3", "the stopping attempt of job 12 on
// n01".
std::string describe(const RequestOwner& owner);

// A decision of the scheduler about a job's or a developer lease's request.
struct SchedulerDecision {
  scheduler::Action action;
  RequestOwner owner;
};

class SchedulerBridge {
 public:
  // `now` is on the core's clock: the scheduler's starts at midnight of that day, so the times
  // in its explanations read as the time of day.
  SchedulerBridge(const scheduler::SchedulerKnobs& knobs, TimeMs now, ActionSink& sink);

  scheduler::Scheduler& scheduler() { return scheduler_; }
  const scheduler::Scheduler& scheduler() const { return scheduler_; }
  TimeMs to_scheduler_time(TimeMs core_ms) const { return core_ms - clock_origin_ms_; }
  TimeMs to_core_time(TimeMs scheduled_ms) const { return scheduled_ms + clock_origin_ms_; }

  // A job's and a developer lease's one request, allocated at first use.
  scheduler::RequestId request_of(const request_owner::Job& job);
  scheduler::RequestId request_of(const request_owner::DevLease& lease);
  std::optional<scheduler::RequestId> find_request(const request_owner::Job& job) const;
  std::optional<scheduler::RequestId> find_request(const request_owner::DevLease& lease) const;
  // Whom a request is for; nullopt for an id the bridge never gave out.
  std::optional<RequestOwner> owner_of(scheduler::RequestId request) const;

  // Holds of stopping attempts: a new request for each, live until ended.
  scheduler::RequestId new_stop_hold(std::uint64_t job_id, const std::string& node_id);
  std::optional<scheduler::RequestId> stop_hold_of(std::uint64_t job_id, const std::string& node_id) const;
  // The attempt is gone: its held chips are free again.
  void end_stop_hold(scheduler::RequestId request, TimeMs now);
  // The hold could not be taken: the request is dropped without ever reaching the scheduler.
  void drop_stop_hold(scheduler::RequestId request) { forget_stop_hold(request); }
  // The jobs whose stopping attempts hold chips on the node, in the order their holds were made:
  // what each heartbeat from the node checks, read from an index by node, not from every hold.
  std::vector<std::uint64_t> stop_held_jobs_on(const std::string& node_id) const;
  bool is_stop_hold(scheduler::RequestId request) const;
  // What the index of holds by node and job gets wrong, if anything (the simulation checks).
  std::optional<std::string> stop_hold_index_error() const;

  // The next decision about a job or a developer lease. Decisions about stop holds are the
  // bridge's own bookkeeping: a hold the scheduler ended is forgotten.
  std::optional<SchedulerDecision> poll_decision();

  // What a node can take, as last told to the scheduler; told again only when it changes.
  void set_node_state(const std::string& node_id, scheduler::NodeState state, std::string reason, std::string owner,
                      TimeMs now);
  // The scheduler's view of the node is stale: the next state is told whatever it is.
  void forget_node_state(const std::string& node_id) {
    node_states_.erase(node_id);
    node_changed(node_id);
  }
  // What the node can take may have changed (its record, its session, the jobs stopping or the
  // maintenance waiting on it): the next sync works it out again. A sync looks at these nodes
  // only, so a heartbeat costs the same with 10 nodes or 10,000.
  void node_changed(const std::string& node_id) { changed_nodes_.insert(node_id); }
  std::set<std::string> take_changed_nodes() { return std::exchange(changed_nodes_, {}); }
  bool changed(const std::string& node_id) const { return changed_nodes_.count(node_id) != 0; }
  // The state the scheduler was last told of the node, if any.
  std::optional<scheduler::NodeState> told_state(const std::string& node_id) const {
    auto it = node_states_.find(node_id);
    if (it == node_states_.end()) return std::nullopt;
    return it->second;
  }

  // The chips of a node's latest hello: until the scheduler has taken them the node takes no new
  // work, and the upsert is tried again at every sync.
  void inventory_changed(const std::string& node_id) {
    inventory_pending_.insert_or_assign(node_id, "");
    node_changed(node_id);
  }
  // Why the chips of the node's latest hello are not scheduled yet (empty: not tried yet), or
  // nullptr when they are.
  const std::string* inventory_pending(const std::string& node_id) const;
  std::vector<std::string> nodes_with_inventory_pending() const;
  // Whether the scheduler's chips of the node differ from these (or it does not know the node).
  bool knows_other_chips(const scheduler::NodeInfo& info) const;
  bool node_holds_leases(const std::string& node_id) const;
  void upsert_node(const scheduler::NodeInfo& info, TimeMs now);

 private:
  void forget_stop_hold(scheduler::RequestId request);

  ActionSink& sink_;
  scheduler::Scheduler scheduler_;
  TimeMs clock_origin_ms_ = 0;
  scheduler::RequestId next_request_ = 1;
  std::map<scheduler::RequestId, RequestOwner> owners_;  // every id given out, kept for late decisions
  std::map<std::uint64_t, scheduler::RequestId> job_requests_;
  std::map<std::uint64_t, scheduler::RequestId> lease_requests_;
  std::map<scheduler::RequestId, request_owner::StopHold> stop_holds_;  // the live ones
  std::set<std::tuple<std::string, scheduler::RequestId, std::uint64_t>> stop_holds_by_node_;  // node, hold, job
  std::map<std::string, scheduler::NodeState> node_states_;
  std::map<std::string, std::string> inventory_pending_;
  std::set<std::string> changed_nodes_;
};

}  // namespace kiln::coordinator

// Vocabulary of the scheduler core: nodes as agents report them, requests, leases, and the
// actions the core asks its shell to carry out. Plain data, no behaviour.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "common/enum_names.h"
#include "common/time.h"

namespace kiln::scheduler {

using RequestId = std::uint64_t;
using LeaseId = std::uint64_t;

// Highest priority first; the numeric value is the rank (smaller wins).
enum class RequestClass : int { release = 0, presubmit = 1, bisect = 2, nightly = 3, experiment = 4 };
constexpr EnumTable<RequestClass, 5> enum_names(RequestClass) {
  return {{
      {RequestClass::release, "release"},
      {RequestClass::presubmit, "presubmit"},
      {RequestClass::bisect, "bisect"},
      {RequestClass::nightly, "nightly"},
      {RequestClass::experiment, "experiment"},
  }};
}
constexpr auto kAllClasses = enum_values<RequestClass>();
constexpr int kClassCount = static_cast<int>(kAllClasses.size());

inline std::string_view to_string(RequestClass value) { return enum_name(value); }
inline std::optional<RequestClass> parse_request_class(std::string_view name) {
  return enum_from_name<RequestClass>(name);
}
constexpr int rank(RequestClass cls) { return static_cast<int>(cls); }

enum class NodeState { up, draining, quarantined, lost };
constexpr EnumTable<NodeState, 4> enum_names(NodeState) {
  return {{
      {NodeState::up, "up"},
      {NodeState::draining, "draining"},
      {NodeState::quarantined, "quarantined"},
      {NodeState::lost, "lost"},
  }};
}
inline std::string_view to_string(NodeState value) { return enum_name(value); }

// One chip as the agent reports it (hwloc): its index on the node and where it sits.
struct ChipInfo {
  int index = 0;
  int numa_node = 0;
  int switch_group = 0;
};

struct NodeInfo {
  std::string id;        // "n07"
  std::string revision;  // hardware revision, "a"
  std::vector<ChipInfo> chips;
};

struct Request {
  RequestId id = 0;
  // How explanations and errors name it ("job 12", "lease L3"); its owner knows it by that name,
  // not by the id. Empty: "request <id>".
  std::string name;
  RequestClass cls = RequestClass::experiment;
  // Either `chips` (1, 2, 4 or 8) on one node, or `nodes` > 0 whole nodes, all or nothing.
  int chips = 1;
  int nodes = 0;
  std::optional<std::string> revision;  // nullopt: any revision
  DurationMs expected_duration_ms = 0;
  std::optional<TimeMs> deadline_ms;
  // Earliest start: a release qualification reserves its window ahead of time this way.
  std::optional<TimeMs> not_before_ms;
  // Overrides the class's target start latency from the knobs.
  std::optional<DurationMs> target_start_latency_ms;
  // Explicit lease length (developer leases, `--hours`); otherwise expected duration x slack.
  std::optional<DurationMs> lease_ms;
  // How often the workload checkpoints; 0 = never. Tells the core how much work a preemption loses.
  DurationMs checkpoint_interval_ms = 0;
  TimeMs submit_ms = 0;  // original submission: a requeued request keeps its age
  // Runs only on this node (`kiln submit --node`, maintenance).
  std::optional<std::string> node;
  // Maintenance (diagnostics, installs) on its pinned node: it may start while the node is
  // draining or quarantined, it is outside the quotas, never preempts and is never preempted.
  bool maintenance = false;
};

struct Placement {
  std::string node;
  std::vector<int> chips;  // chip indices on that node
};

// --- actions, polled by the shell -----------------------------------------------------------

struct LeaseGranted {
  LeaseId lease = 0;
  RequestId request = 0;
  std::vector<Placement> placement;
  TimeMs expires_at_ms = 0;
  bool borrowed = false;  // granted beyond its class's quota on idle capacity; reclaimable
};

// The holder should checkpoint and let go; at `grace_deadline_ms` the lease is revoked.
struct PreemptNotice {
  LeaseId lease = 0;
  RequestId request = 0;
  RequestId preempted_for = 0;
  TimeMs grace_deadline_ms = 0;
};

struct Revoke {
  LeaseId lease = 0;
  RequestId request = 0;
};

// A preempted request is back in the queue with its original age.
struct Requeued {
  RequestId request = 0;
  LeaseId previous_lease = 0;
  DurationMs remaining_ms = 0;  // work left after its last checkpoint
};

// The node under the lease was lost; the lease is gone and the owner decides whether to requeue.
struct LeaseLost {
  LeaseId lease = 0;
  RequestId request = 0;
  std::string node;
};

struct LeaseExpired {
  LeaseId lease = 0;
  RequestId request = 0;
};

using Action = std::variant<LeaseGranted, PreemptNotice, Revoke, Requeued, LeaseLost, LeaseExpired>;

// Why a request is still pending and when it is expected to start.
struct Explanation {
  RequestId request = 0;
  bool pending = false;
  std::vector<std::string> reasons;
  std::optional<TimeMs> expected_start_ms;  // nullopt: no eligible capacity in sight
  std::string text() const;                 // reasons joined by "; " plus the expected start
};

// A live lease as `kiln leases` shows it.
struct LeaseView {
  LeaseId lease = 0;
  RequestId request = 0;
  RequestClass cls = RequestClass::experiment;
  std::vector<Placement> placement;
  TimeMs start_ms = 0;
  TimeMs expected_end_ms = 0;
  TimeMs expires_at_ms = 0;
  bool borrowed = false;
  std::optional<TimeMs> grace_deadline_ms;
};

struct NodeView {
  NodeInfo info;
  NodeState state = NodeState::up;
  std::string reason;  // for quarantine: why, as the caller recorded it
  std::string owner;   // for quarantine: who owns getting the node back
  TimeMs state_since_ms = 0;
};

// "15s", "4m", "2h05m": a wait or a grace as people read it (rounded up below an hour).
std::string human_duration(DurationMs ms);

// "HH:MM" on the core's clock counted from midnight of day 0 ("d1 03:00" on later days).
std::string format_clock(TimeMs t);

}  // namespace kiln::scheduler

// The scheduler's records of nodes, leases and requests, and what a planning pass decides about
// them. Internal to the scheduler core (scheduler_impl.h).
#pragma once

#include <algorithm>
#include <deque>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include <fmt/format.h>

#include "coordinator/scheduler/scheduler.h"

namespace kiln::scheduler {

inline constexpr TimeMs kNever = std::numeric_limits<TimeMs>::max();
// An overrunning lease is assumed to end a little later, never "now": its chips are not free.
inline constexpr DurationMs kOverrunStepMs = kMinuteMs;
// Victim search enumerates subsets of the preemptible leases on one node; nodes hold at most a
// handful, this bounds the work if one ever holds more.
inline constexpr std::size_t kMaxVictimCandidates = 12;
// Marks a chip granted earlier in the same planning pass.
inline constexpr LeaseId kPlannedLease = std::numeric_limits<LeaseId>::max();
// The end filed for a free chip (nodes_by_end): before any moment a pass sees.
inline constexpr TimeMs kFreeNow = std::numeric_limits<TimeMs>::min();

// A filing by revision as a request may read it: its revision's entry alone, if it names one.
template <typename ByRevision>
struct RevisionsRead {
  typename ByRevision::const_iterator first, last;
  auto begin() const { return first; }
  auto end() const { return last; }
};
template <typename ByRevision>
RevisionsRead<ByRevision> revisions_read(const ByRevision& filing, const std::optional<std::string>& revision) {
  if (!revision) return {filing.begin(), filing.end()};
  auto [first, last] = filing.equal_range(*revision);
  return {first, last};
}

struct ChipRef {
  std::size_t node = 0;
  std::size_t pos = 0;  // position in NodeInfo::chips
  auto operator<=>(const ChipRef&) const = default;
};

struct NodeRec {
  NodeInfo info;
  NodeState state = NodeState::up;
  std::string reason;
  std::string owner;
  TimeMs since_ms = 0;
  std::vector<LeaseId> chip_lease;  // 0 = free
  // The request whose claim holds the chip (0: none): kept with the claims (set_claim,
  // clear_claim), so that the nodes filed for preemption leave claimed chips out.
  std::vector<RequestId> chip_claim;
};

struct LeaseRec {
  LeaseId id = 0;
  RequestId request = 0;
  RequestClass cls = RequestClass::experiment;
  std::string revision;
  std::vector<ChipRef> chips;
  TimeMs start_ms = 0;
  TimeMs expected_end_ms = 0;
  TimeMs expiry_ms = 0;
  DurationMs work_ms = 0;  // the request's remaining work when this lease started
  bool borrowed = false;
  std::optional<TimeMs> grace_deadline_ms;
  RequestId preempted_for = 0;
  TimeMs last_ack_ms = 0;
  DurationMs checkpoint_interval_ms = 0;
};

// When a lease's chips come free as planned: at its grace deadline if it was given notice, else at
// its expected end. A pass sees an overrunning lease end later still (PassView::fresh).
inline TimeMs planned_end(const LeaseRec& l) { return l.grace_deadline_ms.value_or(l.expected_end_ms); }

// Chips a preempting request holds on to while its victims wind down.
struct Claim {
  std::vector<ChipRef> chips;
  std::vector<LeaseId> victims;
  TimeMs ready_ms = 0;
  std::int64_t lost_chip_ms = 0;  // work the notices will destroy
};

struct RequestRec {
  Request req;
  DurationMs remaining_ms = 0;
  std::optional<LeaseId> lease;
  std::set<RequestId> preempted_by;  // demands that already preempted it: never again
  std::optional<Claim> claim;
};

// Until when a pass at `now` holds the claimed chips for their request: from the end of its victims'
// grace (or now, if that passed) for its work.
inline TimeMs claim_end(const RequestRec& r, TimeMs now) { return std::max(r.claim->ready_ms, now) + r.remaining_ms; }

// Per-pass picture of one chip.
struct ChipPlan {
  LeaseId lease = 0;
  TimeMs busy_until = 0;
  RequestId claimed_by = 0;
  // While claimed_by holds the chip for a claim of an earlier pass: claim_end. No other request
  // can reserve the chip before then.
  TimeMs claim_end = 0;
  TimeMs resv_start = kNever;  // earliest reservation on the chip: backfill must end by then
  TimeMs resv_end = 0;         // latest reservation end: a new reservation queues after it
  RequestId resv_owner = 0;
};

struct Grant {
  RequestId request = 0;
  std::vector<ChipRef> chips;
  bool borrowed = false;
};

struct Preemption {
  RequestId request = 0;
  Claim claim;
};

struct PendingInfo {
  std::optional<TimeMs> expected_start;
  std::vector<std::string> reasons;
};

}  // namespace kiln::scheduler

// The scheduler's state, shared by the files of the scheduler core: scheduler.cpp (the public
// surface, applying decisions and keeping the indexes with each change), scheduler_pass.cpp (the
// planning pass), scheduler_placement.cpp (where a request fits now or later),
// scheduler_preemption.cpp (whose notice lets it start), scheduler_explanation.cpp (why it
// waits), scheduler_invariants.cpp (the audit against a full scan). The indexes are classes of
// their own (scheduler_queue.h, scheduler_node_filings.h, scheduler_indexes.h), each able to check
// itself against a scan of the records. Internal: only those files include it.
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
#include "coordinator/scheduler/scheduler_indexes.h"
#include "coordinator/scheduler/scheduler_node_filings.h"
#include "coordinator/scheduler/scheduler_queue.h"
#include "coordinator/scheduler/scheduler_records.h"

namespace kiln::scheduler {



// The planning pass's picture of the chips. A node's row is made from its leases and the claims
// of earlier passes the first time the pass reads or marks it, so a pass that looks at a few nodes
// of a large fleet costs that much, not the fleet, however many claims stand.
class PassView {
 public:
  PassView(const std::vector<NodeRec>& nodes, const std::map<LeaseId, LeaseRec>& leases,
           const std::map<RequestId, RequestRec>& requests, TimeMs now)
      : nodes_(&nodes), leases_(&leases), requests_(&requests), now_(now), slot_(nodes.size(), 0) {}

  // The node's row, made on first use; references to it stay valid for the whole pass.
  const std::vector<ChipPlan>& operator[](std::size_t node) const { return row(node); }
  std::vector<ChipPlan>& operator[](std::size_t node) { return row(node); }
  bool touched(std::size_t node) const { return slot_[node] != 0; }
  // The nodes whose row was made, in the order they were: indexes stay valid as rows are added.
  const std::vector<std::size_t>& touched_nodes() const { return touched_; }
  // One chip as the pass sees it, without making its node's row.
  ChipPlan chip(std::size_t node, std::size_t pos) const;
  // The chips free now on a node the pass has not read yet, where each can serve any request:
  // only a row that was made carries claims, reservations or this pass's grants. Nothing once
  // the row is made.
  std::optional<int> untouched_free_chips(std::size_t node) const;

 private:
  std::vector<ChipPlan>& row(std::size_t node) const;
  ChipPlan fresh(std::size_t node, std::size_t pos) const;

  const std::vector<NodeRec>* nodes_;
  const std::map<LeaseId, LeaseRec>* leases_;
  const std::map<RequestId, RequestRec>* requests_;
  TimeMs now_;
  mutable std::vector<std::uint32_t> slot_;  // 1 + the row's index in rows_; 0: not made yet
  mutable std::deque<std::vector<ChipPlan>> rows_;  // a deque: adding a row moves no other
  mutable std::vector<std::size_t> touched_;
};

// What the last planning pass left: while nothing but queued requests that can neither start nor
// hold a reservation has been added since, a new pass would decide nothing new.
struct SettledPass {
  bool valid = false;
  // Its time: expected lease ends pass and reservations move with the clock, so what it
  // settled holds at this moment only.
  TimeMs at_ms = 0;
  // It granted and preempted nothing, so it left everything as it found it: a pass run again at
  // that moment decides the same. (One that granted may not: a second pass over what the first
  // granted can find more that fits.)
  bool decided_nothing = false;
  FreeChips free;
  bool reservations_taken = false;  // kiln: max_reservations requests hold reservations
  bool fifo_blocked = false;        // fifo: the queue's head waits
};

struct Plan {
  std::vector<Grant> grants;
  std::vector<Preemption> preemptions;
  std::map<RequestId, PendingInfo> pending;  // filled when asked for reasons
  TimeMs wake = kNever;
  SettledPass settled;
};

struct ReservationInfo {
  std::set<std::string> nodes;
  TimeMs start = kNever;
  TimeMs end = 0;
};


struct Scheduler::Impl {
  SchedulerKnobs knobs;
  std::vector<NodeRec> nodes;
  std::map<std::string, std::size_t, std::less<>> node_index;
  std::map<RequestId, RequestRec> requests;
  std::map<LeaseId, LeaseRec> leases;
  std::deque<Action> actions;
  LeaseId next_lease = 1;
  TimeMs wake = kNever;
  // Indexes kept with every change, so that no step scans every request or lease: the pending
  // requests in scheduling order and filed for the pass (place_of), the requests holding a claim,
  // each lease's next deadline (grace or expiry), and the chips leased per class and revision.
  RequestQueue queue;
  // The requests holding a claim, by when it lapses (schedule(), lapse_at).
  ClaimLapses claim_lapses;
  // The up nodes with a claimed chip that is free.
  ClaimedFreeNodes claimed_free_nodes;
  PreemptorMentions preemptor_mentions;
  LeaseDeadlines lease_deadlines;
  ChipsInUse chips_in_use;
  std::set<std::size_t> nodes_with_lease_changes;
  FreeChips free_chips;
  // The same, counting only the chips no claim holds: at a pass's start, a bound on what a request
  // with no free chip of its own claim could take. Kept with free_chips and with the claims.
  FreeChips free_unclaimed{true};
  // The node filings, each filed again for a node by recount_free (and the fleet and topology by
  // upsert_node and set_node_state).
  NodesByFree nodes_by_free;
  FleetByRevision fleet_by_revision;
  NodesByEnd nodes_by_end;
  LargestGroups largest_groups;
  NodesForVictims nodes_for_victims;
  // The experiments' leases without notice (NoticeWindows). The pass that reads it files what is
  // due, hence mutable.
  mutable NoticeWindows without_notice;
  SettledPass settled;

  // --- helpers --------------------------------------------------------------------------------

  static std::string name_of(const Request& q) { return q.name.empty() ? fmt::format("request {}", q.id) : q.name; }
  std::string name_of(RequestId id) const {
    auto it = requests.find(id);
    return it == requests.end() ? fmt::format("request {}", id) : name_of(it->second.req);
  }

  bool eligible(const NodeRec& node, const Request& req) const {
    if (req.node && node.info.id != *req.node) return false;
    const bool maintenance_may_enter = req.maintenance && req.node &&
                                       (node.state == NodeState::draining ||
                                        node.state == NodeState::quarantined);
    if (node.state != NodeState::up && !maintenance_may_enter) return false;
    if (req.revision && node.info.revision != *req.revision) return false;
    if (req.nodes == 0 && static_cast<int>(node.info.chips.size()) < req.chips) return false;
    return true;
  }

  bool kiln_policy() const { return knobs.policy == Policy::kiln; }

  // The nodes a request may run on by name: its pinned node alone, else every node.
  template <typename F>
  void for_each_candidate(const Request& q, F&& f) const {
    if (q.node) {
      if (auto it = node_index.find(*q.node); it != node_index.end()) f(it->second);
      return;
    }
    for (std::size_t n = 0; n < nodes.size(); ++n) f(n);
  }

  OrderKey order_key(const Request& q) const {
    if (knobs.policy == Policy::fifo) {
      return {0, std::max(q.submit_ms, q.not_before_ms.value_or(q.submit_ms)), q.id};
    }
    return {rank(q.cls), q.submit_ms, q.id};
  }

  std::vector<RequestId> pending_order() const;

  // --- keeping the indexes ---------------------------------------------------------------------

  // Counts a node's free chips again (FreeChips) and files it again in each node filing: after its
  // chips' leases, its state, its claims or a grace deadline of one of its leases changed. Its
  // leases must be in `leases`.
  void recount_free(std::size_t node);
  // Files the node again where its chips' ends and victims are filed: after a grace deadline of
  // one of its leases changed, which changes no count of free chips.
  void file_ends(std::size_t node);
  // The nodes find_victims reads for `q`, in index order: every node when the knobs ask for it.
  std::vector<std::size_t> victim_nodes(const Request& q) const;

  bool plain(const RequestRec& r) const;
  // A request that may preempt once its target nears, with no window of its own and no claim.
  bool waits_for_target(const RequestRec& r) const {
    return may_preempt(r) && !r.req.not_before_ms && !r.claim;
  }
  // When a request that may preempt becomes due to: its target less the grace.
  TimeMs due_at(const RequestRec& r) const { return *target_time(r) - knobs.grace_ms; }
  // Whether a search for victims for a request of q's shape could find any: a node it may use,
  // under any revision, is filed with an experiment's lease that has had no notice.
  bool may_find_victims(const Request& q) const;
  // Whether enqueue files `r` as a claimant.
  static bool filed_as_claimant(const RequestRec& r) { return r.claim && !r.req.not_before_ms; }
  // When a claim its request has not used lets its chips go: a grace after its victims' grace.
  TimeMs lapse_at(const Claim& claim) const { return claim.ready_ms + knobs.grace_ms; }
  // Whether enqueue files `r` as waiting for its target: it is not due as of the filing's moment.
  bool filed_as_target(const RequestRec& r) const {
    return waits_for_target(r) && due_at(r) > queue.targets_filed_at();
  }
  // Where the planning pass reads a pending request from (RequestQueue).
  QueuePlace place_of(const RequestRec& r) const;
  // Files the requests waiting for their targets as of `now` (RequestQueue::refile_targets).
  void refile_targets(TimeMs now);
  void enqueue(RequestRec& r);
  void dequeue(const RequestRec& r);
  // Every request enters here; it is queued unless it already holds a lease.
  RequestRec& add_request(RequestRec rec);
  // Forgets a request that holds no lease.
  void erase_request(RequestId id);
  void set_claim(RequestRec& r, Claim claim);
  void clear_claim(RequestRec& r);
  // Takes the lease's chips for its request, which leaves the queue.
  void add_lease(LeaseRec l);
  void set_grace_deadline(LeaseRec& l, TimeMs at);

  // A request the last pass's outcome already settles: made at that same moment, it sorts after
  // every queued request, starts no window, preempts nothing and cannot fit in the chips free
  // now, and there is no reservation left for it to hold. Queuing it needs no pass.
  bool settled_without_pass(const RequestRec& r, TimeMs now) const;
  // Whether `r` cannot start now for want of free chips alone (reservations and claims aside).
  bool lacks_free_chips(const RequestRec& r, const FreeChips& free) const;

  // The lease's last periodic checkpoint at `at` (its start before the first).
  static TimeMs last_periodic_checkpoint(const LeaseRec& l, TimeMs at) {
    if (l.checkpoint_interval_ms <= 0 || at <= l.start_ms) return l.start_ms;
    return l.start_ms + (at - l.start_ms) / l.checkpoint_interval_ms * l.checkpoint_interval_ms;
  }
  TimeMs last_checkpoint(const LeaseRec& l, TimeMs at) const {
    return std::max(last_periodic_checkpoint(l, at), l.last_ack_ms);
  }

  // Chip-milliseconds a preemption notice sent now would destroy: the work since the last
  // checkpoint when the grace ends, or nothing if a checkpoint falls inside the grace.
  std::int64_t lost_work(const LeaseRec& l, TimeMs now) const {
    TimeMs deadline = now + knobs.grace_ms;
    TimeMs last = last_checkpoint(l, now);
    if (l.checkpoint_interval_ms > 0 && last + l.checkpoint_interval_ms <= deadline) return 0;
    TimeMs end = std::min(deadline, l.expected_end_ms);
    return static_cast<std::int64_t>(l.chips.size()) * std::max<TimeMs>(0, end - last);
  }

  // When notices to experiments lose nothing: whether one would now (some lease's lost_work is 0),
  // and the next moment a notice to some checkpointing experiment would, its next checkpoint
  // falling inside the grace. A pass reads it once.
  struct FreeNotices {
    bool now = false;
    TimeMs next = kNever;
  };
  FreeNotices free_notices(TimeMs now) const;
  // What the filing of an experiment's lease without notice holds at `at`, and until when.
  NoticeFiled notice_state(const LeaseRec& l, TimeMs at) const;

  std::optional<TimeMs> target_time(const RequestRec& r) const {
    const Request& q = r.req;
    std::optional<TimeMs> target;
    std::optional<DurationMs> latency =
        q.target_start_latency_ms ? q.target_start_latency_ms
                                  : knobs.target_start_latency_ms[rank(q.cls)];
    if (latency) target = q.not_before_ms.value_or(q.submit_ms) + *latency;
    if (q.deadline_ms) {
      TimeMs latest = *q.deadline_ms - r.remaining_ms;
      target = target ? std::min(*target, latest) : latest;
    }
    return target;
  }

  bool may_preempt(const RequestRec& r) const {
    return kiln_policy() && !r.req.maintenance && rank(r.req.cls) < rank(RequestClass::experiment) &&
           target_time(r).has_value();
  }

  static bool preemptible(RequestClass victim, RequestClass demand) {
    // Only experiments are preemptible, and never by another experiment.
    return victim == RequestClass::experiment && rank(demand) < rank(victim);
  }

  std::string node_names(const std::set<std::size_t>& idx) const {
    std::string out;
    for (std::size_t n : idx) {
      if (!out.empty()) out += ",";
      out += nodes[n].info.id;
    }
    return out;
  }

  // --- the planning pass -----------------------------------------------------------------------

  // The pass's view as it starts: chips leased until their leases' expected ends, claimed ones
  // held for their claims.
  PassView initial_view(TimeMs now) const { return PassView(nodes, leases, requests, now); }

  // Topology-aware choice of k chips among `usable` on one node: one NUMA node if possible,
  // else one switch group, else spread. Returns (penalty, chips).
  std::pair<int, std::vector<std::size_t>> choose_chips(std::size_t n,
                                                        const std::vector<std::size_t>& usable,
                                                        int k) const;

  struct QuotaCheck {
    bool allowed = true;
    bool borrowed = false;
  };

  QuotaCheck check_quota(const RequestRec& r, const std::string& revision, int chips,
                         const std::map<std::pair<RequestClass, std::string>, int>& used) const;

  bool chip_usable_now(const ChipPlan& c, RequestId id, TimeMs end) const {
    return c.lease == 0 && (c.claimed_by == 0 || c.claimed_by == id) && end <= c.resv_start;
  }

  // The view's shortcut for nodes the pass has not read, unless the knobs ask every pass to read
  // every node (the tests that hold the shortcuts to the same decisions).
  std::optional<int> untouched_free_chips(const PassView& view, const FreeChips& free, std::size_t node) const {
    // A free chip another request claimed is not usable: such a node is read in full.
    if (knobs.exhaustive_passes || view.touched(node) || claimed_free_nodes.contains(node)) return std::nullopt;
    // Only grants change the pass's count of an up node, and a grant marks the node.
    if (nodes[node].state == NodeState::up) return free.on_node(node);
    return view.untouched_free_chips(node);
  }

  std::optional<Grant> place_now(const RequestRec& r, TimeMs now,
                                 const PassView& view, const FreeChips& free,
                                 const std::map<std::pair<RequestClass, std::string>, int>& used)
      const;
  // place_now for a request of chips on one node, and for one of whole nodes; `claim_nodes`: the
  // nodes of its claim.
  std::optional<Grant> place_chips(const RequestRec& r, TimeMs now, const PassView& view, const FreeChips& free,
                                   const std::map<std::pair<RequestClass, std::string>, int>& used,
                                   const std::set<std::size_t>& claim_nodes) const;
  std::optional<Grant> place_whole_nodes(const RequestRec& r, TimeMs now, const PassView& view, const FreeChips& free,
                                         const std::map<std::pair<RequestClass, std::string>, int>& used,
                                         const std::set<std::size_t>& claim_nodes) const;

  struct Reservation {
    TimeMs start = kNever;
    std::vector<ChipRef> chips;
  };

  // Earliest time the request could start from expected lease ends and earlier reservations.
  Reservation reserve(const RequestRec& r, TimeMs now,
                      const PassView& view) const;
  // reserve for a request of chips on one node, and for one of whole nodes, into `best`; `by_ends`:
  // the nodes the pass has not read are read from their filings.
  void reserve_chips(const RequestRec& r, TimeMs now, const PassView& view, bool by_ends, Reservation& best) const;
  void reserve_whole_nodes(const RequestRec& r, TimeMs now, const PassView& view, bool by_ends,
                           Reservation& best) const;
  // When a chip comes free as the pass sees it: no chip comes free before now, not even one whose
  // lease's grace passed before a tick ended it.
  static TimeMs chip_available(TimeMs now, const ChipPlan& c) {
    TimeMs t = c.lease != 0 ? std::max(c.busy_until, now) : now;
    if (c.claimed_by != 0) t = std::max(t, c.claim_end);
    return std::max(t, c.resv_end);
  }

  static void mark_reserved(PassView& view, const std::vector<ChipRef>& chips,
                            TimeMs start, TimeMs end, RequestId owner);

  // Finds the experiment leases whose notice lets `r` start at the end of the grace, losing
  // the least work. nullopt when no such set exists or none is needed.
  class VictimSearch;
  std::optional<Claim> find_victims(const RequestRec& r, TimeMs now,
                                    const PassView& view,
                                    const std::map<std::pair<RequestClass, std::string>, int>& used)
      const;

  // What explanations read of the fleet, once per pass: how many nodes of each state a request of a
  // revision (any: nullopt) may use, and each revision's chips per node (its last node's, by
  // index). From fleet_by_revision, or from every node in passes that read every node (the
  // reference, exhaustive_passes).
  struct FleetSummary {
    std::map<std::optional<std::string>, std::map<NodeState, int>> states_by_revision;
    std::map<std::string, int> chips_by_revision;
  };

  // Why a request cannot start now, in words for `kiln queue --why`. Of the nodes with chips free
  // when the pass began (the only ones with any now) it reads those the pass read and those with a
  // free chip claimed, the others from their filings, and the fleet's summary (`fleet`, filled on
  // first use), unless the knobs ask every pass to read every node.
  class WaitReasons;
  std::vector<std::string> reasons_for(const RequestRec& r, TimeMs now,
                                       const PassView& view,
                                       const std::map<std::pair<RequestClass, std::string>, int>& used,
                                       std::size_t ahead, FleetSummary& fleet) const;

  class PlanningPass;
  // A planning pass. `with_reasons`: it reads every request, for each one's expected start, and puts
  // in words why each waits, or only `reasons_of` if given. `first_requests`, with reasons for every
  // request: the pass ends after that many of the queue.
  Plan plan(TimeMs now, bool with_reasons, std::optional<RequestId> reasons_of = std::nullopt,
            std::size_t first_requests = std::numeric_limits<std::size_t>::max()) const;

  // --- the audit (Scheduler::check_invariants) ------------------------------------------------

  // The leases against the nodes' chips and the requests.
  Status check_leases() const;
  // The claims against the nodes' chips, and the indexes of the claims.
  Status check_claims() const;
  // Each node filing against a scan of the nodes.
  Status check_node_filings() const;
  Status check_notice_windows() const;

  // --- applying decisions ----------------------------------------------------------------------

  void end_lease(LeaseId id);

  // Ends a preempted lease and puts its request back in the queue, keeping its age.
  void requeue(LeaseId id, TimeMs at_checkpoint);

  void finish_request(LeaseId id) {
    RequestId request = leases.at(id).request;
    end_lease(id);
    erase_request(request);
  }

  void apply(Plan& p, TimeMs now);

  void schedule(TimeMs now);

  void drop_claims_on(std::size_t node);

  // A lease on exactly these chips for a request that already runs (restore, handover).
  Result<LeaseId> hold(const Request& request, const std::vector<Placement>& placement, TimeMs start_ms);

  Status validate(const Request& q) const;
};

}  // namespace kiln::scheduler

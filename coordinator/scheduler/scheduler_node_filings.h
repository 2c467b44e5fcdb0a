// The scheduler's indexes of the nodes: each files the nodes by something read off their records,
// is filed again for a node after any change of what it reads there, and can say whether it holds
// what a filing made from scratch would (matches_scan, for Scheduler::check_invariants). Internal
// to the scheduler core (scheduler_impl.h).
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "coordinator/scheduler/scheduler_records.h"

namespace kiln::scheduler {

// Chips free now (not leased), counted per node over the nodes new work may enter (`up`): an
// upper bound on what any non-maintenance request could take, so that one that cannot fit is
// passed over without looking at every node. The scheduler keeps it with every change of a node's
// leases or state; a pass takes a copy and counts its own grants off it.
class FreeChips {
 public:
  // `unclaimed_only`: counts only the chips no claim holds (Scheduler::Impl::free_unclaimed).
  FreeChips() = default;
  explicit FreeChips(bool unclaimed_only) : unclaimed_only_(unclaimed_only) {}

  // Counts a node again after its chips, leases or state changed; an index past the end is a new node.
  void recount(std::size_t node, const std::vector<NodeRec>& nodes);
  void take(std::size_t node, int chips);

  int on_node(std::size_t node) const { return on_node_[node]; }  // 0 on nodes that are not up
  // Up nodes with at least `chips` chips free.
  std::size_t nodes_with_at_least(int chips) const;
  int whole_free_nodes() const { return whole_free_nodes_; }  // up nodes with every chip free
  int most_on_a_node() const { return nodes_with_.empty() ? 0 : static_cast<int>(nodes_with_.size()) - 1; }

  // Every node counted from scratch: what the kept counts must equal.
  static FreeChips counted(const std::vector<NodeRec>& nodes, bool unclaimed_only = false);
  bool operator==(const FreeChips&) const = default;

 private:
  bool unclaimed_only_ = false;
  std::vector<int> on_node_;
  std::vector<int> nodes_with_;  // nodes_with_[k]: up nodes with exactly k free chips; no trailing 0
  int whole_free_nodes_ = 0;
  std::vector<int> counted_chips_;  // an up node's chips when it was counted; -1: not counted
};

// The up nodes with free chips, by revision, then by how many and then by index: a pass places a
// one-node request by reading them in the order of the least score each could reach, and stops at
// the first that could not beat the best found (place_now). And the up nodes with every chip free,
// by revision and index, for requests of whole nodes. Filed again with every count of the node's
// free chips (Impl::recount_free).
class NodesByFree {
 public:
  using ByFree = std::set<std::pair<int, std::size_t>>;
  void refile(std::size_t node, const NodeRec& rec, int free);
  const std::map<std::string, ByFree>& by_free() const { return by_free_; }
  const std::map<std::string, std::set<std::size_t>>& whole_free() const { return whole_free_; }
  bool matches_scan(const std::vector<NodeRec>& nodes, const FreeChips& free) const;

 private:
  struct Filed {
    std::string revision;
    int free = 0;
    bool whole = false;
  };
  std::map<std::string, ByFree> by_free_;
  std::map<std::string, std::set<std::size_t>> whole_free_;
  std::vector<std::optional<Filed>> filed_as_;
};

// The fleet by revision: how many nodes are in each state, and each node's chips by its index. An
// explanation reads these instead of every node (reasons_for). A node is taken out before any
// change of its state, revision or chips, and counted again after it.
class FleetByRevision {
 public:
  struct NodesOfRevision {
    std::map<NodeState, int> states;
    std::map<std::size_t, int> chips_by_node;
    bool operator==(const NodesOfRevision&) const = default;
  };
  void add(std::size_t n, const NodeRec& node);
  void remove(std::size_t n, const NodeRec& node);
  const std::map<std::string, NodesOfRevision>& by_revision() const { return by_revision_; }
  bool matches_scan(const std::vector<NodeRec>& nodes) const;

 private:
  std::map<std::string, NodesOfRevision> by_revision_;
};

// The up nodes by when their chips come free, for the reservation of a request that cannot start
// (reserve), per revision: for each k, the nodes of at least k chips by the k-th earliest end among
// their chips, then index; and every node by its last chip's end. A chip's end is its lease's
// planned_end (a free chip's is kFreeNow): never later than the pass sees the chip come free, so
// each entry bounds the node's start from below. Filed again with every change of a node's leases,
// state, claims or grace deadlines; a change moves only the entries whose end it changed.
class NodesByEnd {
 public:
  struct EndsByRevision {
    std::vector<std::set<std::pair<TimeMs, std::size_t>>> by_chips;  // [k - 1]; no trailing empty set
    std::set<std::pair<TimeMs, std::size_t>> whole;
    bool operator==(const EndsByRevision&) const = default;
  };
  void refile(std::size_t node, const NodeRec& rec, const std::map<LeaseId, LeaseRec>& leases,
              const std::map<RequestId, RequestRec>& requests);
  const std::map<std::string, EndsByRevision>& by_revision() const { return by_revision_; }
  bool matches_scan(const std::vector<NodeRec>& nodes, const std::map<LeaseId, LeaseRec>& leases,
                    const std::map<RequestId, RequestRec>& requests) const;

 private:
  struct EndsFiled {
    std::string revision;
    std::vector<TimeMs> ends;  // sorted
  };
  // A claimed chip ends no earlier than its claim, as of its victims' grace (claim_end).
  static std::optional<EndsFiled> ends_of(const NodeRec& node, const std::map<LeaseId, LeaseRec>& leases,
                                          const std::map<RequestId, RequestRec>& requests);
  static void add(std::map<std::string, EndsByRevision>& filing, std::size_t node, const EndsFiled& ends);
  void remove(std::size_t node, const EndsFiled& ends);

  std::map<std::string, EndsByRevision> by_revision_;
  std::vector<std::optional<EndsFiled>> filed_as_;
};

// The up nodes an overdue request could take chips on at the end of a grace (find_victims), per
// revision: those with a chip under an experiment's lease that has had no notice (a victim to be),
// those by how many of their chips are free or under notice (come free within the grace), and
// those with every chip in one of these three (a whole node to be had). A chip an earlier pass's
// claim holds is none of these: a request with a claim does not search, and every pass keeps the
// claims it found. Filed from the leases and those claims, so a superset of what a pass, with its
// grants, new claims and reservations, finds there. Filed again with NodesByEnd.
class NodesForVictims {
 public:
  struct VictimsByRevision {
    std::set<std::size_t> with_victims;
    std::set<std::pair<int, std::size_t>> by_soon_free;  // nodes with at least one such chip
    std::set<std::size_t> all_soon_free_or_victims;
    bool operator==(const VictimsByRevision&) const = default;
  };
  void refile(std::size_t node, const NodeRec& rec, const std::map<LeaseId, LeaseRec>& leases);
  const std::map<std::string, VictimsByRevision>& by_revision() const { return by_revision_; }
  // Whether the node is filed with a chip under an experiment's lease without notice.
  bool holds_victims(std::size_t node) const;
  // Whether any node is.
  bool any_victims() const;
  bool matches_scan(const std::vector<NodeRec>& nodes, const std::map<LeaseId, LeaseRec>& leases) const;

 private:
  struct VictimsFiled {
    std::string revision;
    int soon_free = 0;  // chips free or under notice
    int victims = 0;    // chips under an experiment's lease without notice
    int others = 0;     // chips under any other lease, or claimed
  };
  static std::optional<VictimsFiled> victims_of(const NodeRec& node, const std::map<LeaseId, LeaseRec>& leases);
  static void add(std::map<std::string, VictimsByRevision>& filing, std::size_t node, const VictimsFiled& filed);

  std::map<std::string, VictimsByRevision> by_revision_;
  std::vector<std::optional<VictimsFiled>> filed_as_;
};

// The up nodes with a claimed chip that is free: the one kind of node whose free chips a request
// may not all use without a row made (untouched_free_chips). Filed again after a node's leases, its
// state or its claims changed.
class ClaimedFreeNodes {
 public:
  void refile(std::size_t node, const NodeRec& rec);
  const std::set<std::size_t>& nodes() const { return nodes_; }
  bool contains(std::size_t node) const { return nodes_.count(node) != 0; }
  bool matches_scan(const std::vector<NodeRec>& nodes) const;

 private:
  static bool has_claimed_free_chip(const NodeRec& node);
  std::set<std::size_t> nodes_;
};

// Each node's largest NUMA node and largest switch group, in chips: how well the best-placed node
// could keep a request's chips together (least_penalty).
class LargestGroups {
 public:
  // Files a node's topology; `before`: what it was filed with, if it was.
  void refile(const NodeInfo* before, const NodeInfo& now);
  // The least penalty choose_chips gives k chips on any node, with all its chips free: no node can
  // place them better.
  int least_penalty(int k) const;
  bool matches_scan(const std::vector<NodeRec>& nodes) const;

 private:
  static std::pair<int, int> largest_groups(const NodeInfo& node);
  std::multiset<int> numa_nodes_;
  std::multiset<int> switch_groups_;
};

}  // namespace kiln::scheduler

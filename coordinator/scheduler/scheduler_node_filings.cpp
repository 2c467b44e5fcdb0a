#include "coordinator/scheduler/scheduler_node_filings.h"

#include <algorithm>

namespace kiln::scheduler {

namespace {

// A filing of the nodes by revision made from scratch, what a kept one must equal: `of` says what
// a node is filed with (nothing for a node not filed), `add` files it.
template <typename ByRevision, typename Of, typename Add>
std::map<std::string, ByRevision> filed_from_scratch(const std::vector<NodeRec>& nodes, Of of, Add add) {
  std::map<std::string, ByRevision> out;
  for (std::size_t n = 0; n < nodes.size(); ++n) {
    if (auto filed = of(nodes[n])) add(out, n, *filed);
  }
  return out;
}

// Whether the up node has every chip free.
bool all_chips_free(const NodeRec& node, int free) {
  return node.state == NodeState::up && free == static_cast<int>(node.chip_lease.size());
}

}  // namespace

// --- FreeChips -------------------------------------------------------------------------------

void FreeChips::recount(std::size_t node, const std::vector<NodeRec>& nodes) {
  if (node >= on_node_.size()) {
    on_node_.resize(node + 1, 0);
    counted_chips_.resize(node + 1, -1);
  }
  if (counted_chips_[node] >= 0) {
    --nodes_with_[on_node_[node]];
    if (on_node_[node] == counted_chips_[node]) --whole_free_nodes_;
  }
  on_node_[node] = 0;
  counted_chips_[node] = -1;
  const NodeRec& rec = nodes[node];
  if (rec.state == NodeState::up) {
    const int chips = static_cast<int>(rec.chip_lease.size());
    int free = 0;
    for (std::size_t p = 0; p < rec.chip_lease.size(); ++p) {
      free += rec.chip_lease[p] == 0 && (!unclaimed_only_ || rec.chip_claim[p] == 0) ? 1 : 0;
    }
    on_node_[node] = free;
    counted_chips_[node] = chips;
    if (static_cast<std::size_t>(free) >= nodes_with_.size()) nodes_with_.resize(free + 1, 0);
    ++nodes_with_[free];
    if (free == chips) ++whole_free_nodes_;
  }
  while (!nodes_with_.empty() && nodes_with_.back() == 0) nodes_with_.pop_back();
}

void FreeChips::take(std::size_t node, int chips) {
  if (counted_chips_[node] < 0) return;  // maintenance on a node not counted
  int& free = on_node_[node];
  KILN_ASSERT(free >= chips, "a grant takes only free chips");
  if (free == counted_chips_[node]) --whole_free_nodes_;
  --nodes_with_[free];
  free -= chips;
  ++nodes_with_[free];
  while (!nodes_with_.empty() && nodes_with_.back() == 0) nodes_with_.pop_back();
}

std::size_t FreeChips::nodes_with_at_least(int chips) const {
  std::size_t count = 0;
  for (std::size_t k = static_cast<std::size_t>(chips); k < nodes_with_.size(); ++k) {
    count += static_cast<std::size_t>(nodes_with_[k]);
  }
  return count;
}

FreeChips FreeChips::counted(const std::vector<NodeRec>& nodes, bool unclaimed_only) {
  FreeChips out(unclaimed_only);
  for (std::size_t n = 0; n < nodes.size(); ++n) out.recount(n, nodes);
  return out;
}

// --- NodesByFree -----------------------------------------------------------------------------

void NodesByFree::refile(std::size_t node, const NodeRec& rec, int free) {
  if (node >= filed_as_.size()) filed_as_.resize(node + 1);
  if (const auto& filed = filed_as_[node]) {
    auto by_free = by_free_.find(filed->revision);
    by_free->second.erase({filed->free, node});
    if (by_free->second.empty()) by_free_.erase(by_free);
    if (filed->whole) {
      auto whole = whole_free_.find(filed->revision);
      whole->second.erase(node);
      if (whole->second.empty()) whole_free_.erase(whole);
    }
  }
  filed_as_[node].reset();
  if (free == 0) return;
  const bool whole = all_chips_free(rec, free);
  by_free_[rec.info.revision].insert({free, node});
  if (whole) whole_free_[rec.info.revision].insert(node);
  filed_as_[node] = Filed{rec.info.revision, free, whole};
}

bool NodesByFree::matches_scan(const std::vector<NodeRec>& nodes, const FreeChips& free) const {
  std::map<std::string, ByFree> by_free;
  std::map<std::string, std::set<std::size_t>> whole;
  for (std::size_t n = 0; n < nodes.size(); ++n) {
    const int here = free.on_node(n);
    if (here > 0) by_free[nodes[n].info.revision].insert({here, n});
    if (all_chips_free(nodes[n], here)) whole[nodes[n].info.revision].insert(n);
  }
  return by_free == by_free_ && whole == whole_free_;
}

// --- FleetByRevision -------------------------------------------------------------------------

void FleetByRevision::add(std::size_t n, const NodeRec& node) {
  NodesOfRevision& of = by_revision_[node.info.revision];
  ++of.states[node.state];
  of.chips_by_node[n] = static_cast<int>(node.info.chips.size());
}

void FleetByRevision::remove(std::size_t n, const NodeRec& node) {
  auto of = by_revision_.find(node.info.revision);
  KILN_ASSERT(of != by_revision_.end(), "a node is counted under its revision");
  if (--of->second.states.at(node.state) == 0) of->second.states.erase(node.state);
  of->second.chips_by_node.erase(n);
  if (of->second.chips_by_node.empty()) by_revision_.erase(of);
}

bool FleetByRevision::matches_scan(const std::vector<NodeRec>& nodes) const {
  FleetByRevision counted;
  for (std::size_t n = 0; n < nodes.size(); ++n) counted.add(n, nodes[n]);
  return counted.by_revision_ == by_revision_;
}

// --- NodesByEnd ------------------------------------------------------------------------------

std::optional<NodesByEnd::EndsFiled> NodesByEnd::ends_of(const NodeRec& node, const std::map<LeaseId, LeaseRec>& leases,
                                                        const std::map<RequestId, RequestRec>& requests) {
  if (node.state != NodeState::up) return std::nullopt;
  EndsFiled out;
  out.revision = node.info.revision;
  out.ends.reserve(node.chip_lease.size());
  LeaseId last = 0;
  TimeMs last_end = kFreeNow;
  RequestId last_claim = 0;
  TimeMs last_claim_end = kFreeNow;
  for (std::size_t p = 0; p < node.chip_lease.size(); ++p) {
    const LeaseId id = node.chip_lease[p];
    if (id != 0 && id != last) {
      last = id;
      last_end = planned_end(leases.at(id));
    }
    TimeMs end = id == 0 ? kFreeNow : last_end;
    if (const RequestId claim = node.chip_claim[p]; claim != 0) {
      if (claim != last_claim) {
        last_claim = claim;
        // claim_end at the earliest moment a pass can see: the end of the victims' grace.
        const RequestRec& r = requests.at(claim);
        last_claim_end = claim_end(r, r.claim->ready_ms);
      }
      end = std::max(end, last_claim_end);
    }
    out.ends.push_back(end);
  }
  std::sort(out.ends.begin(), out.ends.end());
  return out;
}

void NodesByEnd::add(std::map<std::string, EndsByRevision>& filing, std::size_t node, const EndsFiled& ends) {
  KILN_ASSERT(!ends.ends.empty(), "a node has at least one chip (upsert_node)");
  EndsByRevision& filed = filing[ends.revision];
  if (filed.by_chips.size() < ends.ends.size()) filed.by_chips.resize(ends.ends.size());
  for (std::size_t k = 0; k < ends.ends.size(); ++k) filed.by_chips[k].insert({ends.ends[k], node});
  filed.whole.insert({ends.ends.back(), node});
}

void NodesByEnd::remove(std::size_t node, const EndsFiled& ends) {
  auto it = by_revision_.find(ends.revision);
  EndsByRevision& filed = it->second;
  for (std::size_t k = 0; k < ends.ends.size(); ++k) filed.by_chips[k].erase({ends.ends[k], node});
  while (!filed.by_chips.empty() && filed.by_chips.back().empty()) filed.by_chips.pop_back();
  filed.whole.erase({ends.ends.back(), node});
  if (filed.whole.empty()) by_revision_.erase(it);
}

void NodesByEnd::refile(std::size_t node, const NodeRec& rec, const std::map<LeaseId, LeaseRec>& leases,
                        const std::map<RequestId, RequestRec>& requests) {
  if (node >= filed_as_.size()) filed_as_.resize(node + 1);
  std::optional<EndsFiled>& filed = filed_as_[node];
  std::optional<EndsFiled> now_ends = ends_of(rec, leases, requests);
  if (filed && now_ends && filed->revision == now_ends->revision && filed->ends.size() == now_ends->ends.size()) {
    // The same chips under the same revision: only the order statistics that changed move.
    EndsByRevision& by = by_revision_.at(filed->revision);
    for (std::size_t k = 0; k < filed->ends.size(); ++k) {
      if (filed->ends[k] == now_ends->ends[k]) continue;
      by.by_chips[k].erase({filed->ends[k], node});
      by.by_chips[k].insert({now_ends->ends[k], node});
    }
    if (filed->ends.back() != now_ends->ends.back()) {
      by.whole.erase({filed->ends.back(), node});
      by.whole.insert({now_ends->ends.back(), node});
    }
  } else {
    if (filed) remove(node, *filed);
    if (now_ends) add(by_revision_, node, *now_ends);
  }
  filed = std::move(now_ends);
}

bool NodesByEnd::matches_scan(const std::vector<NodeRec>& nodes, const std::map<LeaseId, LeaseRec>& leases,
                              const std::map<RequestId, RequestRec>& requests) const {
  return filed_from_scratch<EndsByRevision>(
             nodes, [&](const NodeRec& node) { return ends_of(node, leases, requests); }, &add) == by_revision_;
}

// --- NodesForVictims -------------------------------------------------------------------------

std::optional<NodesForVictims::VictimsFiled> NodesForVictims::victims_of(const NodeRec& node,
                                                                        const std::map<LeaseId, LeaseRec>& leases) {
  if (node.state != NodeState::up) return std::nullopt;
  VictimsFiled out;
  out.revision = node.info.revision;
  for (std::size_t p = 0; p < node.chip_lease.size(); ++p) {
    const LeaseId id = node.chip_lease[p];
    const LeaseRec* l = id == 0 ? nullptr : &leases.at(id);
    if (node.chip_claim[p] != 0) {
      ++out.others;
    } else if (!l || l->grace_deadline_ms) {
      ++out.soon_free;
    } else if (l->cls == RequestClass::experiment) {
      ++out.victims;
    } else {
      ++out.others;
    }
  }
  return out;
}

void NodesForVictims::add(std::map<std::string, VictimsByRevision>& filing, std::size_t node,
                          const VictimsFiled& filed) {
  if (filed.victims == 0 && filed.soon_free == 0) return;  // every chip under other leases: nothing to file
  VictimsByRevision& by = filing[filed.revision];
  if (filed.victims > 0) by.with_victims.insert(node);
  if (filed.soon_free > 0) by.by_soon_free.insert({filed.soon_free, node});
  if (filed.others == 0) by.all_soon_free_or_victims.insert(node);
}

void NodesForVictims::refile(std::size_t node, const NodeRec& rec, const std::map<LeaseId, LeaseRec>& leases) {
  if (node >= filed_as_.size()) filed_as_.resize(node + 1);
  std::optional<VictimsFiled>& filed = filed_as_[node];
  if (auto it = filed ? by_revision_.find(filed->revision) : by_revision_.end(); it != by_revision_.end()) {
    VictimsByRevision& by = it->second;
    by.with_victims.erase(node);
    by.by_soon_free.erase({filed->soon_free, node});
    by.all_soon_free_or_victims.erase(node);
    if (by == VictimsByRevision{}) by_revision_.erase(it);
  }
  filed = victims_of(rec, leases);
  if (filed) add(by_revision_, node, *filed);
}

bool NodesForVictims::holds_victims(std::size_t node) const {
  return node < filed_as_.size() && filed_as_[node] && filed_as_[node]->victims > 0;
}

bool NodesForVictims::any_victims() const {
  return std::any_of(by_revision_.begin(), by_revision_.end(),
                     [](const auto& filed) { return !filed.second.with_victims.empty(); });
}

bool NodesForVictims::matches_scan(const std::vector<NodeRec>& nodes, const std::map<LeaseId, LeaseRec>& leases) const {
  return filed_from_scratch<VictimsByRevision>(
             nodes, [&](const NodeRec& node) { return victims_of(node, leases); }, &add) == by_revision_;
}

// --- ClaimedFreeNodes ------------------------------------------------------------------------

bool ClaimedFreeNodes::has_claimed_free_chip(const NodeRec& node) {
  if (node.state != NodeState::up) return false;
  for (std::size_t p = 0; p < node.chip_lease.size(); ++p) {
    if (node.chip_claim[p] != 0 && node.chip_lease[p] == 0) return true;
  }
  return false;
}

void ClaimedFreeNodes::refile(std::size_t node, const NodeRec& rec) {
  if (has_claimed_free_chip(rec)) {
    nodes_.insert(node);
  } else {
    nodes_.erase(node);
  }
}

bool ClaimedFreeNodes::matches_scan(const std::vector<NodeRec>& nodes) const {
  std::set<std::size_t> scanned;
  for (std::size_t n = 0; n < nodes.size(); ++n) {
    if (has_claimed_free_chip(nodes[n])) scanned.insert(n);
  }
  return scanned == nodes_;
}

// --- LargestGroups ---------------------------------------------------------------------------

std::pair<int, int> LargestGroups::largest_groups(const NodeInfo& node) {
  std::map<int, int> numa;
  std::map<int, int> switches;
  for (const auto& chip : node.chips) {
    ++numa[chip.numa_node];
    ++switches[chip.switch_group];
  }
  auto largest = [](const std::map<int, int>& groups) {
    int most = 0;
    for (const auto& [group, chips] : groups) most = std::max(most, chips);
    return most;
  };
  return {largest(numa), largest(switches)};
}

void LargestGroups::refile(const NodeInfo* before, const NodeInfo& now) {
  if (before) {
    const auto [numa, switches] = largest_groups(*before);
    numa_nodes_.erase(numa_nodes_.find(numa));
    switch_groups_.erase(switch_groups_.find(switches));
  }
  const auto [numa, switches] = largest_groups(now);
  numa_nodes_.insert(numa);
  switch_groups_.insert(switches);
}

int LargestGroups::least_penalty(int k) const {
  if (!numa_nodes_.empty() && k <= *numa_nodes_.rbegin()) return 0;
  if (!switch_groups_.empty() && k <= *switch_groups_.rbegin()) return 1;
  return 2;
}

bool LargestGroups::matches_scan(const std::vector<NodeRec>& nodes) const {
  LargestGroups scanned;
  for (const NodeRec& n : nodes) scanned.refile(nullptr, n.info);
  return scanned.numa_nodes_ == numa_nodes_ && scanned.switch_groups_ == switch_groups_;
}

}  // namespace kiln::scheduler

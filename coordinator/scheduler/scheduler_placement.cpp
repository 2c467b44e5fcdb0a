// Where a request fits: the chips it can take now and the reservation it holds for later.
#include "coordinator/scheduler/scheduler_impl.h"

#include <fmt/format.h>

namespace kiln::scheduler {

ChipPlan PassView::fresh(std::size_t node, std::size_t pos) const {
  ChipPlan c;
  c.lease = (*nodes_)[node].chip_lease[pos];
  c.busy_until = now_;
  if (c.lease != 0) {
    const LeaseRec& l = leases_->at(c.lease);
    const TimeMs end = planned_end(l);
    c.busy_until = l.grace_deadline_ms || end >= now_ ? end : now_ + kOverrunStepMs;
  }
  c.claimed_by = (*nodes_)[node].chip_claim[pos];
  if (c.claimed_by != 0) c.claim_end = claim_end(requests_->at(c.claimed_by), now_);
  return c;
}

std::vector<ChipPlan>& PassView::row(std::size_t node) const {
  std::uint32_t& slot = slot_[node];
  if (slot == 0) {
    std::vector<ChipPlan>& made = rows_.emplace_back();
    const std::size_t chips = (*nodes_)[node].info.chips.size();
    made.reserve(chips);
    for (std::size_t p = 0; p < chips; ++p) made.push_back(fresh(node, p));
    slot = static_cast<std::uint32_t>(rows_.size());
    touched_.push_back(node);
  }
  return rows_[slot - 1];
}

ChipPlan PassView::chip(std::size_t node, std::size_t pos) const {
  const std::uint32_t slot = slot_[node];
  return slot == 0 ? fresh(node, pos) : rows_[slot - 1][pos];
}

std::optional<int> PassView::untouched_free_chips(std::size_t node) const {
  if (slot_[node] != 0) return std::nullopt;
  const auto& leased = (*nodes_)[node].chip_lease;
  return static_cast<int>(std::count(leased.begin(), leased.end(), 0));
}

void FreeChips::recount(std::size_t node, const std::vector<NodeRec>& nodes) {
  if (node >= on_node.size()) {
    on_node.resize(node + 1, 0);
    counted_chips_.resize(node + 1, -1);
  }
  if (counted_chips_[node] >= 0) {
    --nodes_with[on_node[node]];
    if (on_node[node] == counted_chips_[node]) --whole_free_nodes;
  }
  on_node[node] = 0;
  counted_chips_[node] = -1;
  const NodeRec& rec = nodes[node];
  if (rec.state == NodeState::up) {
    const int chips = static_cast<int>(rec.chip_lease.size());
    int free = 0;
    for (std::size_t p = 0; p < rec.chip_lease.size(); ++p) {
      free += rec.chip_lease[p] == 0 && (!unclaimed_only || rec.chip_claim[p] == 0) ? 1 : 0;
    }
    on_node[node] = free;
    counted_chips_[node] = chips;
    if (static_cast<std::size_t>(free) >= nodes_with.size()) nodes_with.resize(free + 1, 0);
    ++nodes_with[free];
    if (free == chips) ++whole_free_nodes;
  }
  settle_most();
}

void FreeChips::take(std::size_t node, int chips) {
  if (counted_chips_[node] < 0) return;  // maintenance on a node not counted
  int& free = on_node[node];
  KILN_ASSERT(free >= chips, "a grant takes only free chips");
  if (free == counted_chips_[node]) --whole_free_nodes;
  --nodes_with[free];
  free -= chips;
  ++nodes_with[free];
  settle_most();
}

void FreeChips::settle_most() {
  while (!nodes_with.empty() && nodes_with.back() == 0) nodes_with.pop_back();
  most_on_a_node = nodes_with.empty() ? 0 : static_cast<int>(nodes_with.size()) - 1;
}

void Scheduler::Impl::recount_free(std::size_t node) {
  if (node >= free_filed_as.size()) free_filed_as.resize(node + 1);
  if (const auto& filed = free_filed_as[node]) {
    if (auto by_free = nodes_by_free.find(*filed); by_free != nodes_by_free.end()) {
      by_free->second.erase({free_chips.on_node[node], node});
      if (by_free->second.empty()) nodes_by_free.erase(by_free);
    }
    if (auto whole = whole_free_by_revision.find(*filed); whole != whole_free_by_revision.end()) {
      whole->second.erase(node);
      if (whole->second.empty()) whole_free_by_revision.erase(whole);
    }
  }
  free_filed_as[node].reset();
  free_chips.recount(node, nodes);
  free_unclaimed.recount(node, nodes);
  file_ends(node);
  file_victims(node);
  file_claimed_free(node);
  const int free = free_chips.on_node[node];
  if (free == 0) return;
  const std::string& revision = nodes[node].info.revision;
  nodes_by_free[revision].insert({free, node});
  if (whole_free(nodes[node], free)) whole_free_by_revision[revision].insert(node);
  free_filed_as[node] = revision;
}

std::optional<Scheduler::Impl::EndsFiled> Scheduler::Impl::ends_of(const NodeRec& node,
                                                                  const std::map<LeaseId, LeaseRec>& leases,
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

void Scheduler::Impl::add_ends(std::map<std::string, EndsByRevision>& filing, std::size_t node,
                               const EndsFiled& ends) {
  KILN_ASSERT(!ends.ends.empty(), "a node has at least one chip (upsert_node)");
  EndsByRevision& filed = filing[ends.revision];
  if (filed.by_chips.size() < ends.ends.size()) filed.by_chips.resize(ends.ends.size());
  for (std::size_t k = 0; k < ends.ends.size(); ++k) filed.by_chips[k].insert({ends.ends[k], node});
  filed.whole.insert({ends.ends.back(), node});
}

void Scheduler::Impl::remove_ends(std::size_t node, const EndsFiled& ends) {
  auto it = nodes_by_end.find(ends.revision);
  EndsByRevision& filed = it->second;
  for (std::size_t k = 0; k < ends.ends.size(); ++k) filed.by_chips[k].erase({ends.ends[k], node});
  while (!filed.by_chips.empty() && filed.by_chips.back().empty()) filed.by_chips.pop_back();
  filed.whole.erase({ends.ends.back(), node});
  if (filed.whole.empty()) nodes_by_end.erase(it);
}

void Scheduler::Impl::file_ends(std::size_t node) {
  if (node >= ends_filed_as.size()) ends_filed_as.resize(node + 1);
  std::optional<EndsFiled>& filed = ends_filed_as[node];
  std::optional<EndsFiled> now_ends = ends_of(nodes[node], leases, requests);
  if (filed && now_ends && filed->revision == now_ends->revision && filed->ends.size() == now_ends->ends.size()) {
    // The same chips under the same revision: only the order statistics that changed move.
    EndsByRevision& by = nodes_by_end.at(filed->revision);
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
    if (filed) remove_ends(node, *filed);
    if (now_ends) add_ends(nodes_by_end, node, *now_ends);
  }
  filed = std::move(now_ends);
}

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

}  // namespace

std::map<std::string, Scheduler::Impl::EndsByRevision> Scheduler::Impl::nodes_by_end_counted(
    const std::vector<NodeRec>& nodes, const std::map<LeaseId, LeaseRec>& leases,
    const std::map<RequestId, RequestRec>& requests) {
  return filed_from_scratch<EndsByRevision>(
      nodes, [&](const NodeRec& node) { return ends_of(node, leases, requests); }, &add_ends);
}

bool Scheduler::Impl::has_claimed_free_chip(const NodeRec& node) {
  if (node.state != NodeState::up) return false;
  for (std::size_t p = 0; p < node.chip_lease.size(); ++p) {
    if (node.chip_claim[p] != 0 && node.chip_lease[p] == 0) return true;
  }
  return false;
}

void Scheduler::Impl::file_claimed_free(std::size_t node) {
  if (has_claimed_free_chip(nodes[node])) {
    claimed_free_nodes.insert(node);
  } else {
    claimed_free_nodes.erase(node);
  }
}

std::optional<Scheduler::Impl::VictimsFiled> Scheduler::Impl::victims_of(const NodeRec& node,
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

void Scheduler::Impl::add_victims(std::map<std::string, VictimsByRevision>& filing, std::size_t node,
                                  const VictimsFiled& filed) {
  if (filed.victims == 0 && filed.soon_free == 0) return;  // every chip under other leases: nothing to file
  VictimsByRevision& by = filing[filed.revision];
  if (filed.victims > 0) by.with_victims.insert(node);
  if (filed.soon_free > 0) by.by_soon_free.insert({filed.soon_free, node});
  if (filed.others == 0) by.all_soon_free_or_victims.insert(node);
}

void Scheduler::Impl::file_victims(std::size_t node) {
  if (node >= victims_filed_as.size()) victims_filed_as.resize(node + 1);
  std::optional<VictimsFiled>& filed = victims_filed_as[node];
  if (auto it = filed ? nodes_for_victims.find(filed->revision) : nodes_for_victims.end();
      it != nodes_for_victims.end()) {
    VictimsByRevision& by = it->second;
    by.with_victims.erase(node);
    by.by_soon_free.erase({filed->soon_free, node});
    by.all_soon_free_or_victims.erase(node);
    if (by == VictimsByRevision{}) nodes_for_victims.erase(it);
  }
  filed = victims_of(nodes[node], leases);
  if (filed) add_victims(nodes_for_victims, node, *filed);
}

std::map<std::string, Scheduler::Impl::VictimsByRevision> Scheduler::Impl::nodes_for_victims_counted(
    const std::vector<NodeRec>& nodes, const std::map<LeaseId, LeaseRec>& leases) {
  return filed_from_scratch<VictimsByRevision>(
      nodes, [&](const NodeRec& node) { return victims_of(node, leases); }, &add_victims);
}

std::vector<std::size_t> Scheduler::Impl::victim_nodes(const Request& q) const {
  std::vector<std::size_t> out;
  if (knobs.exhaustive_passes) {
    for (std::size_t n = 0; n < nodes.size(); ++n) out.push_back(n);
    return out;
  }
  if (q.node) {
    if (auto it = node_index.find(*q.node); it != node_index.end()) out.push_back(it->second);
    return out;
  }
  for (const auto& [rev, by] : revisions_read(nodes_for_victims, q.revision)) {
    if (q.nodes > 0) {
      out.insert(out.end(), by.all_soon_free_or_victims.begin(), by.all_soon_free_or_victims.end());
      continue;
    }
    // A node serves a one-node request if it holds victims, or, through notices already sent,
    // with the chips coming free alone.
    out.insert(out.end(), by.with_victims.begin(), by.with_victims.end());
    for (auto it = by.by_soon_free.lower_bound({q.chips, 0}); it != by.by_soon_free.end(); ++it) {
      out.push_back(it->second);
    }
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

bool Scheduler::Impl::may_find_victims(const Request& q) const {
  // A search claims chips only with a notice to some experiment's lease (find_victims).
  if (q.node) {
    auto it = node_index.find(*q.node);
    if (it == node_index.end() || it->second >= victims_filed_as.size()) return false;
    const auto& filed = victims_filed_as[it->second];
    return filed && filed->victims > 0;
  }
  return std::any_of(nodes_for_victims.begin(), nodes_for_victims.end(),
                     [](const auto& filed) { return !filed.second.with_victims.empty(); });
}

void Scheduler::Impl::count_node(std::size_t n, int sign) {
  const NodeRec& node = nodes[n];
  auto of = nodes_by_revision.try_emplace(node.info.revision).first;
  if (sign > 0) {
    ++of->second.states[node.state];
    of->second.chips_by_node[n] = static_cast<int>(node.info.chips.size());
    return;
  }
  if (--of->second.states.at(node.state) == 0) of->second.states.erase(node.state);
  of->second.chips_by_node.erase(n);
  if (of->second.chips_by_node.empty()) nodes_by_revision.erase(of);
}

std::map<std::string, Scheduler::Impl::NodesOfRevision> Scheduler::Impl::nodes_by_revision_counted(
    const std::vector<NodeRec>& nodes) {
  std::map<std::string, NodesOfRevision> counted;
  for (std::size_t n = 0; n < nodes.size(); ++n) {
    NodesOfRevision& of = counted[nodes[n].info.revision];
    ++of.states[nodes[n].state];
    of.chips_by_node[n] = static_cast<int>(nodes[n].info.chips.size());
  }
  return counted;
}

std::map<std::string, std::set<std::size_t>> Scheduler::Impl::whole_free_counted(const std::vector<NodeRec>& nodes,
                                                                                 const FreeChips& free) {
  std::map<std::string, std::set<std::size_t>> out;
  for (std::size_t n = 0; n < nodes.size() && n < free.on_node.size(); ++n) {
    if (whole_free(nodes[n], free.on_node[n])) out[nodes[n].info.revision].insert(n);
  }
  return out;
}

std::map<std::string, Scheduler::Impl::ByFree> Scheduler::Impl::nodes_by_free_counted(const std::vector<NodeRec>& nodes,
                                                                                    const FreeChips& free) {
  std::map<std::string, ByFree> out;
  for (std::size_t n = 0; n < nodes.size() && n < free.on_node.size(); ++n) {
    if (free.on_node[n] > 0) out[nodes[n].info.revision].insert({free.on_node[n], n});
  }
  return out;
}

FreeChips FreeChips::counted(const std::vector<NodeRec>& nodes, bool unclaimed_only) {
  FreeChips out;
  out.unclaimed_only = unclaimed_only;
  for (std::size_t n = 0; n < nodes.size(); ++n) out.recount(n, nodes);
  return out;
}

std::pair<int, int> Scheduler::Impl::largest_groups(const NodeInfo& node) {
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

void Scheduler::Impl::file_topology(const NodeInfo* before, const NodeInfo& now) {
  if (before) {
    const auto [numa, switches] = largest_groups(*before);
    largest_numa_nodes.erase(largest_numa_nodes.find(numa));
    largest_switch_groups.erase(largest_switch_groups.find(switches));
  }
  const auto [numa, switches] = largest_groups(now);
  largest_numa_nodes.insert(numa);
  largest_switch_groups.insert(switches);
}

// Topology-aware choice of k chips among `usable` on one node: one NUMA node if possible,
// else one switch group, else spread. Returns (penalty, chips).
std::pair<int, std::vector<std::size_t>> Scheduler::Impl::choose_chips(std::size_t n,
                                                                     const std::vector<std::size_t>& usable,
                                                                     int k) const {
  const auto& chips = nodes[n].info.chips;
  for (int level = 0; level < 2; ++level) {
    std::map<int, std::vector<std::size_t>> groups;
    for (std::size_t p : usable) {
      groups[level == 0 ? chips[p].numa_node : chips[p].switch_group].push_back(p);
    }
    const std::vector<std::size_t>* best = nullptr;
    for (const auto& [g, members] : groups) {
      if (static_cast<int>(members.size()) < k) continue;
      // Best fit inside the node too: use the tightest group, keep whole groups free.
      if (!best || members.size() < best->size()) best = &members;
    }
    if (best) return {level, std::vector<std::size_t>(best->begin(), best->begin() + k)};
  }
  std::map<int, std::vector<std::size_t>> groups;
  for (std::size_t p : usable) groups[chips[p].numa_node].push_back(p);
  std::vector<std::vector<std::size_t>> ordered;
  for (auto& [g, members] : groups) ordered.push_back(members);
  std::stable_sort(ordered.begin(), ordered.end(),
                   [](const auto& a, const auto& b) { return a.size() > b.size(); });
  std::vector<std::size_t> out;
  for (const auto& members : ordered) {
    for (std::size_t p : members) {
      if (static_cast<int>(out.size()) < k) out.push_back(p);
    }
  }
  return {2, out};
}

Scheduler::Impl::QuotaCheck Scheduler::Impl::check_quota(const RequestRec& r, const std::string& revision, int chips,
                                                         const std::map<std::pair<RequestClass, std::string>, int>& used) const {
  if (!kiln_policy() || r.req.maintenance) return {};
  auto quota = knobs.quota(r.req.cls, revision);
  if (!quota) return {};
  auto it = used.find({r.req.cls, revision});
  int in_use = it == used.end() ? 0 : it->second;
  if (in_use + chips <= *quota) return {};
  if (knobs.may_borrow[rank(r.req.cls)]) return {true, true};
  return {false, false};
}

std::optional<Grant> Scheduler::Impl::place_now(const RequestRec& r, TimeMs now,
                                              const PassView& view, const FreeChips& free,
                                              const std::map<std::pair<RequestClass, std::string>, int>& used) const {
  const Request& q = r.req;
  const TimeMs end = now + r.remaining_ms;
  std::set<std::size_t> claim_nodes;
  if (r.claim) {
    for (const ChipRef& c : r.claim->chips) claim_nodes.insert(c.node);
  }
  if (q.nodes == 0) {
    std::optional<std::tuple<int, int, std::size_t, std::size_t>> best_score;
    Grant best;
    const int floor = least_penalty(q.chips);
    const auto consider = [&](std::size_t n) {
      if (!eligible(nodes[n], q)) return;
      if (const auto free_here = claim_nodes.count(n) ? std::nullopt : untouched_free_chips(view, free, n)) {
        // Every free chip of an untouched node is usable and it holds no claim of the request's:
        // its score is at least this one (no node places the chips better than least_penalty), so
        // it is read only if that could beat the best.
        if (*free_here < q.chips) return;
        const auto least = std::make_tuple(1, floor, static_cast<std::size_t>(*free_here - q.chips), n);
        if (best_score && least >= *best_score) return;
      }
      std::vector<std::size_t> usable;
      for (std::size_t p = 0; p < view[n].size(); ++p) {
        if (chip_usable_now(view[n][p], q.id, end)) usable.push_back(p);
      }
      if (static_cast<int>(usable.size()) < q.chips) return;
      QuotaCheck quota = check_quota(r, nodes[n].info.revision, q.chips, used);
      if (!quota.allowed) return;
      auto [penalty, chosen] = choose_chips(n, usable, q.chips);
      // Claimed node first, then topology, then best fit (fewest chips left over), so whole
      // nodes stay free for large requests.
      auto score = std::make_tuple(claim_nodes.count(n) ? 0 : 1, penalty,
                                   usable.size() - static_cast<std::size_t>(q.chips), n);
      if (!best_score || score < *best_score) {
        best_score = score;
        best.request = q.id;
        best.borrowed = quota.borrowed;
        best.chips.clear();
        for (std::size_t p : chosen) best.chips.push_back({n, p});
      }
    };
    if (q.node || knobs.exhaustive_passes) {
      for_each_candidate(q, consider);
    } else {
      // A node whose row the pass made (reservations, its own grants), that holds the claim or
      // that has a free chip claimed may score anything: each is read. Any other node is up with
      // its counted free chips all usable, so its score is at least (1, least penalty, free -
      // chips, index): read in that order, the first that could not beat the best ends the
      // search, as none after it could. Only chips free when the pass began can be placed on:
      // where the pass made more rows than there were nodes with enough of them, the rows made
      // are read among those nodes, in their filing.
      const std::vector<std::size_t>& touched = view.touched_nodes();
      if (touched.size() <= up_nodes_with_free(q.chips)) {
        for (std::size_t i = 0, made = touched.size(); i < made; ++i) consider(touched[i]);
      } else {
        for (const auto& [rev, by_free] : revisions_read(nodes_by_free, q.revision)) {
          for (auto it = by_free.lower_bound({q.chips, 0}); it != by_free.end(); ++it) {
            if (view.touched(it->second)) consider(it->second);
          }
        }
      }
      for (std::size_t n : claim_nodes) {
        if (!view.touched(n)) consider(n);
      }
      for (std::size_t n : claimed_free_nodes) {
        if (!view.touched(n) && !claim_nodes.count(n)) consider(n);
      }
      for (const auto& [rev, by_free] : revisions_read(nodes_by_free, q.revision)) {
        for (auto it = by_free.lower_bound({q.chips, 0}); it != by_free.end(); ++it) {
          const auto [free_here, n] = *it;
          if (view.touched(n) || claim_nodes.count(n) || claimed_free_nodes.count(n)) continue;
          if (best_score &&
              std::make_tuple(1, floor, static_cast<std::size_t>(free_here - q.chips), n) >= *best_score) {
            break;
          }
          consider(n);
        }
      }
    }
    if (best_score) return best;
    return std::nullopt;
  }
  std::map<std::string, std::vector<std::size_t>> by_rev;
  const auto consider = [&](std::size_t n) {
    if (!eligible(nodes[n], q)) return;
    const auto free_here = claim_nodes.count(n) ? std::nullopt : untouched_free_chips(view, free, n);
    const bool whole = free_here ? *free_here == static_cast<int>(nodes[n].chip_lease.size())
                                 : std::all_of(view[n].begin(), view[n].end(), [&](const ChipPlan& c) {
                                     return chip_usable_now(c, q.id, end);
                                   });
    if (whole) by_rev[nodes[n].info.revision].push_back(n);
  };
  if (q.node || knobs.exhaustive_passes) {
    for_each_candidate(q, consider);
  } else {
    // The nodes whose row the pass made, and those with a free chip claimed, are judged by their
    // row; of the others, filed whole by revision, only as many as asked are read per revision:
    // the grant takes the claimed nodes first (those with free chips all read) and then the lowest
    // indexes, which these include.
    const std::vector<std::size_t>& touched = view.touched_nodes();
    if (touched.size() <= static_cast<std::size_t>(free_chips.whole_free_nodes)) {
      for (std::size_t i = 0, made = touched.size(); i < made; ++i) consider(touched[i]);
    } else {
      for (const auto& [rev, filed] : revisions_read(whole_free_by_revision, q.revision)) {
        for (std::size_t n : filed) {
          if (view.touched(n)) consider(n);
        }
      }
    }
    for (std::size_t n : claimed_free_nodes) {
      if (!view.touched(n)) consider(n);
    }
    for (const auto& [rev, filed] : revisions_read(whole_free_by_revision, q.revision)) {
      int taken = 0;
      for (auto it = filed.begin(); it != filed.end() && taken < q.nodes; ++it) {
        if (view.touched(*it) || claimed_free_nodes.count(*it)) continue;
        consider(*it);
        ++taken;
      }
    }
    for (auto& [rev, list] : by_rev) std::sort(list.begin(), list.end());
  }
  for (auto& [rev, list] : by_rev) {
    if (static_cast<int>(list.size()) < q.nodes) continue;
    std::stable_sort(list.begin(), list.end(), [&](std::size_t a, std::size_t b) {
      return claim_nodes.count(a) > claim_nodes.count(b);
    });
    Grant g;
    g.request = q.id;
    int chips = 0;
    for (int i = 0; i < q.nodes; ++i) {
      for (std::size_t p = 0; p < nodes[list[i]].chip_lease.size(); ++p) g.chips.push_back({list[i], p});
      chips += static_cast<int>(nodes[list[i]].chip_lease.size());
    }
    QuotaCheck quota = check_quota(r, rev, chips, used);
    if (!quota.allowed) continue;
    g.borrowed = quota.borrowed;
    return g;
  }
  return std::nullopt;
}

// Earliest time the request could start from expected lease ends and earlier reservations.
Scheduler::Impl::Reservation Scheduler::Impl::reserve(const RequestRec& r, TimeMs now,
                                                      const PassView& view) const {
  const Request& q = r.req;
  // No chip comes free before now, not even one whose lease's grace passed before a tick ended it.
  auto avail = [&](const ChipPlan& c) {
    TimeMs t = c.lease != 0 ? std::max(c.busy_until, now) : now;
    if (c.claimed_by != 0) t = std::max(t, c.claim_end);
    return std::max(t, c.resv_end);
  };
  Reservation best;
  // Where the pass made a node's row it may have reserved or granted chips there: each such node
  // is read. Any other is up, its row as its leases and claims make it, and none of its chips
  // comes free before its filed end (nodes_by_end): the others are read in the order of those
  // ends, up to the first that could not beat what was found.
  const bool by_ends = !q.node && !knobs.exhaustive_passes;
  if (q.nodes == 0) {
    std::optional<std::tuple<TimeMs, std::size_t, std::size_t>> best_score;
    const auto consider = [&](std::size_t n) {
      if (!eligible(nodes[n], q)) return;
      std::vector<std::pair<TimeMs, std::size_t>> times;
      std::size_t free_now = 0;
      for (std::size_t p = 0; p < nodes[n].chip_lease.size(); ++p) {
        const ChipPlan c = view.chip(n, p);
        times.push_back({avail(c), p});
        if (c.lease == 0) ++free_now;
      }
      std::sort(times.begin(), times.end());
      TimeMs start = times[q.chips - 1].first;
      auto score = std::make_tuple(start, free_now, n);
      if (!best_score || score < *best_score) {
        best_score = score;
        best.start = start;
        best.chips.clear();
        for (int i = 0; i < q.chips; ++i) best.chips.push_back({n, times[i].second});
      }
    };
    if (!by_ends) {
      for_each_candidate(q, consider);
    } else {
      for (std::size_t n : view.touched_nodes()) consider(n);
      // An unread node with enough chips free starts now, and scores exactly (now, its free chips,
      // index): those are read in that order (nodes_by_free), up to the first that could not beat
      // the best, and left out of the reading by ends. A request that cannot start now while such
      // nodes exist (its window not open, its quota) reads one of them, not each.
      for (const auto& [rev, by_free] : revisions_read(nodes_by_free, q.revision)) {
        for (auto it = by_free.lower_bound({q.chips, 0}); it != by_free.end(); ++it) {
          const auto [free_here, n] = *it;
          if (best_score && std::make_tuple(now, static_cast<std::size_t>(free_here), n) >= *best_score) break;
          if (!view.touched(n)) consider(n);
        }
      }
      for (const auto& [rev, filed] : revisions_read(nodes_by_end, q.revision)) {
        if (q.chips > static_cast<int>(filed.by_chips.size())) continue;
        const auto& by_end = filed.by_chips[q.chips - 1];
        for (auto it = by_end.lower_bound({kFreeNow + 1, 0}); it != by_end.end(); ++it) {
          const auto [end, n] = *it;
          if (best_score && std::make_tuple(end, std::size_t{0}, n) >= *best_score) break;
          if (!view.touched(n)) consider(n);
        }
      }
    }
  } else {
    std::map<std::string, std::vector<std::pair<TimeMs, std::size_t>>> by_rev;
    const auto start_on = [&](std::size_t n) {
      TimeMs t = now;
      for (std::size_t p = 0; p < nodes[n].chip_lease.size(); ++p) t = std::max(t, avail(view.chip(n, p)));
      return std::make_pair(t, n);
    };
    const auto consider = [&](std::size_t n) {
      if (eligible(nodes[n], q)) by_rev[nodes[n].info.revision].push_back(start_on(n));
    };
    if (!by_ends) {
      for_each_candidate(q, consider);
    } else {
      // Per revision only the nodes earliest free count: those read so far, cut to as many as
      // asked, and then filed ones while one could still take the place of the latest of them.
      for (std::size_t n : view.touched_nodes()) consider(n);
      for (const auto& [rev, filed] : revisions_read(nodes_by_end, q.revision)) {
        std::vector<std::pair<TimeMs, std::size_t>>& list = by_rev[rev];
        std::set<std::pair<TimeMs, std::size_t>> earliest(list.begin(), list.end());
        const auto keep_asked = [&] {
          while (static_cast<int>(earliest.size()) > q.nodes) earliest.erase(std::prev(earliest.end()));
        };
        keep_asked();
        // An unread wholly free node with no chip claimed starts now: those are read by index
        // (whole_free_by_revision), only as many as asked, and left out of the reading by ends,
        // where a claimed one is filed by its claim's end.
        if (auto free_whole = whole_free_by_revision.find(rev); free_whole != whole_free_by_revision.end()) {
          int taken = 0;
          for (auto it = free_whole->second.begin(); it != free_whole->second.end() && taken < q.nodes; ++it) {
            if (view.touched(*it) || claimed_free_nodes.count(*it)) continue;
            earliest.insert(start_on(*it));
            keep_asked();
            ++taken;
          }
        }
        for (auto it = filed.whole.lower_bound({kFreeNow + 1, 0}); it != filed.whole.end(); ++it) {
          const auto [end, n] = *it;
          if (static_cast<int>(earliest.size()) == q.nodes && std::make_pair(end, n) >= *earliest.rbegin()) break;
          if (view.touched(n)) continue;
          earliest.insert(start_on(n));
          keep_asked();
        }
        list.assign(earliest.begin(), earliest.end());
      }
    }
    for (auto& [rev, list] : by_rev) {
      if (static_cast<int>(list.size()) < q.nodes) continue;
      std::sort(list.begin(), list.end());
      TimeMs start = list[q.nodes - 1].first;
      if (start < best.start) {
        best.start = start;
        best.chips.clear();
        for (int i = 0; i < q.nodes; ++i) {
          for (std::size_t p = 0; p < nodes[list[i].second].chip_lease.size(); ++p) {
            best.chips.push_back({list[i].second, p});
          }
        }
      }
    }
  }
  if (best.start != kNever && q.not_before_ms) best.start = std::max(best.start, *q.not_before_ms);
  return best;
}

void Scheduler::Impl::mark_reserved(PassView& view, const std::vector<ChipRef>& chips,
                                     TimeMs start, TimeMs end, RequestId owner) {
  for (const ChipRef& ref : chips) {
    ChipPlan& c = view[ref.node][ref.pos];
    if (start < c.resv_start) {
      c.resv_start = start;
      c.resv_owner = owner;
    }
    c.resv_end = std::max(c.resv_end, end);
  }
}

}  // namespace kiln::scheduler

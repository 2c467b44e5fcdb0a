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

void Scheduler::Impl::recount_free(std::size_t node) {
  free_chips.recount(node, nodes);
  free_unclaimed.recount(node, nodes);
  nodes_by_free.refile(node, nodes[node], free_chips.on_node(node));
  file_ends(node);
  claimed_free_nodes.refile(node, nodes[node]);
}

void Scheduler::Impl::file_ends(std::size_t node) {
  nodes_by_end.refile(node, nodes[node], leases, requests);
  nodes_for_victims.refile(node, nodes[node], leases);
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
  for (const auto& [rev, by] : revisions_read(nodes_for_victims.by_revision(), q.revision)) {
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
    return it != node_index.end() && nodes_for_victims.holds_victims(it->second);
  }
  return nodes_for_victims.any_victims();
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
  std::set<std::size_t> claim_nodes;
  if (r.claim) {
    for (const ChipRef& c : r.claim->chips) claim_nodes.insert(c.node);
  }
  if (q.nodes == 0) return place_chips(r, now, view, free, used, claim_nodes);
  return place_whole_nodes(r, now, view, free, used, claim_nodes);
}

std::optional<Grant> Scheduler::Impl::place_chips(const RequestRec& r, TimeMs now, const PassView& view,
                                                  const FreeChips& free,
                                                  const std::map<std::pair<RequestClass, std::string>, int>& used,
                                                  const std::set<std::size_t>& claim_nodes) const {
  const Request& q = r.req;
  const TimeMs end = now + r.remaining_ms;
  std::optional<std::tuple<int, int, std::size_t, std::size_t>> best_score;
  Grant best;
  const int floor = largest_groups.least_penalty(q.chips);
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
    if (touched.size() <= free_chips.nodes_with_at_least(q.chips)) {
      for (std::size_t i = 0, made = touched.size(); i < made; ++i) consider(touched[i]);
    } else {
      for (const auto& [rev, by_free] : revisions_read(nodes_by_free.by_free(), q.revision)) {
        for (auto it = by_free.lower_bound({q.chips, 0}); it != by_free.end(); ++it) {
          if (view.touched(it->second)) consider(it->second);
        }
      }
    }
    for (std::size_t n : claim_nodes) {
      if (!view.touched(n)) consider(n);
    }
    for (std::size_t n : claimed_free_nodes.nodes()) {
      if (!view.touched(n) && !claim_nodes.count(n)) consider(n);
    }
    for (const auto& [rev, by_free] : revisions_read(nodes_by_free.by_free(), q.revision)) {
      for (auto it = by_free.lower_bound({q.chips, 0}); it != by_free.end(); ++it) {
        const auto [free_here, n] = *it;
        if (view.touched(n) || claim_nodes.count(n) || claimed_free_nodes.contains(n)) continue;
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

std::optional<Grant> Scheduler::Impl::place_whole_nodes(const RequestRec& r, TimeMs now, const PassView& view,
                                                        const FreeChips& free,
                                                        const std::map<std::pair<RequestClass, std::string>, int>& used,
                                                        const std::set<std::size_t>& claim_nodes) const {
  const Request& q = r.req;
  const TimeMs end = now + r.remaining_ms;
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
    if (touched.size() <= static_cast<std::size_t>(free_chips.whole_free_nodes())) {
      for (std::size_t i = 0, made = touched.size(); i < made; ++i) consider(touched[i]);
    } else {
      for (const auto& [rev, filed] : revisions_read(nodes_by_free.whole_free(), q.revision)) {
        for (std::size_t n : filed) {
          if (view.touched(n)) consider(n);
        }
      }
    }
    for (std::size_t n : claimed_free_nodes.nodes()) {
      if (!view.touched(n)) consider(n);
    }
    for (const auto& [rev, filed] : revisions_read(nodes_by_free.whole_free(), q.revision)) {
      int taken = 0;
      for (auto it = filed.begin(); it != filed.end() && taken < q.nodes; ++it) {
        if (view.touched(*it) || claimed_free_nodes.contains(*it)) continue;
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
  Reservation best;
  // Where the pass made a node's row it may have reserved or granted chips there: each such node
  // is read. Any other is up, its row as its leases and claims make it, and none of its chips
  // comes free before its filed end (nodes_by_end): the others are read in the order of those
  // ends, up to the first that could not beat what was found.
  const bool by_ends = !q.node && !knobs.exhaustive_passes;
  if (q.nodes == 0) {
    reserve_chips(r, now, view, by_ends, best);
  } else {
    reserve_whole_nodes(r, now, view, by_ends, best);
  }
  if (best.start != kNever && q.not_before_ms) best.start = std::max(best.start, *q.not_before_ms);
  return best;
}

void Scheduler::Impl::reserve_chips(const RequestRec& r, TimeMs now, const PassView& view, bool by_ends,
                                    Reservation& best) const {
  const Request& q = r.req;
  std::optional<std::tuple<TimeMs, std::size_t, std::size_t>> best_score;
  const auto consider = [&](std::size_t n) {
    if (!eligible(nodes[n], q)) return;
    std::vector<std::pair<TimeMs, std::size_t>> times;
    std::size_t free_now = 0;
    for (std::size_t p = 0; p < nodes[n].chip_lease.size(); ++p) {
      const ChipPlan c = view.chip(n, p);
      times.push_back({chip_available(now, c), p});
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
    for (const auto& [rev, by_free] : revisions_read(nodes_by_free.by_free(), q.revision)) {
      for (auto it = by_free.lower_bound({q.chips, 0}); it != by_free.end(); ++it) {
        const auto [free_here, n] = *it;
        if (best_score && std::make_tuple(now, static_cast<std::size_t>(free_here), n) >= *best_score) break;
        if (!view.touched(n)) consider(n);
      }
    }
    for (const auto& [rev, filed] : revisions_read(nodes_by_end.by_revision(), q.revision)) {
      if (q.chips > static_cast<int>(filed.by_chips.size())) continue;
      const auto& by_end = filed.by_chips[q.chips - 1];
      for (auto it = by_end.lower_bound({kFreeNow + 1, 0}); it != by_end.end(); ++it) {
        const auto [end, n] = *it;
        if (best_score && std::make_tuple(end, std::size_t{0}, n) >= *best_score) break;
        if (!view.touched(n)) consider(n);
      }
    }
  }
}

void Scheduler::Impl::reserve_whole_nodes(const RequestRec& r, TimeMs now, const PassView& view, bool by_ends,
                                          Reservation& best) const {
  const Request& q = r.req;
  std::map<std::string, std::vector<std::pair<TimeMs, std::size_t>>> by_rev;
  const auto start_on = [&](std::size_t n) {
    TimeMs t = now;
    for (std::size_t p = 0; p < nodes[n].chip_lease.size(); ++p) {
      t = std::max(t, chip_available(now, view.chip(n, p)));
    }
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
    for (const auto& [rev, filed] : revisions_read(nodes_by_end.by_revision(), q.revision)) {
      std::vector<std::pair<TimeMs, std::size_t>>& list = by_rev[rev];
      std::set<std::pair<TimeMs, std::size_t>> earliest(list.begin(), list.end());
      const auto keep_asked = [&] {
        while (static_cast<int>(earliest.size()) > q.nodes) earliest.erase(std::prev(earliest.end()));
      };
      keep_asked();
      // An unread wholly free node with no chip claimed starts now: those are read by index
      // (NodesByFree::whole_free), only as many as asked, and left out of the reading by ends,
      // where a claimed one is filed by its claim's end.
      if (auto free_whole = nodes_by_free.whole_free().find(rev); free_whole != nodes_by_free.whole_free().end()) {
        int taken = 0;
        for (auto it = free_whole->second.begin(); it != free_whole->second.end() && taken < q.nodes; ++it) {
          if (view.touched(*it) || claimed_free_nodes.contains(*it)) continue;
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

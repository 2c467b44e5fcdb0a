// Why a request waits, in words for `kiln queue --why`.
#include "coordinator/scheduler/scheduler_impl.h"

#include <fmt/format.h>

namespace kiln::scheduler {

// Why a request cannot start now, in words for `kiln queue --why`.
std::vector<std::string> Scheduler::Impl::reasons_for(const RequestRec& r, TimeMs now,
                                                    const PassView& view,
                                                    const std::map<std::pair<RequestClass, std::string>, int>& used,
                                                    std::size_t ahead, FleetSummary& fleet) const {
  const Request& q = r.req;
  std::vector<std::string> out;
  const std::string rev_text = q.node       ? fmt::format("node {}", *q.node)
                               : q.revision ? fmt::format("revision {}", *q.revision)
                                            : "any revision";
  if (q.not_before_ms && *q.not_before_ms > now) {
    out.push_back(fmt::format("its window opens at {}", format_clock(*q.not_before_ms)));
  }
  // Maintenance may enter its draining or quarantined node: for it, that node is in service.
  const auto in_service = [&](const NodeRec& node) {
    return node.state == NodeState::up || (q.maintenance && q.node && node.state != NodeState::lost);
  };
  const auto considered = [&](const NodeRec& node) {
    return (!q.revision || node.info.revision == *q.revision) && (!q.node || node.info.id == *q.node);
  };
  // The nodes read chip by chip: every node when the knobs ask for it, a pinned node, and otherwise,
  // of the nodes with chips free when the pass began (its grants only take chips), those the pass
  // read and those with a free chip claimed. Any other is as filed: its counted free chips, none
  // reserved or claimed (filed_free, below).
  std::vector<std::size_t> read;
  const auto pinned = q.node ? node_index.find(*q.node) : node_index.end();
  const bool filed_free = !knobs.exhaustive_passes && !q.node;
  if (knobs.exhaustive_passes) {
    for (std::size_t n = 0; n < nodes.size(); ++n) read.push_back(n);
  } else if (q.node) {
    if (pinned != node_index.end()) read.push_back(pinned->second);
  } else {
    for (std::size_t n : view.touched_nodes()) {
      if (free_chips.on_node(n) > 0) read.push_back(n);
    }
    read.insert(read.end(), claimed_free_nodes.nodes().begin(), claimed_free_nodes.nodes().end());
    std::sort(read.begin(), read.end());
    read.erase(std::unique(read.begin(), read.end()), read.end());
  }
  std::map<NodeState, int> pinned_states;
  if (q.node) {
    if (pinned != node_index.end() && considered(nodes[pinned->second])) {
      const NodeRec& node = nodes[pinned->second];
      ++pinned_states[in_service(node) ? NodeState::up : node.state];
    }
  } else if (!fleet.states_by_revision.count(q.revision)) {
    std::map<NodeState, int>& counted = fleet.states_by_revision[q.revision];
    if (knobs.exhaustive_passes) {
      for (const NodeRec& node : nodes) {
        if (considered(node)) ++counted[in_service(node) ? NodeState::up : node.state];
      }
    } else {
      // Not pinned to a node, a request counts a node in service only when it is up: the states
      // as counted.
      for (const auto& [rev, of] : fleet_by_revision.by_revision()) {
        if (q.revision && rev != *q.revision) continue;
        for (const auto& [state, count] : of.states) counted[state] += count;
      }
    }
  }
  std::map<NodeState, int>& states = q.node ? pinned_states : fleet.states_by_revision.at(q.revision);
  // The node with the most chips free, the first by index among equals.
  std::size_t best_free = 0;
  std::optional<std::size_t> best;
  const auto offer = [&](std::size_t n, std::size_t free) {
    if (free > best_free || (free == best_free && free > 0 && best && n < *best)) {
      best_free = free;
      best = n;
    }
  };
  std::map<std::string, int> whole_free_by_rev;
  for (std::size_t n : read) {
    const NodeRec& node = nodes[n];
    if (!considered(node) || !in_service(node)) continue;
    std::size_t free = 0;
    // Chip by chip: a node the pass has not read gets no row made for it.
    const std::size_t chips = node.chip_lease.size();
    for (std::size_t p = 0; p < chips; ++p) free += view.chip(n, p).lease == 0 ? 1 : 0;
    offer(n, free);
    if (free == chips) ++whole_free_by_rev[node.info.revision];
  }
  if (filed_free) {
    const auto is_read = [&](std::size_t n) { return std::binary_search(read.begin(), read.end(), n); };
    for (const auto& [rev, by_free] : revisions_read(nodes_by_free.by_free(), q.revision)) {
      // Down the filing by free chips: the first node not read at the largest count it has.
      for (auto top = by_free.end(); top != by_free.begin();) {
        const int most = std::prev(top)->first;
        const auto first = by_free.lower_bound({most, 0});
        const auto unread = std::find_if(first, top, [&](const auto& entry) { return !is_read(entry.second); });
        if (unread != top) {
          offer(unread->second, static_cast<std::size_t>(most));
          break;
        }
        top = first;
      }
      if (auto whole = nodes_by_free.whole_free().find(rev); whole != nodes_by_free.whole_free().end()) {
        const auto read_here = std::count_if(read.begin(), read.end(), [&](std::size_t n) { return whole->second.count(n) != 0; });
        const auto unread = static_cast<int>(whole->second.size()) - static_cast<int>(read_here);
        if (unread > 0) whole_free_by_rev[rev] += unread;
      }
    }
  }
  const std::string best_node = best ? nodes[*best].info.id : std::string();
  int up = states[NodeState::up];
  if (up == 0) {
    out.push_back(fmt::format("no node of {} is up ({} quarantined, {} draining, {} lost)",
                              rev_text, states[NodeState::quarantined],
                              states[NodeState::draining], states[NodeState::lost]));
    return out;
  }
  if (states[NodeState::quarantined] + states[NodeState::lost] + states[NodeState::draining] > 0) {
    out.push_back(fmt::format("{} of the nodes of {} are out of service", 
                              states[NodeState::quarantined] + states[NodeState::lost] +
                                  states[NodeState::draining],
                              rev_text));
  }
  if (q.nodes == 0 && static_cast<int>(best_free) < q.chips) {
    out.push_back(fmt::format("no node of {} has {} free chips (most free: {}{})", rev_text,
                              q.chips, best_free,
                              best_node.empty() ? "" : fmt::format(" on {}", best_node)));
  }
  if (q.nodes > 0) {
    int best_rev = 0;
    for (const auto& [rev, count] : whole_free_by_rev) best_rev = std::max(best_rev, count);
    if (best_rev < q.nodes) {
      out.push_back(fmt::format("{} needs {} whole free nodes of one revision, {} are free",
                                rev_text, q.nodes, best_rev));
    }
  }
  if (kiln_policy()) {
    if (fleet.chips_by_revision.empty()) {
      if (knobs.exhaustive_passes) {
        for (const NodeRec& node : nodes) fleet.chips_by_revision[node.info.revision] = static_cast<int>(node.info.chips.size());
      } else {
        for (const auto& [rev, of] : fleet_by_revision.by_revision()) fleet.chips_by_revision[rev] = of.chips_by_node.rbegin()->second;
      }
    }
    for (const auto& [rev, chips_per_node] : fleet.chips_by_revision) {
      if (q.revision && rev != *q.revision) continue;
      auto quota = knobs.quota(q.cls, rev);
      if (!quota || knobs.may_borrow[rank(q.cls)]) continue;
      auto it = used.find({q.cls, rev});
      int in_use = it == used.end() ? 0 : it->second;
      const int want = q.nodes > 0 ? q.nodes * chips_per_node : q.chips;
      if (in_use + want > *quota) {
        out.push_back(fmt::format("quota of class {} on {} is used up ({}/{} chips)",
                                  to_string(q.cls), rev, in_use, *quota));
      }
    }
  }
  // Reservations and claims of requests ahead of it on chips it could otherwise use.
  const TimeMs end = now + r.remaining_ms;
  std::map<RequestId, ReservationInfo> blocking;
  std::map<RequestId, std::set<std::string>> claims;
  for (std::size_t n : read) {
    if (!eligible(nodes[n], q)) continue;
    for (std::size_t p = 0; p < nodes[n].chip_lease.size(); ++p) {
      const ChipPlan c = view.chip(n, p);
      if (c.lease != 0) continue;
      if (c.claimed_by != 0 && c.claimed_by != q.id) {
        claims[c.claimed_by].insert(nodes[n].info.id);
      } else if (end > c.resv_start && c.resv_owner != 0 && c.resv_owner != q.id) {
        ReservationInfo& info = blocking[c.resv_owner];
        info.nodes.insert(nodes[n].info.id);
        info.start = std::min(info.start, c.resv_start);
        info.end = std::max(info.end, c.resv_end);
      }
    }
  }
  for (const auto& [owner, info] : blocking) {
    std::string names;
    for (const std::string& name : info.nodes) names += (names.empty() ? "" : ",") + name;
    out.push_back(fmt::format("reservation for {} holds {} from {} until {}", name_of(owner),
                              names, format_clock(info.start), format_clock(info.end)));
  }
  for (const auto& [owner, names] : claims) {
    std::string joined;
    for (const std::string& name : names) joined += (joined.empty() ? "" : ",") + name;
    out.push_back(fmt::format("free chips on {} are held for {} (preemption under way)",
                              joined, name_of(owner)));
  }
  if (r.claim) {
    std::string victims;
    for (LeaseId v : r.claim->victims) {
      auto it = leases.find(v);
      if (it == leases.end()) continue;
      victims += fmt::format("{}{}", victims.empty() ? "" : ", ", name_of(it->second.request));
    }
    if (!victims.empty()) {
      out.push_back(fmt::format("preempting {} for it; the grace ends in {}", victims,
                                human_duration(r.claim->ready_ms - now)));
    }
  }
  if (ahead > 0) {
    out.push_back(knobs.policy == Policy::fifo
                      ? fmt::format("{} requests ahead of it in first-in first-out order", ahead)
                      : fmt::format("{} requests of higher priority or older are ahead of it",
                                    ahead));
  }
  return out;
}

}  // namespace kiln::scheduler

// Why a request waits, in words for `kiln queue --why`.
#include "coordinator/scheduler/scheduler_impl.h"

#include <fmt/format.h>

namespace kiln::scheduler {

// Why a request cannot start now, in words for `kiln queue --why`.
std::vector<std::string> Scheduler::Impl::reasons_for(const RequestRec& r, TimeMs now,
                                                    const PassView& view,
                                                    const std::map<std::pair<RequestClass, std::string>, int>& used,
                                                    std::size_t ahead) const {
  const Request& q = r.req;
  std::vector<std::string> out;
  const std::string rev_text = q.node       ? fmt::format("node {}", *q.node)
                               : q.revision ? fmt::format("revision {}", *q.revision)
                                            : "any revision";
  if (q.not_before_ms && *q.not_before_ms > now) {
    out.push_back(fmt::format("its window opens at {}", format_clock(*q.not_before_ms)));
  }
  std::map<NodeState, int> states;
  std::size_t best_free = 0;
  std::string best_node;
  int whole_free = 0;
  std::map<std::string, int> whole_free_by_rev;
  for (std::size_t n = 0; n < nodes.size(); ++n) {
    const NodeRec& node = nodes[n];
    if (q.revision && node.info.revision != *q.revision) continue;
    if (q.node && node.info.id != *q.node) continue;
    // Maintenance may enter its draining or quarantined node: for it, that node is in service.
    const bool in_service = node.state == NodeState::up ||
                            (q.maintenance && q.node && node.state != NodeState::lost);
    ++states[in_service ? NodeState::up : node.state];
    if (!in_service) continue;
    std::size_t free = 0;
    for (const ChipPlan& c : view[n]) free += c.lease == 0 ? 1 : 0;
    if (free > best_free) {
      best_free = free;
      best_node = node.info.id;
    }
    if (free == view[n].size()) {
      ++whole_free;
      ++whole_free_by_rev[node.info.revision];
    }
  }
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
    std::set<std::string> revs;
    for (const NodeRec& node : nodes) {
      if (!q.revision || node.info.revision == *q.revision) revs.insert(node.info.revision);
    }
    for (const std::string& rev : revs) {
      auto quota = knobs.quota(q.cls, rev);
      if (!quota || knobs.may_borrow[rank(q.cls)]) continue;
      auto it = used.find({q.cls, rev});
      int in_use = it == used.end() ? 0 : it->second;
      int want = q.chips;
      if (q.nodes > 0) {
        for (const NodeRec& node : nodes) {
          if (node.info.revision == rev) want = q.nodes * static_cast<int>(node.info.chips.size());
        }
      }
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
  for (std::size_t n = 0; n < nodes.size(); ++n) {
    if (!eligible(nodes[n], q)) continue;
    for (const ChipPlan& c : view[n]) {
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

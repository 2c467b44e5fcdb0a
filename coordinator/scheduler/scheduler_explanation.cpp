// Why a request waits, in words for `kiln queue --why`.
#include "coordinator/scheduler/scheduler_impl.h"

#include <fmt/format.h>

namespace kiln::scheduler {

// The reasons one request waits, as a pass sees them at `now`. Of the nodes with chips free when
// the pass began (the only ones with any now) it reads those the pass read and those with a free
// chip claimed, the others from their filings, and the fleet's summary (filled on first use),
// unless the knobs ask every pass to read every node.
class Scheduler::Impl::WaitReasons {
 public:
  WaitReasons(const Impl& s, const RequestRec& r, TimeMs now, const PassView& view,
              const std::map<std::pair<RequestClass, std::string>, int>& used, FleetSummary& fleet)
      : s_(s), r_(r), q_(r.req), now_(now), view_(view), used_(used), fleet_(fleet) {}

  std::vector<std::string> say(std::size_t ahead) &&;

 private:
  // Maintenance may enter its draining or quarantined node: for it, that node is in service.
  bool in_service(const NodeRec& node) const {
    return node.state == NodeState::up || (q_.maintenance && q_.node && node.state != NodeState::lost);
  }
  bool considered(const NodeRec& node) const {
    return (!q_.revision || node.info.revision == *q_.revision) && (!q_.node || node.info.id == *q_.node);
  }
  // The nodes read chip by chip (read_).
  void choose_nodes_read();
  // How many nodes the request may use are in each state.
  std::map<NodeState, int>& states();
  // The node with the most chips free, and the wholly free nodes by revision.
  void count_free();
  void offer(std::size_t n, std::size_t free);
  // Whether a fleet out of service explains it all; says how much of it is.
  bool out_of_service(std::map<NodeState, int>& states);
  void say_chips();
  void say_quotas();
  // Reservations and claims of requests ahead of it on chips it could otherwise use, and its own
  // preemption under way.
  void say_held();

  const Impl& s_;
  const RequestRec& r_;
  const Request& q_;
  const TimeMs now_;
  const PassView& view_;
  const std::map<std::pair<RequestClass, std::string>, int>& used_;
  FleetSummary& fleet_;
  std::vector<std::string> out_;
  std::string rev_text_;
  std::vector<std::size_t> read_;
  std::map<NodeState, int> pinned_states_;  // a pinned request's node, in its state
  std::size_t best_free_ = 0;
  std::optional<std::size_t> best_;
  std::map<std::string, int> whole_free_by_rev_;
};

void Scheduler::Impl::WaitReasons::choose_nodes_read() {
  // Every node when the knobs ask for it, a pinned node, and otherwise, of the nodes with chips free
  // when the pass began (its grants only take chips), those the pass read and those with a free
  // chip claimed. Any other is as filed: its counted free chips, none reserved or claimed.
  if (s_.knobs.exhaustive_passes) {
    for (std::size_t n = 0; n < s_.nodes.size(); ++n) read_.push_back(n);
  } else if (q_.node) {
    if (auto pinned = s_.node_index.find(*q_.node); pinned != s_.node_index.end()) read_.push_back(pinned->second);
  } else {
    for (std::size_t n : view_.touched_nodes()) {
      if (s_.free_chips.on_node(n) > 0) read_.push_back(n);
    }
    read_.insert(read_.end(), s_.claimed_free_nodes.nodes().begin(), s_.claimed_free_nodes.nodes().end());
    std::sort(read_.begin(), read_.end());
    read_.erase(std::unique(read_.begin(), read_.end()), read_.end());
  }
}

std::map<NodeState, int>& Scheduler::Impl::WaitReasons::states() {
  if (q_.node) {
    auto pinned = s_.node_index.find(*q_.node);
    if (pinned != s_.node_index.end() && considered(s_.nodes[pinned->second])) {
      const NodeRec& node = s_.nodes[pinned->second];
      ++pinned_states_[in_service(node) ? NodeState::up : node.state];
    }
    return pinned_states_;
  }
  if (!fleet_.states_by_revision.count(q_.revision)) {
    std::map<NodeState, int>& counted = fleet_.states_by_revision[q_.revision];
    if (s_.knobs.exhaustive_passes) {
      for (const NodeRec& node : s_.nodes) {
        if (considered(node)) ++counted[in_service(node) ? NodeState::up : node.state];
      }
    } else {
      // Not pinned to a node, a request counts a node in service only when it is up: the states as
      // counted.
      for (const auto& [rev, of] : s_.fleet_by_revision.by_revision()) {
        if (q_.revision && rev != *q_.revision) continue;
        for (const auto& [state, count] : of.states) counted[state] += count;
      }
    }
  }
  return fleet_.states_by_revision.at(q_.revision);
}

void Scheduler::Impl::WaitReasons::offer(std::size_t n, std::size_t free) {
  // The node with the most chips free, the first by index among equals.
  if (free > best_free_ || (free == best_free_ && free > 0 && best_ && n < *best_)) {
    best_free_ = free;
    best_ = n;
  }
}

void Scheduler::Impl::WaitReasons::count_free() {
  for (std::size_t n : read_) {
    const NodeRec& node = s_.nodes[n];
    if (!considered(node) || !in_service(node)) continue;
    std::size_t free = 0;
    // Chip by chip: a node the pass has not read gets no row made for it.
    const std::size_t chips = node.chip_lease.size();
    for (std::size_t p = 0; p < chips; ++p) free += view_.chip(n, p).lease == 0 ? 1 : 0;
    offer(n, free);
    if (free == chips) ++whole_free_by_rev_[node.info.revision];
  }
  if (s_.knobs.exhaustive_passes || q_.node) return;
  const auto is_read = [&](std::size_t n) { return std::binary_search(read_.begin(), read_.end(), n); };
  for (const auto& [rev, by_free] : revisions_read(s_.nodes_by_free.by_free(), q_.revision)) {
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
    if (auto whole = s_.nodes_by_free.whole_free().find(rev); whole != s_.nodes_by_free.whole_free().end()) {
      const auto read_here =
          std::count_if(read_.begin(), read_.end(), [&](std::size_t n) { return whole->second.count(n) != 0; });
      const auto unread = static_cast<int>(whole->second.size()) - static_cast<int>(read_here);
      if (unread > 0) whole_free_by_rev_[rev] += unread;
    }
  }
}

bool Scheduler::Impl::WaitReasons::out_of_service(std::map<NodeState, int>& states) {
  if (states[NodeState::up] == 0) {
    out_.push_back(fmt::format("no node of {} is up ({} quarantined, {} draining, {} lost)", rev_text_,
                               states[NodeState::quarantined], states[NodeState::draining], states[NodeState::lost]));
    return true;
  }
  if (states[NodeState::quarantined] + states[NodeState::lost] + states[NodeState::draining] > 0) {
    out_.push_back(fmt::format("{} of the nodes of {} are out of service",
                               states[NodeState::quarantined] + states[NodeState::lost] + states[NodeState::draining],
                               rev_text_));
  }
  return false;
}

void Scheduler::Impl::WaitReasons::say_chips() {
  const std::string best_node = best_ ? s_.nodes[*best_].info.id : std::string();
  if (q_.nodes == 0 && static_cast<int>(best_free_) < q_.chips) {
    out_.push_back(fmt::format("no node of {} has {} free chips (most free: {}{})", rev_text_, q_.chips, best_free_,
                               best_node.empty() ? "" : fmt::format(" on {}", best_node)));
  }
  if (q_.nodes > 0) {
    int best_rev = 0;
    for (const auto& [rev, count] : whole_free_by_rev_) best_rev = std::max(best_rev, count);
    if (best_rev < q_.nodes) {
      out_.push_back(fmt::format("{} needs {} whole free nodes of one revision, {} are free", rev_text_, q_.nodes,
                                 best_rev));
    }
  }
}

void Scheduler::Impl::WaitReasons::say_quotas() {
  if (fleet_.chips_by_revision.empty()) {
    if (s_.knobs.exhaustive_passes) {
      for (const NodeRec& node : s_.nodes) {
        fleet_.chips_by_revision[node.info.revision] = static_cast<int>(node.info.chips.size());
      }
    } else {
      for (const auto& [rev, of] : s_.fleet_by_revision.by_revision()) {
        fleet_.chips_by_revision[rev] = of.chips_by_node.rbegin()->second;
      }
    }
  }
  for (const auto& [rev, chips_per_node] : fleet_.chips_by_revision) {
    if (q_.revision && rev != *q_.revision) continue;
    auto quota = s_.knobs.quota(q_.cls, rev);
    if (!quota || s_.knobs.may_borrow[rank(q_.cls)]) continue;
    auto it = used_.find({q_.cls, rev});
    int in_use = it == used_.end() ? 0 : it->second;
    const int want = q_.nodes > 0 ? q_.nodes * chips_per_node : q_.chips;
    if (in_use + want > *quota) {
      out_.push_back(fmt::format("quota of class {} on {} is used up ({}/{} chips)", to_string(q_.cls), rev, in_use,
                                 *quota));
    }
  }
}

void Scheduler::Impl::WaitReasons::say_held() {
  const TimeMs end = now_ + r_.remaining_ms;
  std::map<RequestId, ReservationInfo> blocking;
  std::map<RequestId, std::set<std::string>> claims;
  for (std::size_t n : read_) {
    if (!s_.eligible(s_.nodes[n], q_)) continue;
    for (std::size_t p = 0; p < s_.nodes[n].chip_lease.size(); ++p) {
      const ChipPlan c = view_.chip(n, p);
      if (c.lease != 0) continue;
      if (c.claimed_by != 0 && c.claimed_by != q_.id) {
        claims[c.claimed_by].insert(s_.nodes[n].info.id);
      } else if (end > c.resv_start && c.resv_owner != 0 && c.resv_owner != q_.id) {
        ReservationInfo& info = blocking[c.resv_owner];
        info.nodes.insert(s_.nodes[n].info.id);
        info.start = std::min(info.start, c.resv_start);
        info.end = std::max(info.end, c.resv_end);
      }
    }
  }
  const auto joined = [](const std::set<std::string>& names) {
    std::string out;
    for (const std::string& name : names) out += (out.empty() ? "" : ",") + name;
    return out;
  };
  for (const auto& [owner, info] : blocking) {
    out_.push_back(fmt::format("reservation for {} holds {} from {} until {}", s_.name_of(owner), joined(info.nodes),
                               format_clock(info.start), format_clock(info.end)));
  }
  for (const auto& [owner, names] : claims) {
    out_.push_back(
        fmt::format("free chips on {} are held for {} (preemption under way)", joined(names), s_.name_of(owner)));
  }
  if (!r_.claim) return;
  std::string victims;
  for (LeaseId v : r_.claim->victims) {
    auto it = s_.leases.find(v);
    if (it == s_.leases.end()) continue;
    victims += fmt::format("{}{}", victims.empty() ? "" : ", ", s_.name_of(it->second.request));
  }
  if (!victims.empty()) {
    out_.push_back(fmt::format("preempting {} for it; the grace ends in {}", victims,
                               human_duration(r_.claim->ready_ms - now_)));
  }
}

std::vector<std::string> Scheduler::Impl::WaitReasons::say(std::size_t ahead) && {
  rev_text_ = q_.node ? fmt::format("node {}", *q_.node) : q_.revision ? fmt::format("revision {}", *q_.revision)
                                                                       : "any revision";
  if (q_.not_before_ms && *q_.not_before_ms > now_) {
    out_.push_back(fmt::format("its window opens at {}", format_clock(*q_.not_before_ms)));
  }
  choose_nodes_read();
  std::map<NodeState, int>& counted = states();
  count_free();
  if (out_of_service(counted)) return std::move(out_);
  say_chips();
  if (s_.kiln_policy()) say_quotas();
  say_held();
  if (ahead > 0) {
    out_.push_back(s_.knobs.policy == Policy::fifo
                       ? fmt::format("{} requests ahead of it in first-in first-out order", ahead)
                       : fmt::format("{} requests of higher priority or older are ahead of it", ahead));
  }
  return std::move(out_);
}

std::vector<std::string> Scheduler::Impl::reasons_for(const RequestRec& r, TimeMs now, const PassView& view,
                                                      const std::map<std::pair<RequestClass, std::string>, int>& used,
                                                      std::size_t ahead, FleetSummary& fleet) const {
  return WaitReasons(*this, r, now, view, used, fleet).say(ahead);
}

}  // namespace kiln::scheduler

// Preemption with notice: which experiment leases to notify so that an overdue request starts at
// the end of their grace, losing the least work.
#include "coordinator/scheduler/scheduler_impl.h"

#include <fmt/format.h>

namespace kiln::scheduler {

NoticeFiled Scheduler::Impl::notice_state(const LeaseRec& l, TimeMs at) const {
  NoticeFiled out;
  out.free = lost_work(l, at) == 0;
  out.recheck = kNever;
  const TimeMs last = last_checkpoint(l, at);
  if (const DurationMs every = l.checkpoint_interval_ms; every > 0) {
    // `last` moves at the next periodic checkpoint, and the window with it.
    out.recheck = last_periodic_checkpoint(l, at) + every;
    if (const TimeMs window = last + every - knobs.grace_ms; window > at) {
      out.window = window;
      out.recheck = std::min(out.recheck, window);
    }
  }
  // A checkpoint a grace or more ahead of `at` (a lease that starts later) loses nothing until
  // the grace would end past it.
  if (at <= last - knobs.grace_ms) out.recheck = std::min(out.recheck, last - knobs.grace_ms + 1);
  return out;
}

Scheduler::Impl::FreeNotices Scheduler::Impl::free_notices(TimeMs now) const {
  FreeNotices out;
  if (knobs.exhaustive_passes || now < without_notice.filed_at()) {
    // The reference passes, and a question about an earlier moment than the filing holds for,
    // read every lease.
    for (const auto& [id, filed] : without_notice.entries()) {
      const NoticeFiled state = notice_state(leases.at(id), now);
      out.now = out.now || state.free;
      if (state.window) out.next = std::min(out.next, *state.window);
    }
    return out;
  }
  while (const auto due = without_notice.first_to_recheck(now)) {
    without_notice.place(*due, notice_state(leases.at(*due), now));
  }
  without_notice.mark_filed_at(now);
  out.now = without_notice.any_free();
  out.next = without_notice.next_window().value_or(kNever);
  return out;
}

// One search for the experiment leases whose notice lets a request start at the end of the grace,
// losing the least work.
class Scheduler::Impl::VictimSearch {
 public:
  VictimSearch(const Impl& s, const RequestRec& r, TimeMs now, const PassView& view,
               const std::map<std::pair<RequestClass, std::string>, int>& used)
      : s_(s), q_(r.req), now_(now), view_(view), used_(used), ready_(now + s.knobs.grace_ms),
        end_(ready_ + r.remaining_ms) {}

  std::optional<Claim> run() &&;

 private:
  // Cost order: borrowed leases first (they run on capacity lent to them, reclaimed first), then
  // least lost work, then fewest chips disturbed.
  using Cost = std::tuple<int, std::int64_t, int>;

  // A chip can serve the demand at `ready` if it is free, already winding down under notice, and no
  // earlier reservation needs it before the demand would end.
  bool soon_free(const ChipPlan& c) const;
  bool candidate(LeaseId id) const;
  bool within_quota(const std::string& rev, int chips) const;
  Cost cost_of(const LeaseRec& l) const {
    return {l.borrowed ? 0 : 1, s_.lost_work(l, now_), static_cast<int>(l.chips.size())};
  }
  static void add_cost(Cost& total, const Cost& more) {
    std::get<0>(total) += std::get<0>(more);
    std::get<1>(total) += std::get<1>(more);
    std::get<2>(total) += std::get<2>(more);
  }
  // Whether the chips coming free on node `n` serve the request alone.
  bool serves_alone(std::size_t n) const;
  // For a request of chips on one node; false if it needs no victims (it only has to wait).
  bool search_one_node();
  // The cheapest set of victims on node `n`; false if the chips coming free there serve alone.
  bool search_node(std::size_t n);
  // For a request of whole nodes; false if it needs no victims.
  bool search_whole_nodes();

  const Impl& s_;
  const Request& q_;
  const TimeMs now_;
  const PassView& view_;
  const std::map<std::pair<RequestClass, std::string>, int>& used_;
  const TimeMs ready_;
  const TimeMs end_;
  std::optional<Cost> best_cost_;
  Claim best_;
};

bool Scheduler::Impl::VictimSearch::soon_free(const ChipPlan& c) const {
  if (c.claimed_by != 0 && c.claimed_by != q_.id) return false;
  if (end_ > c.resv_start) return false;
  if (c.lease == 0) return true;
  auto it = s_.leases.find(c.lease);
  return it != s_.leases.end() && it->second.grace_deadline_ms.has_value();
}

bool Scheduler::Impl::VictimSearch::candidate(LeaseId id) const {
  auto found = s_.leases.find(id);
  if (found == s_.leases.end()) return false;
  const LeaseRec& l = found->second;
  if (l.grace_deadline_ms || !preemptible(l.cls, q_.cls)) return false;
  const RequestRec& holder = s_.requests.at(l.request);
  if (holder.req.maintenance || holder.preempted_by.count(q_.id)) return false;
  for (const ChipRef& c : l.chips) {
    const ChipPlan plan = view_.chip(c.node, c.pos);
    if ((plan.claimed_by != 0 && plan.claimed_by != q_.id) || end_ > plan.resv_start) return false;
  }
  return true;
}

bool Scheduler::Impl::VictimSearch::within_quota(const std::string& rev, int chips) const {
  if (!s_.kiln_policy()) return false;
  auto quota = s_.knobs.quota(q_.cls, rev);
  if (!quota) return true;
  auto it = used_.find({q_.cls, rev});
  return (it == used_.end() ? 0 : it->second) + chips <= *quota;
}

bool Scheduler::Impl::VictimSearch::serves_alone(std::size_t n) const {
  if (!s_.eligible(s_.nodes[n], q_) || !within_quota(s_.nodes[n].info.revision, q_.chips)) return false;
  int have = 0;
  for (std::size_t p = 0; p < s_.nodes[n].chip_lease.size(); ++p) have += soon_free(view_.chip(n, p)) ? 1 : 0;
  return have >= q_.chips;
}

bool Scheduler::Impl::VictimSearch::search_one_node() {
  // A node where the chips coming free serve the request alone ends the search, whatever the
  // others hold: those are read first.
  if (q_.node) {
    auto it = s_.node_index.find(*q_.node);
    if (it != s_.node_index.end() && serves_alone(it->second)) return false;
  } else if (!s_.knobs.exhaustive_passes) {
    for (const auto& [rev, by] : revisions_read(s_.nodes_for_victims.by_revision(), q_.revision)) {
      for (auto it = by.by_soon_free.lower_bound({q_.chips, 0}); it != by.by_soon_free.end(); ++it) {
        if (serves_alone(it->second)) return false;
      }
    }
  }
  for (std::size_t n : s_.victim_nodes(q_)) {
    if (!s_.eligible(s_.nodes[n], q_) || !within_quota(s_.nodes[n].info.revision, q_.chips)) continue;
    if (!search_node(n)) return false;
  }
  return true;
}

bool Scheduler::Impl::VictimSearch::search_node(std::size_t n) {
  const std::size_t chips = s_.nodes[n].chip_lease.size();
  int have = 0;
  std::set<LeaseId> cands;
  for (std::size_t p = 0; p < chips; ++p) {
    const ChipPlan c = view_.chip(n, p);
    if (soon_free(c)) {
      ++have;
    } else if (c.lease != 0 && candidate(c.lease)) {
      cands.insert(c.lease);
    }
  }
  const int need = q_.chips - have;
  if (need <= 0) return false;  // it only has to wait for notices already sent
  std::vector<LeaseId> list(cands.begin(), cands.end());
  if (list.size() > kMaxVictimCandidates) list.resize(kMaxVictimCandidates);
  for (std::uint32_t mask = 1; mask < (1u << list.size()); ++mask) {
    int freed = 0;
    Cost cost{0, 0, 0};
    for (std::size_t i = 0; i < list.size(); ++i) {
      if (!(mask & (1u << i))) continue;
      const LeaseRec& l = s_.leases.at(list[i]);
      for (const ChipRef& c : l.chips) freed += c.node == n ? 1 : 0;
      add_cost(cost, cost_of(l));
    }
    if (freed < need || (best_cost_ && !(cost < *best_cost_))) continue;
    best_cost_ = cost;
    best_.victims.clear();
    best_.chips.clear();
    for (std::size_t i = 0; i < list.size(); ++i) {
      if (mask & (1u << i)) best_.victims.push_back(list[i]);
    }
    for (std::size_t p = 0; p < chips; ++p) {
      const ChipPlan c = view_.chip(n, p);
      const bool victim_chip =
          c.lease != 0 && std::find(best_.victims.begin(), best_.victims.end(), c.lease) != best_.victims.end();
      if (soon_free(c) || victim_chip) best_.chips.push_back({n, p});
    }
  }
  return true;
}

bool Scheduler::Impl::VictimSearch::search_whole_nodes() {
  std::map<std::string, std::vector<std::tuple<Cost, std::size_t, std::vector<LeaseId>>>> by_rev;
  for (std::size_t n : s_.victim_nodes(q_)) {
    if (!s_.eligible(s_.nodes[n], q_)) continue;
    std::set<LeaseId> victims;
    bool ok = true;
    for (std::size_t p = 0; p < s_.nodes[n].chip_lease.size(); ++p) {
      const ChipPlan c = view_.chip(n, p);
      if (soon_free(c)) continue;
      if (c.lease != 0 && candidate(c.lease)) {
        victims.insert(c.lease);
      } else {
        ok = false;
      }
    }
    if (!ok) continue;
    Cost cost{0, 0, 0};
    for (LeaseId v : victims) add_cost(cost, cost_of(s_.leases.at(v)));
    by_rev[s_.nodes[n].info.revision].push_back({cost, n, std::vector<LeaseId>(victims.begin(), victims.end())});
  }
  for (auto& [rev, list] : by_rev) {
    if (static_cast<int>(list.size()) < q_.nodes) continue;
    std::sort(list.begin(), list.end());
    Cost total{0, 0, 0};
    std::set<LeaseId> victims;
    std::vector<ChipRef> chips;
    for (int i = 0; i < q_.nodes; ++i) {
      const auto& [cost, n, vs] = list[i];
      add_cost(total, cost);
      victims.insert(vs.begin(), vs.end());
      for (std::size_t p = 0; p < s_.nodes[n].chip_lease.size(); ++p) chips.push_back({n, p});
    }
    if (!within_quota(rev, static_cast<int>(chips.size()))) continue;
    if (!best_cost_ || total < *best_cost_) {
      best_cost_ = total;
      best_.victims.assign(victims.begin(), victims.end());
      best_.chips = chips;
    }
  }
  return !(best_cost_ && best_.victims.empty());
}

std::optional<Claim> Scheduler::Impl::VictimSearch::run() && {
  const bool needed = q_.nodes == 0 ? search_one_node() : search_whole_nodes();
  if (!needed || !best_cost_) return std::nullopt;
  best_.ready_ms = ready_;
  best_.lost_chip_ms = std::get<1>(*best_cost_);
  return std::move(best_);
}

std::optional<Claim> Scheduler::Impl::find_victims(const RequestRec& r, TimeMs now, const PassView& view,
                                                   const std::map<std::pair<RequestClass, std::string>, int>& used) const {
  return VictimSearch(*this, r, now, view, used).run();
}

}  // namespace kiln::scheduler

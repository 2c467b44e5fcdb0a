// Preemption with notice: which experiment leases to notify so that an overdue request starts at
// the end of their grace, losing the least work.
#include "coordinator/scheduler/scheduler_impl.h"

#include <fmt/format.h>

namespace kiln::scheduler {

Scheduler::Impl::NoticeFiled Scheduler::Impl::notice_state(const LeaseRec& l, TimeMs at) const {
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

void Scheduler::Impl::file_without_notice(LeaseId id) {
  unfile_without_notice(id);
  const NoticeFiled& entry = without_notice.filed.emplace(id, NoticeFiled{}).first->second;
  without_notice.add(id, entry);
}

void Scheduler::Impl::unfile_without_notice(LeaseId id) {
  auto it = without_notice.filed.find(id);
  if (it == without_notice.filed.end()) return;
  without_notice.remove(id, it->second);
  without_notice.filed.erase(it);
}

void Scheduler::Impl::place_without_notice(LeaseId id, TimeMs at) const {
  NoticeFiled& entry = without_notice.filed.at(id);
  without_notice.remove(id, entry);
  entry = notice_state(leases.at(id), at);
  without_notice.add(id, entry);
}

Scheduler::Impl::FreeNotices Scheduler::Impl::free_notices(TimeMs now) const {
  FreeNotices out;
  if (knobs.exhaustive_passes || now < without_notice.filed_at) {
    // The reference passes, and a question about an earlier moment than the filing holds for,
    // read every lease.
    for (const auto& [id, filed] : without_notice.filed) {
      const NoticeFiled state = notice_state(leases.at(id), now);
      out.now = out.now || state.free;
      if (state.window) out.next = std::min(out.next, *state.window);
    }
    return out;
  }
  while (!without_notice.rechecks.empty() && without_notice.rechecks.begin()->first <= now) {
    place_without_notice(without_notice.rechecks.begin()->second, now);
  }
  without_notice.filed_at = now;
  out.now = without_notice.free > 0;
  if (!without_notice.windows.empty()) out.next = without_notice.windows.begin()->first;
  return out;
}

// Finds the experiment leases whose notice lets `r` start at the end of the grace, losing
// the least work. nullopt when no such set exists or none is needed.
std::optional<Claim> Scheduler::Impl::find_victims(const RequestRec& r, TimeMs now,
                                                 const PassView& view,
                                                 const std::map<std::pair<RequestClass, std::string>, int>& used) const {
  const Request& q = r.req;
  const TimeMs ready = now + knobs.grace_ms;
  const TimeMs end = ready + r.remaining_ms;
  // A chip can serve the demand at `ready` if it is free, already winding down under notice,
  // and no earlier reservation needs it before the demand would end.
  auto soon_free = [&](const ChipPlan& c) {
    if (c.claimed_by != 0 && c.claimed_by != q.id) return false;
    if (end > c.resv_start) return false;
    if (c.lease == 0) return true;
    auto it = leases.find(c.lease);
    return it != leases.end() && it->second.grace_deadline_ms.has_value();
  };
  auto candidate = [&](LeaseId id) {
    auto found = leases.find(id);
    if (found == leases.end()) return false;
    const LeaseRec& l = found->second;
    if (l.grace_deadline_ms || !preemptible(l.cls, q.cls)) return false;
    const RequestRec& holder = requests.at(l.request);
    if (holder.req.maintenance || holder.preempted_by.count(q.id)) return false;
    for (const ChipRef& c : l.chips) {
      const ChipPlan plan = view.chip(c.node, c.pos);
      if ((plan.claimed_by != 0 && plan.claimed_by != q.id) || end > plan.resv_start) return false;
    }
    return true;
  };
  // Cost order: borrowed leases first (they run on capacity lent to them, reclaimed first),
  // then least lost work, then fewest chips disturbed.
  using Cost = std::tuple<int, std::int64_t, int>;
  std::optional<Cost> best_cost;
  Claim best;

  auto within_quota = [&](const std::string& rev, int chips) {
    if (!kiln_policy()) return false;
    auto quota = knobs.quota(q.cls, rev);
    if (!quota) return true;
    auto it = used.find({q.cls, rev});
    return (it == used.end() ? 0 : it->second) + chips <= *quota;
  };

  if (q.nodes == 0) {
    // A node where the chips coming free serve the request alone ends the search, whatever the
    // others hold: those are read first.
    auto serves_alone = [&](std::size_t n) {
      if (!eligible(nodes[n], q) || !within_quota(nodes[n].info.revision, q.chips)) return false;
      int have = 0;
      for (std::size_t p = 0; p < nodes[n].chip_lease.size(); ++p) have += soon_free(view.chip(n, p)) ? 1 : 0;
      return have >= q.chips;
    };
    if (q.node) {
      auto it = node_index.find(*q.node);
      if (it != node_index.end() && serves_alone(it->second)) return std::nullopt;
    } else if (!knobs.exhaustive_passes) {
      for (const auto& [rev, by] : revisions_read(nodes_for_victims.by_revision(), q.revision)) {
        for (auto it = by.by_soon_free.lower_bound({q.chips, 0}); it != by.by_soon_free.end(); ++it) {
          if (serves_alone(it->second)) return std::nullopt;
        }
      }
    }
    for (std::size_t n : victim_nodes(q)) {
      if (!eligible(nodes[n], q) || !within_quota(nodes[n].info.revision, q.chips)) continue;
      int have = 0;
      std::set<LeaseId> cands;
      for (std::size_t p = 0; p < nodes[n].chip_lease.size(); ++p) {
        const ChipPlan c = view.chip(n, p);
        if (soon_free(c)) {
          ++have;
        } else if (c.lease != 0 && candidate(c.lease)) {
          cands.insert(c.lease);
        }
      }
      int need = q.chips - have;
      if (need <= 0) return std::nullopt;  // it only has to wait for notices already sent
      std::vector<LeaseId> list(cands.begin(), cands.end());
      if (list.size() > kMaxVictimCandidates) list.resize(kMaxVictimCandidates);
      for (std::uint32_t mask = 1; mask < (1u << list.size()); ++mask) {
        int freed = 0;
        Cost cost{0, 0, 0};
        for (std::size_t i = 0; i < list.size(); ++i) {
          if (!(mask & (1u << i))) continue;
          const LeaseRec& l = leases.at(list[i]);
          for (const ChipRef& c : l.chips) freed += c.node == n ? 1 : 0;
          std::get<0>(cost) += l.borrowed ? 0 : 1;
          std::get<1>(cost) += lost_work(l, now);
          std::get<2>(cost) += static_cast<int>(l.chips.size());
        }
        if (freed < need) continue;
        if (!best_cost || cost < *best_cost) {
          best_cost = cost;
          best.victims.clear();
          best.chips.clear();
          for (std::size_t i = 0; i < list.size(); ++i) {
            if (mask & (1u << i)) best.victims.push_back(list[i]);
          }
          for (std::size_t p = 0; p < nodes[n].chip_lease.size(); ++p) {
            const ChipPlan c = view.chip(n, p);
            bool victim_chip = c.lease != 0 && std::find(best.victims.begin(), best.victims.end(),
                                                         c.lease) != best.victims.end();
            if (soon_free(c) || victim_chip) best.chips.push_back({n, p});
          }
        }
      }
    }
  } else {
    std::map<std::string, std::vector<std::tuple<Cost, std::size_t, std::vector<LeaseId>>>> by_rev;
    for (std::size_t n : victim_nodes(q)) {
      if (!eligible(nodes[n], q)) continue;
      std::set<LeaseId> victims;
      bool ok = true;
      for (std::size_t p = 0; p < nodes[n].chip_lease.size(); ++p) {
        const ChipPlan c = view.chip(n, p);
        if (soon_free(c)) continue;
        if (c.lease != 0 && candidate(c.lease)) {
          victims.insert(c.lease);
        } else {
          ok = false;
        }
      }
      if (!ok) continue;
      Cost cost{0, 0, 0};
      for (LeaseId v : victims) {
        const LeaseRec& l = leases.at(v);
        std::get<0>(cost) += l.borrowed ? 0 : 1;
        std::get<1>(cost) += lost_work(l, now);
        std::get<2>(cost) += static_cast<int>(l.chips.size());
      }
      by_rev[nodes[n].info.revision].push_back(
          {cost, n, std::vector<LeaseId>(victims.begin(), victims.end())});
    }
    for (auto& [rev, list] : by_rev) {
      if (static_cast<int>(list.size()) < q.nodes) continue;
      std::sort(list.begin(), list.end());
      Cost total{0, 0, 0};
      std::set<LeaseId> victims;
      std::vector<ChipRef> chips;
      for (int i = 0; i < q.nodes; ++i) {
        const auto& [cost, n, vs] = list[i];
        std::get<0>(total) += std::get<0>(cost);
        std::get<1>(total) += std::get<1>(cost);
        std::get<2>(total) += std::get<2>(cost);
        victims.insert(vs.begin(), vs.end());
        for (std::size_t p = 0; p < nodes[n].chip_lease.size(); ++p) chips.push_back({n, p});
      }
      if (!within_quota(rev, static_cast<int>(chips.size()))) continue;
      if (!best_cost || total < *best_cost) {
        best_cost = total;
        best.victims.assign(victims.begin(), victims.end());
        best.chips = chips;
      }
    }
    if (best_cost && best.victims.empty()) return std::nullopt;
  }
  if (!best_cost) return std::nullopt;
  best.ready_ms = ready;
  best.lost_chip_ms = std::get<1>(*best_cost);
  return best;
}

}  // namespace kiln::scheduler

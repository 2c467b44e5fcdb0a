#include "coordinator/scheduler/scheduler.h"

#include <algorithm>
#include <deque>
#include <limits>
#include <map>
#include <set>
#include <tuple>

#include <fmt/format.h>

namespace kiln::scheduler {

namespace {

constexpr TimeMs kNever = std::numeric_limits<TimeMs>::max();
// An overrunning lease is assumed to end a little later, never "now": its chips are not free.
constexpr DurationMs kOverrunStepMs = kMinuteMs;
// Victim search enumerates subsets of the preemptible leases on one node; nodes hold at most a
// handful, this bounds the work if one ever holds more.
constexpr std::size_t kMaxVictimCandidates = 12;
// Marks a chip granted earlier in the same planning pass.
constexpr LeaseId kPlannedLease = std::numeric_limits<LeaseId>::max();

struct ChipRef {
  std::size_t node = 0;
  std::size_t pos = 0;  // position in NodeInfo::chips
  auto operator<=>(const ChipRef&) const = default;
};

struct NodeRec {
  NodeInfo info;
  NodeState state = NodeState::up;
  std::string reason;
  std::string owner;
  TimeMs since_ms = 0;
  std::vector<LeaseId> chip_lease;  // 0 = free
};

struct LeaseRec {
  LeaseId id = 0;
  RequestId request = 0;
  RequestClass cls = RequestClass::experiment;
  std::string revision;
  std::vector<ChipRef> chips;
  TimeMs start_ms = 0;
  TimeMs expected_end_ms = 0;
  TimeMs expiry_ms = 0;
  DurationMs work_ms = 0;  // the request's remaining work when this lease started
  bool borrowed = false;
  std::optional<TimeMs> grace_deadline_ms;
  RequestId preempted_for = 0;
  TimeMs last_ack_ms = 0;
  DurationMs checkpoint_interval_ms = 0;
};

// Chips a preempting request holds on to while its victims wind down.
struct Claim {
  std::vector<ChipRef> chips;
  std::vector<LeaseId> victims;
  TimeMs ready_ms = 0;
  std::int64_t lost_chip_ms = 0;  // work the notices will destroy
};

struct RequestRec {
  Request req;
  DurationMs remaining_ms = 0;
  std::optional<LeaseId> lease;
  std::set<RequestId> preempted_by;  // demands that already preempted it: never again
  std::optional<Claim> claim;
};

// Per-pass picture of one chip.
struct ChipPlan {
  LeaseId lease = 0;
  TimeMs busy_until = 0;
  RequestId claimed_by = 0;
  TimeMs resv_start = kNever;  // earliest reservation on the chip: backfill must end by then
  TimeMs resv_end = 0;         // latest reservation end: a new reservation queues after it
  RequestId resv_owner = 0;
};

struct Grant {
  RequestId request = 0;
  std::vector<ChipRef> chips;
  bool borrowed = false;
};

struct Preemption {
  RequestId request = 0;
  Claim claim;
};

struct PendingInfo {
  std::optional<TimeMs> expected_start;
  std::vector<std::string> reasons;
};

struct Plan {
  std::vector<Grant> grants;
  std::vector<Preemption> preemptions;
  std::map<RequestId, PendingInfo> pending;
  TimeMs wake = kNever;
};

struct ReservationInfo {
  std::set<std::string> nodes;
  TimeMs start = kNever;
  TimeMs end = 0;
};

}  // namespace

struct Scheduler::Impl {
  SchedulerKnobs knobs;
  std::vector<NodeRec> nodes;
  std::map<std::string, std::size_t, std::less<>> node_index;
  std::map<RequestId, RequestRec> requests;
  std::map<LeaseId, LeaseRec> leases;
  std::deque<Action> actions;
  LeaseId next_lease = 1;
  TimeMs wake = kNever;

  // --- helpers --------------------------------------------------------------------------------

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

  auto order_key(const RequestRec& r) const {
    const Request& q = r.req;
    if (knobs.policy == Policy::fifo) {
      return std::make_tuple(0, std::max(q.submit_ms, q.not_before_ms.value_or(q.submit_ms)), q.id);
    }
    return std::make_tuple(rank(q.cls), q.submit_ms, q.id);
  }

  std::vector<RequestId> pending_order() const {
    std::vector<const RequestRec*> list;
    for (const auto& [id, r] : requests) {
      if (!r.lease) list.push_back(&r);
    }
    std::sort(list.begin(), list.end(), [this](const RequestRec* a, const RequestRec* b) {
      return order_key(*a) < order_key(*b);
    });
    std::vector<RequestId> out;
    out.reserve(list.size());
    for (const RequestRec* r : list) out.push_back(r->req.id);
    return out;
  }

  std::map<std::pair<RequestClass, std::string>, int> usage() const {
    std::map<std::pair<RequestClass, std::string>, int> used;
    for (const auto& [id, l] : leases) used[{l.cls, l.revision}] += static_cast<int>(l.chips.size());
    return used;
  }

  TimeMs last_checkpoint(const LeaseRec& l, TimeMs at) const {
    TimeMs periodic = l.start_ms;
    if (l.checkpoint_interval_ms > 0 && at > l.start_ms) {
      periodic = l.start_ms + (at - l.start_ms) / l.checkpoint_interval_ms * l.checkpoint_interval_ms;
    }
    return std::max(periodic, l.last_ack_ms);
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

  // The next moment a notice to some checkpointing experiment would lose nothing: its next
  // checkpoint falls inside the grace.
  TimeMs next_free_notice(TimeMs now) const {
    TimeMs t = kNever;
    for (const auto& [id, l] : leases) {
      if (l.cls != RequestClass::experiment || l.grace_deadline_ms || l.checkpoint_interval_ms <= 0) {
        continue;
      }
      TimeMs window = last_checkpoint(l, now) + l.checkpoint_interval_ms - knobs.grace_ms;
      if (window > now) t = std::min(t, window);
    }
    return t;
  }

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

  std::vector<std::vector<ChipPlan>> initial_view(TimeMs now) const {
    std::vector<std::vector<ChipPlan>> view(nodes.size());
    for (std::size_t n = 0; n < nodes.size(); ++n) {
      view[n].resize(nodes[n].info.chips.size());
      for (std::size_t p = 0; p < view[n].size(); ++p) {
        ChipPlan& c = view[n][p];
        c.lease = nodes[n].chip_lease[p];
        c.busy_until = now;
        if (c.lease != 0) {
          const LeaseRec& l = leases.at(c.lease);
          c.busy_until = l.grace_deadline_ms          ? *l.grace_deadline_ms
                         : l.expected_end_ms >= now ? l.expected_end_ms
                                                   : now + kOverrunStepMs;
        }
      }
    }
    for (const auto& [id, r] : requests) {
      if (!r.claim) continue;
      for (const ChipRef& c : r.claim->chips) view[c.node][c.pos].claimed_by = id;
    }
    return view;
  }

  // Topology-aware choice of k chips among `usable` on one node: one NUMA node if possible,
  // else one switch group, else spread. Returns (penalty, chips).
  std::pair<int, std::vector<std::size_t>> choose_chips(std::size_t n,
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

  struct QuotaCheck {
    bool allowed = true;
    bool borrowed = false;
  };

  QuotaCheck check_quota(const RequestRec& r, const std::string& revision, int chips,
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

  bool chip_usable_now(const ChipPlan& c, RequestId id, TimeMs end) const {
    return c.lease == 0 && (c.claimed_by == 0 || c.claimed_by == id) && end <= c.resv_start;
  }

  std::optional<Grant> place_now(const RequestRec& r, TimeMs now,
                                 const std::vector<std::vector<ChipPlan>>& view,
                                 const std::map<std::pair<RequestClass, std::string>, int>& used)
      const {
    const Request& q = r.req;
    const TimeMs end = now + r.remaining_ms;
    std::set<std::size_t> claim_nodes;
    if (r.claim) {
      for (const ChipRef& c : r.claim->chips) claim_nodes.insert(c.node);
    }
    if (q.nodes == 0) {
      std::optional<std::tuple<int, int, std::size_t, std::size_t>> best_score;
      Grant best;
      for (std::size_t n = 0; n < nodes.size(); ++n) {
        if (!eligible(nodes[n], q)) continue;
        std::vector<std::size_t> usable;
        for (std::size_t p = 0; p < view[n].size(); ++p) {
          if (chip_usable_now(view[n][p], q.id, end)) usable.push_back(p);
        }
        if (static_cast<int>(usable.size()) < q.chips) continue;
        QuotaCheck quota = check_quota(r, nodes[n].info.revision, q.chips, used);
        if (!quota.allowed) continue;
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
      }
      if (best_score) return best;
      return std::nullopt;
    }
    std::map<std::string, std::vector<std::size_t>> by_rev;
    for (std::size_t n = 0; n < nodes.size(); ++n) {
      if (!eligible(nodes[n], q)) continue;
      bool whole = std::all_of(view[n].begin(), view[n].end(), [&](const ChipPlan& c) {
        return chip_usable_now(c, q.id, end);
      });
      if (whole) by_rev[nodes[n].info.revision].push_back(n);
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
        for (std::size_t p = 0; p < view[list[i]].size(); ++p) g.chips.push_back({list[i], p});
        chips += static_cast<int>(view[list[i]].size());
      }
      QuotaCheck quota = check_quota(r, rev, chips, used);
      if (!quota.allowed) continue;
      g.borrowed = quota.borrowed;
      return g;
    }
    return std::nullopt;
  }

  struct Reservation {
    TimeMs start = kNever;
    std::vector<ChipRef> chips;
  };

  // Earliest time the request could start from expected lease ends and earlier reservations.
  Reservation reserve(const RequestRec& r, TimeMs now,
                      const std::vector<std::vector<ChipPlan>>& view) const {
    const Request& q = r.req;
    auto avail = [&](const ChipPlan& c) {
      TimeMs t = c.lease != 0 ? c.busy_until : now;
      return std::max(t, c.resv_end);
    };
    Reservation best;
    if (q.nodes == 0) {
      std::optional<std::tuple<TimeMs, std::size_t, std::size_t>> best_score;
      for (std::size_t n = 0; n < nodes.size(); ++n) {
        if (!eligible(nodes[n], q)) continue;
        std::vector<std::pair<TimeMs, std::size_t>> times;
        std::size_t free_now = 0;
        for (std::size_t p = 0; p < view[n].size(); ++p) {
          times.push_back({avail(view[n][p]), p});
          if (view[n][p].lease == 0) ++free_now;
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
      }
    } else {
      std::map<std::string, std::vector<std::pair<TimeMs, std::size_t>>> by_rev;
      for (std::size_t n = 0; n < nodes.size(); ++n) {
        if (!eligible(nodes[n], q)) continue;
        TimeMs t = now;
        for (const ChipPlan& c : view[n]) t = std::max(t, avail(c));
        by_rev[nodes[n].info.revision].push_back({t, n});
      }
      for (auto& [rev, list] : by_rev) {
        if (static_cast<int>(list.size()) < q.nodes) continue;
        std::sort(list.begin(), list.end());
        TimeMs start = list[q.nodes - 1].first;
        if (start < best.start) {
          best.start = start;
          best.chips.clear();
          for (int i = 0; i < q.nodes; ++i) {
            for (std::size_t p = 0; p < view[list[i].second].size(); ++p) {
              best.chips.push_back({list[i].second, p});
            }
          }
        }
      }
    }
    if (best.start != kNever && q.not_before_ms) best.start = std::max(best.start, *q.not_before_ms);
    return best;
  }

  static void mark_reserved(std::vector<std::vector<ChipPlan>>& view, const std::vector<ChipRef>& chips,
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

  // Finds the experiment leases whose notice lets `r` start at the end of the grace, losing
  // the least work. nullopt when no such set exists or none is needed.
  std::optional<Claim> find_victims(const RequestRec& r, TimeMs now,
                                    const std::vector<std::vector<ChipPlan>>& view,
                                    const std::map<std::pair<RequestClass, std::string>, int>& used)
      const {
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
        const ChipPlan& plan = view[c.node][c.pos];
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
      for (std::size_t n = 0; n < nodes.size(); ++n) {
        if (!eligible(nodes[n], q) || !within_quota(nodes[n].info.revision, q.chips)) continue;
        int have = 0;
        std::set<LeaseId> cands;
        for (std::size_t p = 0; p < view[n].size(); ++p) {
          const ChipPlan& c = view[n][p];
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
            for (std::size_t p = 0; p < view[n].size(); ++p) {
              const ChipPlan& c = view[n][p];
              bool victim_chip = c.lease != 0 && std::find(best.victims.begin(), best.victims.end(),
                                                           c.lease) != best.victims.end();
              if (soon_free(c) || victim_chip) best.chips.push_back({n, p});
            }
          }
        }
      }
    } else {
      std::map<std::string, std::vector<std::tuple<Cost, std::size_t, std::vector<LeaseId>>>> by_rev;
      for (std::size_t n = 0; n < nodes.size(); ++n) {
        if (!eligible(nodes[n], q)) continue;
        std::set<LeaseId> victims;
        bool ok = true;
        for (const ChipPlan& c : view[n]) {
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
          for (std::size_t p = 0; p < view[n].size(); ++p) chips.push_back({n, p});
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

  // Why a request cannot start now, in words for `kiln queue --why`.
  std::vector<std::string> reasons_for(const RequestRec& r, TimeMs now,
                                       const std::vector<std::vector<ChipPlan>>& view,
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
      out.push_back(fmt::format("reservation for request {} holds {} from {} until {}", owner,
                                names, format_clock(info.start), format_clock(info.end)));
    }
    for (const auto& [owner, names] : claims) {
      std::string joined;
      for (const std::string& name : names) joined += (joined.empty() ? "" : ",") + name;
      out.push_back(fmt::format("free chips on {} are held for request {} (preemption under way)",
                                joined, owner));
    }
    if (r.claim) {
      std::string victims;
      for (LeaseId v : r.claim->victims) {
        auto it = leases.find(v);
        if (it == leases.end()) continue;
        victims += fmt::format("{}lease {} (request {})", victims.empty() ? "" : ", ", v,
                               it->second.request);
      }
      if (!victims.empty()) {
        out.push_back(fmt::format("preempting {} for it; grace ends at {}", victims,
                                  format_clock(r.claim->ready_ms)));
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

  Plan plan(TimeMs now, bool with_reasons) const {
    Plan out;
    auto view = initial_view(now);
    auto used = usage();
    std::vector<RequestId> order = pending_order();
    bool fifo_blocked = false;
    std::size_t reservations = 0;
    std::size_t position = 0;
    for (RequestId id : order) {
      const RequestRec& r = requests.at(id);
      const Request& q = r.req;
      ++position;
      bool window_open = !q.not_before_ms || *q.not_before_ms <= now;
      if (!window_open) out.wake = std::min(out.wake, *q.not_before_ms);
      if (window_open && !fifo_blocked) {
        if (auto grant = place_now(r, now, view, used)) {
          for (const ChipRef& c : grant->chips) {
            view[c.node][c.pos].lease = kPlannedLease;
            view[c.node][c.pos].busy_until = now + r.remaining_ms;
            view[c.node][c.pos].claimed_by = 0;
          }
          used[{q.cls, nodes[grant->chips.front().node].info.revision}] +=
              static_cast<int>(grant->chips.size());
          out.grants.push_back(std::move(*grant));
          continue;
        }
      }
      if (knobs.policy == Policy::fifo && window_open) fifo_blocked = true;

      PendingInfo info;
      if (kiln_policy()) {
        bool claimed = false;
        if (r.claim) {
          claimed = true;
          info.expected_start = std::max(r.claim->ready_ms, now);
          mark_reserved(view, r.claim->chips, *info.expected_start,
                        *info.expected_start + r.remaining_ms, id);
        } else {
          Reservation resv = reserve(r, now, view);
          std::optional<TimeMs> target = may_preempt(r) ? target_time(r) : std::nullopt;
          bool late = resv.start == kNever || (target && resv.start > *target);
          if (target && late) {
            // Preempt once the target can no longer be met otherwise; before that only if the
            // victims lose nothing (a checkpoint falls inside their grace), so the wait for
            // the target does not end on an expensive victim.
            const bool due = now + knobs.grace_ms >= *target;
            if (!due) {
              out.wake = std::min({out.wake, *target - knobs.grace_ms, next_free_notice(now)});
            }
            if (auto claim = find_victims(r, now, view, used);
                claim && (due || (window_open && claim->lost_chip_ms == 0))) {
              claimed = true;
              info.expected_start = claim->ready_ms;
              mark_reserved(view, claim->chips, claim->ready_ms, claim->ready_ms + r.remaining_ms,
                            id);
              for (const ChipRef& c : claim->chips) view[c.node][c.pos].claimed_by = id;
              out.preemptions.push_back({id, std::move(*claim)});
            }
          }
          if (!claimed && resv.start != kNever) {
            info.expected_start = resv.start;
            // Windows booked ahead (release) always hold their nodes; otherwise only the first
            // blocked requests do, so the queue's head is never starved and younger work still
            // backfills around the rest.
            if (q.not_before_ms || reservations < knobs.max_reservations) {
              if (!q.not_before_ms) ++reservations;
              mark_reserved(view, resv.chips, resv.start, resv.start + r.remaining_ms, id);
            }
          }
        }
      }
      if (with_reasons) info.reasons = reasons_for(r, now, view, used, position - 1);
      out.pending[id] = std::move(info);
    }
    return out;
  }

  // --- applying decisions ----------------------------------------------------------------------

  void end_lease(LeaseId id) {
    auto it = leases.find(id);
    KILN_ASSERT(it != leases.end(), "ending a lease that does not exist");
    for (const ChipRef& c : it->second.chips) {
      KILN_ASSERT(nodes[c.node].chip_lease[c.pos] == id, "chip not held by the lease ending");
      nodes[c.node].chip_lease[c.pos] = 0;
    }
    auto req = requests.find(it->second.request);
    if (req != requests.end() && req->second.lease == id) req->second.lease.reset();
    leases.erase(it);
  }

  // Ends a preempted lease and puts its request back in the queue, keeping its age.
  void requeue(LeaseId id, TimeMs at_checkpoint) {
    const LeaseRec& l = leases.at(id);
    RequestRec& r = requests.at(l.request);
    DurationMs done = std::max<DurationMs>(0, at_checkpoint - l.start_ms);
    r.remaining_ms = std::max<DurationMs>(kSecondMs, l.work_ms - done);
    LeaseId lease = l.id;
    RequestId request = l.request;
    end_lease(id);
    actions.push_back(Requeued{request, lease, requests.at(request).remaining_ms});
  }

  void finish_request(LeaseId id) {
    RequestId request = leases.at(id).request;
    end_lease(id);
    requests.erase(request);
  }

  void apply(Plan& p, TimeMs now) {
    for (Grant& g : p.grants) {
      RequestRec& r = requests.at(g.request);
      LeaseRec l;
      l.id = next_lease++;
      l.request = r.req.id;
      l.cls = r.req.cls;
      l.revision = nodes[g.chips.front().node].info.revision;
      l.chips = g.chips;
      l.start_ms = now;
      l.work_ms = r.remaining_ms;
      l.expected_end_ms = now + r.remaining_ms;
      DurationMs length = r.req.lease_ms
                              ? *r.req.lease_ms
                              : static_cast<DurationMs>(static_cast<double>(r.remaining_ms) *
                                                        knobs.lease_slack);
      l.expiry_ms = now + std::min(std::max<DurationMs>(length, r.remaining_ms), knobs.max_lease_ms);
      l.borrowed = g.borrowed;
      l.last_ack_ms = now;
      l.checkpoint_interval_ms = r.req.checkpoint_interval_ms;
      for (const ChipRef& c : g.chips) {
        KILN_ASSERT(nodes[c.node].chip_lease[c.pos] == 0, "granting a chip that is leased");
        nodes[c.node].chip_lease[c.pos] = l.id;
      }
      r.lease = l.id;
      r.claim.reset();
      LeaseGranted action;
      action.lease = l.id;
      action.request = l.request;
      action.expires_at_ms = l.expiry_ms;
      action.borrowed = l.borrowed;
      std::map<std::size_t, Placement> by_node;
      for (const ChipRef& c : g.chips) {
        Placement& pl = by_node[c.node];
        pl.node = nodes[c.node].info.id;
        pl.chips.push_back(nodes[c.node].info.chips[c.pos].index);
      }
      for (auto& [n, pl] : by_node) action.placement.push_back(std::move(pl));
      leases.emplace(l.id, std::move(l));
      actions.push_back(std::move(action));
    }
    for (Preemption& pre : p.preemptions) {
      RequestRec& r = requests.at(pre.request);
      for (LeaseId v : pre.claim.victims) {
        LeaseRec& l = leases.at(v);
        l.grace_deadline_ms = now + knobs.grace_ms;
        l.preempted_for = pre.request;
        requests.at(l.request).preempted_by.insert(pre.request);
        actions.push_back(PreemptNotice{l.id, l.request, pre.request, *l.grace_deadline_ms});
      }
      r.claim = std::move(pre.claim);
    }
    wake = p.wake;
  }

  void schedule(TimeMs now) {
    // A claim whose victims are long gone but whose request still cannot start (reservations
    // moved, say) would hold chips idle: let it go, the request plans afresh.
    for (auto& [id, r] : requests) {
      if (r.claim && !r.lease && now >= r.claim->ready_ms + knobs.grace_ms) r.claim.reset();
    }
    Plan p = plan(now, false);
    apply(p, now);
  }

  void drop_claims_on(std::size_t node) {
    for (auto& [id, r] : requests) {
      if (!r.claim) continue;
      bool touches = std::any_of(r.claim->chips.begin(), r.claim->chips.end(),
                                 [&](const ChipRef& c) { return c.node == node; });
      if (touches) r.claim.reset();
    }
  }

  // A lease on exactly these chips for a request that already runs (restore, handover).
  Result<LeaseId> hold(const Request& request, const std::vector<Placement>& placement, TimeMs start_ms);

  Status validate(const Request& q) const {
    if (requests.count(q.id)) {
      return fail(Errc::already_exists,
                  fmt::format("request {} is already queued or running; use a new id", q.id));
    }
    if (q.nodes < 0 || (q.nodes == 0 && q.chips != 1 && q.chips != 2 && q.chips != 4 &&
                        q.chips != 8)) {
      return fail(Errc::invalid_argument,
                  fmt::format("request {} asks for {} chips; ask for 1, 2, 4 or 8 chips on one "
                              "node, or for whole nodes",
                              q.id, q.chips));
    }
    if (q.expected_duration_ms <= 0) {
      return fail(Errc::invalid_argument,
                  fmt::format("request {} has no expected duration; give one in milliseconds", q.id));
    }
    if (q.lease_ms && (*q.lease_ms <= 0 || *q.lease_ms > knobs.max_lease_ms)) {
      return fail(Errc::invalid_argument,
                  fmt::format("request {} asks for a lease of {} ms; the limit is {} ms", q.id,
                              *q.lease_ms, knobs.max_lease_ms));
    }
    std::size_t pending = 0;
    for (const auto& [id, r] : requests) pending += r.lease ? 0 : 1;
    if (pending >= knobs.max_pending_requests) {
      return fail(Errc::unavailable,
                  fmt::format("the queue is full ({} pending requests); retry later",
                              knobs.max_pending_requests));
    }
    return {};
  }
};

// --- public surface -----------------------------------------------------------------------------

Scheduler::Scheduler(SchedulerKnobs knobs) : impl_(std::make_unique<Impl>()) {
  impl_->knobs = std::move(knobs);
}
Scheduler::~Scheduler() = default;
Scheduler::Scheduler(Scheduler&&) noexcept = default;
Scheduler& Scheduler::operator=(Scheduler&&) noexcept = default;

Status Scheduler::upsert_node(const NodeInfo& node, TimeMs now) {
  Impl& s = *impl_;
  if (node.id.empty() || node.chips.empty()) {
    return fail(Errc::invalid_argument,
                "a node needs an id and at least one chip; check the agent's inventory report");
  }
  auto it = s.node_index.find(node.id);
  if (it == s.node_index.end()) {
    if (s.nodes.size() >= s.knobs.max_nodes) {
      return fail(Errc::too_large, fmt::format("the fleet already has {} nodes (max_nodes); raise "
                                               "the limit in [scheduler]",
                                               s.knobs.max_nodes));
    }
    NodeRec rec;
    rec.info = node;
    rec.since_ms = now;
    rec.chip_lease.assign(node.chips.size(), 0);
    s.node_index.emplace(node.id, s.nodes.size());
    s.nodes.push_back(std::move(rec));
  } else {
    NodeRec& rec = s.nodes[it->second];
    bool busy = std::any_of(rec.chip_lease.begin(), rec.chip_lease.end(),
                            [](LeaseId l) { return l != 0; });
    if (busy && (node.chips.size() != rec.info.chips.size() || node.revision != rec.info.revision)) {
      return fail(Errc::conflict,
                  fmt::format("node {} holds leases; drain it before changing its chips or "
                              "revision",
                              node.id));
    }
    rec.info = node;
    rec.chip_lease.resize(node.chips.size(), 0);
    s.drop_claims_on(it->second);
  }
  s.schedule(now);
  return {};
}

Status Scheduler::set_node_state(std::string_view node, NodeState state, std::string reason,
                                 std::string owner, TimeMs now) {
  Impl& s = *impl_;
  auto it = s.node_index.find(node);
  if (it == s.node_index.end()) {
    return fail(Errc::not_found, fmt::format("unknown node '{}'; list nodes with `kiln nodes`", node));
  }
  NodeRec& rec = s.nodes[it->second];
  rec.state = state;
  rec.reason = std::move(reason);
  rec.owner = std::move(owner);
  rec.since_ms = now;
  if (state != NodeState::up) s.drop_claims_on(it->second);
  if (state == NodeState::lost) {
    std::set<LeaseId> lost(rec.chip_lease.begin(), rec.chip_lease.end());
    lost.erase(0);
    for (LeaseId id : lost) {
      RequestId request = s.leases.at(id).request;
      s.finish_request(id);
      s.actions.push_back(LeaseLost{id, request, std::string(node)});
    }
  }
  s.schedule(now);
  return {};
}

Status Scheduler::submit(const Request& request, TimeMs now) {
  Impl& s = *impl_;
  if (auto ok = s.validate(request); !ok) return ok;
  RequestRec rec;
  rec.req = request;
  rec.remaining_ms = request.expected_duration_ms;
  s.requests.emplace(request.id, std::move(rec));
  s.schedule(now);
  return {};
}

Result<LeaseId> Scheduler::restore_lease(const Request& request, const std::vector<Placement>& placement,
                                         TimeMs start_ms, TimeMs now) {
  auto id = impl_->hold(request, placement, start_ms);
  if (id) impl_->schedule(now);
  return id;
}

Result<std::vector<LeaseId>> Scheduler::transfer_lease(LeaseId lease, const std::vector<Handover>& handovers,
                                                       TimeMs now) {
  Impl& s = *impl_;
  auto it = s.leases.find(lease);
  if (it == s.leases.end()) {
    return fail(Errc::not_found,
                fmt::format("lease {} is not active (already released, revoked or expired)", lease));
  }
  std::set<std::pair<std::string, int>> held;
  for (const ChipRef& c : it->second.chips) held.insert({s.nodes[c.node].info.id, s.nodes[c.node].info.chips[c.pos].index});
  for (const Handover& h : handovers) {
    for (const Placement& pl : h.placement) {
      for (int chip : pl.chips) {
        if (!held.count({pl.node, chip})) {
          return fail(Errc::invalid_argument, fmt::format("request {} cannot take chip {} on {}: lease {} does not "
                                                          "hold it",
                                                          h.request.id, chip, pl.node, lease));
        }
      }
    }
  }
  const RequestId owner = it->second.request;
  s.finish_request(lease);
  std::vector<LeaseId> out;
  Status failed;
  for (const Handover& h : handovers) {
    auto id = s.hold(h.request, h.placement, h.start_ms);
    if (!id) {
      failed = tl::unexpected(id.error());
      break;
    }
    out.push_back(*id);
  }
  s.schedule(now);
  if (!failed) {
    return fail(failed.error().code, fmt::format("request {} ended, but not all of its chips could be handed "
                                                 "over: {}",
                                                 owner, failed.error().message));
  }
  return out;
}

Result<LeaseId> Scheduler::Impl::hold(const Request& request, const std::vector<Placement>& placement,
                                      TimeMs start_ms) {
  Impl& s = *this;
  if (auto ok = s.validate(request); !ok) return tl::unexpected(ok.error());
  std::vector<ChipRef> chips;
  for (const Placement& pl : placement) {
    auto it = s.node_index.find(pl.node);
    if (it == s.node_index.end()) {
      return fail(Errc::not_found, fmt::format("cannot restore request {}: node '{}' is unknown; it "
                                               "has to register first",
                                               request.id, pl.node));
    }
    const NodeRec& rec = s.nodes[it->second];
    for (int index : pl.chips) {
      auto pos = std::find_if(rec.info.chips.begin(), rec.info.chips.end(),
                              [&](const ChipInfo& c) { return c.index == index; });
      if (pos == rec.info.chips.end()) {
        return fail(Errc::not_found, fmt::format("cannot restore request {}: node {} has no chip {}",
                                                 request.id, pl.node, index));
      }
      ChipRef ref{it->second, static_cast<std::size_t>(pos - rec.info.chips.begin())};
      if (rec.chip_lease[ref.pos] != 0 || std::find(chips.begin(), chips.end(), ref) != chips.end()) {
        return fail(Errc::conflict, fmt::format("cannot restore request {}: chip {} on {} is already "
                                                "leased",
                                                request.id, index, pl.node));
      }
      chips.push_back(ref);
    }
  }
  if (chips.empty()) {
    return fail(Errc::invalid_argument,
                fmt::format("cannot restore request {}: it names no chips", request.id));
  }
  RequestRec rec;
  rec.req = request;
  rec.remaining_ms = request.expected_duration_ms;
  LeaseRec l;
  l.id = s.next_lease++;
  l.request = request.id;
  l.cls = request.cls;
  l.revision = s.nodes[chips.front().node].info.revision;
  l.chips = chips;
  l.start_ms = start_ms;
  l.work_ms = rec.remaining_ms;
  l.expected_end_ms = start_ms + rec.remaining_ms;
  DurationMs length = request.lease_ms ? *request.lease_ms
                                       : static_cast<DurationMs>(static_cast<double>(rec.remaining_ms) *
                                                                 s.knobs.lease_slack);
  l.expiry_ms = start_ms + std::min(std::max<DurationMs>(length, rec.remaining_ms), s.knobs.max_lease_ms);
  l.last_ack_ms = start_ms;
  l.checkpoint_interval_ms = request.checkpoint_interval_ms;
  for (const ChipRef& c : chips) s.nodes[c.node].chip_lease[c.pos] = l.id;
  rec.lease = l.id;
  const LeaseId id = l.id;
  s.requests.emplace(request.id, std::move(rec));
  s.leases.emplace(id, std::move(l));
  return id;
}

Status Scheduler::cancel(RequestId request, TimeMs now) {
  Impl& s = *impl_;
  auto it = s.requests.find(request);
  if (it == s.requests.end()) {
    return fail(Errc::not_found, fmt::format("request {} is neither queued nor running", request));
  }
  if (it->second.lease) {
    s.finish_request(*it->second.lease);
  } else {
    s.requests.erase(it);
  }
  s.schedule(now);
  return {};
}

Status Scheduler::release(LeaseId lease, TimeMs now) {
  Impl& s = *impl_;
  if (!s.leases.count(lease)) {
    return fail(Errc::not_found,
                fmt::format("lease {} is not active (already released, revoked or expired)", lease));
  }
  s.finish_request(lease);
  s.schedule(now);
  return {};
}

Status Scheduler::checkpoint_ack(LeaseId lease, TimeMs now) {
  Impl& s = *impl_;
  auto it = s.leases.find(lease);
  if (it == s.leases.end()) {
    return fail(Errc::not_found, fmt::format("lease {} is not active; the checkpoint is not needed "
                                             "for scheduling",
                                             lease));
  }
  it->second.last_ack_ms = std::max(it->second.last_ack_ms, now);
  if (it->second.grace_deadline_ms) s.requeue(lease, now);
  s.schedule(now);
  return {};
}

void Scheduler::on_tick(TimeMs now) {
  Impl& s = *impl_;
  std::vector<LeaseId> revoke;
  std::vector<LeaseId> expire;
  for (const auto& [id, l] : s.leases) {
    if (l.grace_deadline_ms && *l.grace_deadline_ms <= now) {
      revoke.push_back(id);
    } else if (l.expiry_ms <= now) {
      expire.push_back(id);
    }
  }
  for (LeaseId id : revoke) {
    const LeaseRec& l = s.leases.at(id);
    s.actions.push_back(Revoke{id, l.request});
    s.requeue(id, s.last_checkpoint(l, now));
  }
  for (LeaseId id : expire) {
    s.actions.push_back(LeaseExpired{id, s.leases.at(id).request});
    s.finish_request(id);
  }
  s.schedule(now);
}

std::optional<Action> Scheduler::poll_action() {
  if (impl_->actions.empty()) return std::nullopt;
  Action a = std::move(impl_->actions.front());
  impl_->actions.pop_front();
  return a;
}

std::optional<TimeMs> Scheduler::next_deadline() const {
  TimeMs t = impl_->wake;
  for (const auto& [id, l] : impl_->leases) {
    // A lease under notice still ends at its expiry if that comes before the grace deadline.
    t = std::min({t, l.grace_deadline_ms.value_or(kNever), l.expiry_ms});
  }
  if (t == kNever) return std::nullopt;
  return t;
}

Explanation Scheduler::explain(RequestId request, TimeMs now) const {
  Explanation out;
  out.request = request;
  auto it = impl_->requests.find(request);
  if (it == impl_->requests.end() || it->second.lease) return out;
  Plan p = impl_->plan(now, true);
  out.pending = true;
  auto info = p.pending.find(request);
  if (info == p.pending.end()) {
    out.reasons.push_back("it can start now; it is granted on the next scheduling step");
    out.expected_start_ms = now;
    return out;
  }
  out.reasons = info->second.reasons;
  out.expected_start_ms = info->second.expected_start;
  return out;
}

const SchedulerKnobs& Scheduler::knobs() const { return impl_->knobs; }

std::vector<NodeView> Scheduler::nodes() const {
  std::vector<NodeView> out;
  for (const NodeRec& n : impl_->nodes) {
    out.push_back({n.info, n.state, n.reason, n.owner, n.since_ms});
  }
  return out;
}

std::vector<LeaseView> Scheduler::leases() const {
  std::vector<LeaseView> out;
  for (const auto& [id, l] : impl_->leases) {
    LeaseView v;
    v.lease = id;
    v.request = l.request;
    v.cls = l.cls;
    std::map<std::size_t, Placement> by_node;
    for (const ChipRef& c : l.chips) {
      Placement& pl = by_node[c.node];
      pl.node = impl_->nodes[c.node].info.id;
      pl.chips.push_back(impl_->nodes[c.node].info.chips[c.pos].index);
    }
    for (auto& [n, pl] : by_node) v.placement.push_back(std::move(pl));
    v.start_ms = l.start_ms;
    v.expected_end_ms = l.expected_end_ms;
    v.expires_at_ms = l.expiry_ms;
    v.borrowed = l.borrowed;
    v.grace_deadline_ms = l.grace_deadline_ms;
    out.push_back(std::move(v));
  }
  return out;
}

std::vector<RequestId> Scheduler::pending() const { return impl_->pending_order(); }

bool Scheduler::is_pending(RequestId request) const {
  auto it = impl_->requests.find(request);
  return it != impl_->requests.end() && !it->second.lease;
}

std::optional<LeaseId> Scheduler::lease_of(RequestId request) const {
  auto it = impl_->requests.find(request);
  if (it == impl_->requests.end()) return std::nullopt;
  return it->second.lease;
}

Status Scheduler::check_invariants() const {
  const Impl& s = *impl_;
  std::map<LeaseId, std::size_t> held;
  for (const NodeRec& n : s.nodes) {
    for (LeaseId l : n.chip_lease) {
      if (l == 0) continue;
      if (!s.leases.count(l)) {
        return fail(Errc::internal, fmt::format("chip on {} held by unknown lease {}", n.info.id, l));
      }
      ++held[l];
    }
  }
  std::set<ChipRef> seen;
  for (const auto& [id, l] : s.leases) {
    for (const ChipRef& c : l.chips) {
      if (!seen.insert(c).second) {
        return fail(Errc::internal, fmt::format("a chip on {} is in two leases",
                                                s.nodes[c.node].info.id));
      }
      if (s.nodes[c.node].chip_lease[c.pos] != id) {
        return fail(Errc::internal, fmt::format("lease {} lists a chip it does not hold", id));
      }
    }
    if (held[id] != l.chips.size()) {
      return fail(Errc::internal, fmt::format("lease {} chip count disagrees with the nodes", id));
    }
    auto r = s.requests.find(l.request);
    if (r == s.requests.end() || r->second.lease != id) {
      return fail(Errc::internal, fmt::format("lease {} belongs to no running request", id));
    }
  }
  for (const auto& [id, r] : s.requests) {
    if (r.lease && !s.leases.count(*r.lease)) {
      return fail(Errc::internal, fmt::format("request {} points at a dead lease", id));
    }
  }
  return {};
}

}  // namespace kiln::scheduler

// The audit of the scheduler's state: every index against a scan of the records it is kept from.
// Meant to run after every step of a simulation and of the scheduler's tests.
#include "coordinator/scheduler/scheduler_impl.h"

#include <fmt/format.h>

namespace kiln::scheduler {

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
  if (auto queued = s.queue.check(
          s.requests, [&](const Request& q) { return s.order_key(q); },
          [&](const RequestRec& r) { return s.place_of(r); });
      !queued) {
    return queued;
  }
  std::set<std::pair<TimeMs, RequestId>> lapses;
  for (const auto& [id, r] : s.requests) {
    if (r.claim) lapses.insert({s.lapse_at(*r.claim), id});
  }
  if (lapses != s.claims_by_lapse) {
    return fail(Errc::internal, "the claims filed by when they lapse disagree with the requests' claims");
  }
  std::map<RequestId, int> mentions;
  for (const auto& [id, r] : s.requests) {
    for (RequestId preempter : r.preempted_by) ++mentions[preempter];
  }
  if (mentions != s.preempted_by_mentions) {
    return fail(Errc::internal, "the count of requests that name each preempter disagrees with the requests");
  }
  std::vector<std::vector<RequestId>> claimed(s.nodes.size());
  for (std::size_t n = 0; n < s.nodes.size(); ++n) claimed[n].assign(s.nodes[n].chip_lease.size(), 0);
  for (const auto& [lapse, id] : s.claims_by_lapse) {
    for (const ChipRef& c : s.requests.at(id).claim->chips) {
      if (claimed[c.node][c.pos] != 0) {
        return fail(Errc::internal, fmt::format("a chip on {} is in two claims", s.nodes[c.node].info.id));
      }
      claimed[c.node][c.pos] = id;
    }
  }
  for (std::size_t n = 0; n < s.nodes.size(); ++n) {
    if (claimed[n] != s.nodes[n].chip_claim) {
      return fail(Errc::internal, fmt::format("the chips claimed on {} disagree with the claims", s.nodes[n].info.id));
    }
  }
  if (!s.claimed_free_nodes.matches_scan(s.nodes)) {
    return fail(Errc::internal, "the nodes filed with a free chip claimed disagree with the nodes' leases and claims");
  }
  std::map<std::pair<RequestClass, std::string>, int> used;
  std::set<std::pair<TimeMs, LeaseId>> deadlines;
  for (const auto& [id, l] : s.leases) {
    used[{l.cls, l.revision}] += static_cast<int>(l.chips.size());
    deadlines.insert({Impl::deadline_of(l), id});
  }
  if (used != s.chips_in_use) return fail(Errc::internal, "the chips counted in use disagree with the leases");
  if (deadlines != s.lease_deadlines) return fail(Errc::internal, "the lease deadline index disagrees with the leases");
  if (FreeChips::counted(s.nodes) != s.free_chips) {
    return fail(Errc::internal, "the free chips counted per node disagree with the nodes' leases and states");
  }
  if (FreeChips::counted(s.nodes, true) != s.free_unclaimed) {
    return fail(Errc::internal, "the unclaimed free chips counted per node disagree with the nodes' leases, claims and states");
  }
  if (!s.nodes_by_free.matches_scan(s.nodes, s.free_chips)) {
    return fail(Errc::internal, "the nodes filed by free chips disagree with the free chips counted per node");
  }
  if (!s.fleet_by_revision.matches_scan(s.nodes)) {
    return fail(Errc::internal, "the nodes counted by revision and state disagree with the nodes");
  }
  if (!s.nodes_by_end.matches_scan(s.nodes, s.leases, s.requests)) {
    return fail(Errc::internal, "the nodes filed by their chips' ends disagree with the nodes' leases, claims and states");
  }
  if (!s.largest_groups.matches_scan(s.nodes)) {
    return fail(Errc::internal, "the nodes' largest NUMA nodes and switch groups disagree with their chips");
  }
  if (!s.nodes_for_victims.matches_scan(s.nodes, s.leases)) {
    return fail(Errc::internal, "the nodes filed for preemption disagree with the nodes' leases and states");
  }
  std::set<LeaseId> without_notice;
  for (const auto& [id, l] : s.leases) {
    if (l.cls == RequestClass::experiment && !l.grace_deadline_ms) without_notice.insert(id);
  }
  // Every such lease is filed; an entry not due to be read again holds what reading it at the
  // filing's moment gives; the sets and the count are made of the entries.
  const Impl::NoticeWindows& filed = s.without_notice;
  Impl::NoticeWindows entered;
  for (const auto& [id, entry] : filed.filed) {
    if (!without_notice.count(id)) {
      return fail(Errc::internal, fmt::format("lease {} is filed as an experiment without notice and is not one", id));
    }
    if (entry.recheck > filed.filed_at && s.notice_state(s.leases.at(id), filed.filed_at) != entry) {
      return fail(Errc::internal, fmt::format("lease {}'s notice window disagrees with its checkpoints", id));
    }
    entered.add(id, entry);
  }
  if (filed.filed.size() != without_notice.size()) {
    return fail(Errc::internal, "the experiments filed as without notice disagree with the leases");
  }
  if (entered.rechecks != filed.rechecks || entered.windows != filed.windows || entered.free != filed.free) {
    return fail(Errc::internal, "the experiments' notice windows disagree with their entries");
  }
  return {};
}

}  // namespace kiln::scheduler

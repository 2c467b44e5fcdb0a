// The audit of the scheduler's state: the records against each other, and every index against a
// scan of the records it is kept from. Meant to run after every step of a simulation and of the
// scheduler's tests.
#include "coordinator/scheduler/scheduler_impl.h"

#include <fmt/format.h>

namespace kiln::scheduler {

Status Scheduler::Impl::check_leases() const {
  std::map<LeaseId, std::size_t> held;
  for (const NodeRec& n : nodes) {
    for (LeaseId l : n.chip_lease) {
      if (l == 0) continue;
      if (!leases.count(l)) {
        return fail(Errc::internal, fmt::format("chip on {} held by unknown lease {}", n.info.id, l));
      }
      ++held[l];
    }
  }
  std::set<ChipRef> seen;
  for (const auto& [id, l] : leases) {
    for (const ChipRef& c : l.chips) {
      if (!seen.insert(c).second) {
        return fail(Errc::internal, fmt::format("a chip on {} is in two leases", nodes[c.node].info.id));
      }
      if (nodes[c.node].chip_lease[c.pos] != id) {
        return fail(Errc::internal, fmt::format("lease {} lists a chip it does not hold", id));
      }
    }
    if (held[id] != l.chips.size()) {
      return fail(Errc::internal, fmt::format("lease {} chip count disagrees with the nodes", id));
    }
    auto r = requests.find(l.request);
    if (r == requests.end() || r->second.lease != id) {
      return fail(Errc::internal, fmt::format("lease {} belongs to no running request", id));
    }
  }
  for (const auto& [id, r] : requests) {
    if (r.lease && !leases.count(*r.lease)) {
      return fail(Errc::internal, fmt::format("request {} points at a dead lease", id));
    }
  }
  return {};
}

Status Scheduler::Impl::check_claims() const {
  if (!claim_lapses.matches_scan(requests, [this](const Claim& claim) { return lapse_at(claim); })) {
    return fail(Errc::internal, "the claims filed by when they lapse disagree with the requests' claims");
  }
  std::vector<std::vector<RequestId>> claimed(nodes.size());
  for (std::size_t n = 0; n < nodes.size(); ++n) claimed[n].assign(nodes[n].chip_lease.size(), 0);
  for (const auto& [id, r] : requests) {
    if (!r.claim) continue;
    for (const ChipRef& c : r.claim->chips) {
      if (claimed[c.node][c.pos] != 0) {
        return fail(Errc::internal, fmt::format("a chip on {} is in two claims", nodes[c.node].info.id));
      }
      claimed[c.node][c.pos] = id;
    }
  }
  for (std::size_t n = 0; n < nodes.size(); ++n) {
    if (claimed[n] != nodes[n].chip_claim) {
      return fail(Errc::internal, fmt::format("the chips claimed on {} disagree with the claims", nodes[n].info.id));
    }
  }
  if (!claimed_free_nodes.matches_scan(nodes)) {
    return fail(Errc::internal, "the nodes filed with a free chip claimed disagree with the nodes' leases and claims");
  }
  return {};
}

Status Scheduler::Impl::check_node_filings() const {
  const std::pair<bool, const char*> filings[] = {
      {FreeChips::counted(nodes) == free_chips,
       "the free chips counted per node disagree with the nodes' leases and states"},
      {FreeChips::counted(nodes, true) == free_unclaimed,
       "the unclaimed free chips counted per node disagree with the nodes' leases, claims and states"},
      {nodes_by_free.matches_scan(nodes, free_chips),
       "the nodes filed by free chips disagree with the free chips counted per node"},
      {fleet_by_revision.matches_scan(nodes), "the nodes counted by revision and state disagree with the nodes"},
      {nodes_by_end.matches_scan(nodes, leases, requests),
       "the nodes filed by their chips' ends disagree with the nodes' leases, claims and states"},
      {largest_groups.matches_scan(nodes),
       "the nodes' largest NUMA nodes and switch groups disagree with their chips"},
      {nodes_for_victims.matches_scan(nodes, leases),
       "the nodes filed for preemption disagree with the nodes' leases and states"},
  };
  for (const auto& [matches, what] : filings) {
    if (!matches) return fail(Errc::internal, what);
  }
  return {};
}

Status Scheduler::Impl::check_notice_windows() const {
  std::set<LeaseId> unnoticed;
  for (const auto& [id, l] : leases) {
    if (l.cls == RequestClass::experiment && !l.grace_deadline_ms) unnoticed.insert(id);
  }
  return without_notice.check(unnoticed, [this](LeaseId id, TimeMs at) { return notice_state(leases.at(id), at); });
}

Status Scheduler::check_invariants() const {
  const Impl& s = *impl_;
  if (auto ok = s.check_leases(); !ok) return ok;
  if (auto ok = s.queue.check(
          s.requests, [&](const Request& q) { return s.order_key(q); },
          [&](const RequestRec& r) { return s.place_of(r); });
      !ok) {
    return ok;
  }
  if (auto ok = s.check_claims(); !ok) return ok;
  if (!s.preemptor_mentions.matches_scan(s.requests)) {
    return fail(Errc::internal, "the count of requests that name each preempter disagrees with the requests");
  }
  if (!s.chips_in_use.matches_scan(s.leases)) {
    return fail(Errc::internal, "the chips counted in use disagree with the leases");
  }
  if (!s.lease_deadlines.matches_scan(s.leases)) {
    return fail(Errc::internal, "the lease deadline index disagrees with the leases");
  }
  if (auto ok = s.check_node_filings(); !ok) return ok;
  return s.check_notice_windows();
}

}  // namespace kiln::scheduler

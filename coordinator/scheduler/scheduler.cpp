#include "coordinator/scheduler/scheduler_impl.h"

#include <fmt/format.h>

namespace kiln::scheduler {

// --- applying decisions ---------------------------------------------------------------------

std::vector<RequestId> Scheduler::Impl::pending_order() const {
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

void Scheduler::Impl::end_lease(LeaseId id) {
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
void Scheduler::Impl::requeue(LeaseId id, TimeMs at_checkpoint) {
  const LeaseRec& l = leases.at(id);
  RequestRec& r = requests.at(l.request);
  DurationMs done = std::max<DurationMs>(0, at_checkpoint - l.start_ms);
  r.remaining_ms = std::max<DurationMs>(kSecondMs, l.work_ms - done);
  LeaseId lease = l.id;
  RequestId request = l.request;
  end_lease(id);
  actions.push_back(Requeued{request, lease, requests.at(request).remaining_ms});
}

void Scheduler::Impl::apply(Plan& p, TimeMs now) {
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

void Scheduler::Impl::schedule(TimeMs now) {
  // A claim whose victims are long gone but whose request still cannot start (reservations
  // moved, say) would hold chips idle: let it go, the request plans afresh.
  for (auto& [id, r] : requests) {
    if (r.claim && !r.lease && now >= r.claim->ready_ms + knobs.grace_ms) r.claim.reset();
  }
  Plan p = plan(now, false);
  apply(p, now);
}

void Scheduler::Impl::drop_claims_on(std::size_t node) {
  for (auto& [id, r] : requests) {
    if (!r.claim) continue;
    bool touches = std::any_of(r.claim->chips.begin(), r.claim->chips.end(),
                               [&](const ChipRef& c) { return c.node == node; });
    if (touches) r.claim.reset();
  }
}

Status Scheduler::Impl::validate(const Request& q) const {
  if (requests.count(q.id)) {
    return fail(Errc::already_exists,
                fmt::format("{} is already queued or running; use a new id", name_of(q)));
  }
  if (q.nodes < 0 || (q.nodes == 0 && q.chips != 1 && q.chips != 2 && q.chips != 4 &&
                      q.chips != 8)) {
    return fail(Errc::invalid_argument,
                fmt::format("{} asks for {} chips; ask for 1, 2, 4 or 8 chips on one "
                            "node, or for whole nodes",
                            name_of(q), q.chips));
  }
  if (q.expected_duration_ms <= 0) {
    return fail(Errc::invalid_argument,
                fmt::format("{} has no expected duration; give one in milliseconds", name_of(q)));
  }
  if (q.lease_ms && (*q.lease_ms <= 0 || *q.lease_ms > knobs.max_lease_ms)) {
    return fail(Errc::invalid_argument,
                fmt::format("{} asks for a lease of {} ms; the limit is {} ms", name_of(q),
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
          return fail(Errc::invalid_argument, fmt::format("{} cannot take chip {} on {}: lease {} does not "
                                                          "hold it",
                                                          Impl::name_of(h.request), chip, pl.node, lease));
        }
      }
    }
  }
  const std::string owner = s.name_of(it->second.request);  // before its request ends
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
    return fail(failed.error().code, fmt::format("{} ended, but not all of its chips could be handed "
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
      return fail(Errc::not_found, fmt::format("cannot restore {}: node '{}' is unknown; it "
                                               "has to register first",
                                               name_of(request), pl.node));
    }
    const NodeRec& rec = s.nodes[it->second];
    for (int index : pl.chips) {
      auto pos = std::find_if(rec.info.chips.begin(), rec.info.chips.end(),
                              [&](const ChipInfo& c) { return c.index == index; });
      if (pos == rec.info.chips.end()) {
        return fail(Errc::not_found, fmt::format("cannot restore {}: node {} has no chip {}",
                                                 name_of(request), pl.node, index));
      }
      ChipRef ref{it->second, static_cast<std::size_t>(pos - rec.info.chips.begin())};
      if (rec.chip_lease[ref.pos] != 0 || std::find(chips.begin(), chips.end(), ref) != chips.end()) {
        return fail(Errc::conflict, fmt::format("cannot restore {}: chip {} on {} is already "
                                                "leased",
                                                name_of(request), index, pl.node));
      }
      chips.push_back(ref);
    }
  }
  if (chips.empty()) {
    return fail(Errc::invalid_argument,
                fmt::format("cannot restore {}: it names no chips", name_of(request)));
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

namespace {

// A pending request's explanation from a plan that has it among its pending ones or its grants.
Explanation explanation_in(const Plan& plan, RequestId request, TimeMs now) {
  Explanation out;
  out.request = request;
  out.pending = true;
  auto info = plan.pending.find(request);
  if (info == plan.pending.end()) {
    out.reasons.push_back("it can start now; it is granted on the next scheduling step");
    out.expected_start_ms = now;
    return out;
  }
  out.reasons = info->second.reasons;
  out.expected_start_ms = info->second.expected_start;
  return out;
}

}  // namespace

Explanation Scheduler::explain(RequestId request, TimeMs now) const {
  auto it = impl_->requests.find(request);
  if (it == impl_->requests.end() || it->second.lease) {
    Explanation out;
    out.request = request;
    return out;
  }
  return explanation_in(impl_->plan(now, true), request, now);
}

std::vector<Explanation> Scheduler::explain_queue(TimeMs now) const {
  const Plan plan = impl_->plan(now, true);
  std::vector<Explanation> out;
  for (RequestId request : impl_->pending_order()) out.push_back(explanation_in(plan, request, now));
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

#include "coordinator/scheduler/scheduler_impl.h"

#include <fmt/format.h>

namespace kiln::scheduler {

// --- applying decisions ---------------------------------------------------------------------

std::vector<RequestId> Scheduler::Impl::pending_order() const {
  std::vector<RequestId> out;
  out.reserve(queue.size());
  for (const auto& [key, r] : queue) out.push_back(r->req.id);
  return out;
}

bool Scheduler::Impl::plain(const RequestRec& r) const {
  return !r.req.not_before_ms && !r.req.maintenance && !may_preempt(r);
}

QueuePlace Scheduler::Impl::place_of(const RequestRec& r) const {
  QueuePlace place;
  place.shape = shape_of(r.req);
  if (plain(r)) {
    place.filing = Filing::plain;
  } else if (filed_as_claimant(r)) {
    place.filing = Filing::claimant;
  } else if (filed_as_target(r)) {
    place.filing = Filing::target;
    place.due_ms = due_at(r);
  } else if (waits_for_target(r)) {
    place.filing = Filing::due;
  }
  return place;
}

void Scheduler::Impl::enqueue(RequestRec& r) { queue.add(order_key(r.req), r, place_of(r)); }

void Scheduler::Impl::dequeue(const RequestRec& r) { queue.remove(order_key(r.req), place_of(r)); }

void Scheduler::Impl::refile_targets(TimeMs now) {
  queue.refile_targets(now, [this](const RequestRec& r) { return due_at(r); });
}

RequestRec& Scheduler::Impl::add_request(RequestRec rec) {
  const RequestId id = rec.req.id;
  auto [it, added] = requests.emplace(id, std::move(rec));
  KILN_ASSERT(added, "validate() refuses a known request id");
  if (!it->second.lease) enqueue(it->second);
  return it->second;
}

void Scheduler::Impl::erase_request(RequestId id) {
  auto it = requests.find(id);
  KILN_ASSERT(it != requests.end() && !it->second.lease, "erasing a request that is unknown or holds a lease");
  if (it->second.claim) clear_claim(it->second);
  dequeue(it->second);
  preemptor_mentions.remove(it->second.preempted_by);
  requests.erase(it);
}

namespace {

// The nodes a lease's chips are on, each once.
std::vector<std::size_t> nodes_of(const std::vector<ChipRef>& chips) {
  std::vector<std::size_t> out;
  out.reserve(chips.size());
  for (const ChipRef& c : chips) out.push_back(c.node);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

}  // namespace

void Scheduler::Impl::add_lease(LeaseRec l) {
  const LeaseId id = l.id;
  // In the map first: filing a node by its chips' ends reads their leases.
  const LeaseRec& made = leases.emplace(id, std::move(l)).first->second;
  for (const ChipRef& c : made.chips) {
    KILN_ASSERT(nodes[c.node].chip_lease[c.pos] == 0, "granting a chip that is leased");
    nodes[c.node].chip_lease[c.pos] = id;
  }
  for (std::size_t n : nodes_of(made.chips)) {
    nodes_with_lease_changes.insert(n);
    recount_free(n);
  }
  RequestRec& r = requests.at(made.request);
  if (!r.lease) dequeue(r);
  r.lease = id;
  chips_in_use.add(made);
  lease_deadlines.add(made);
  if (made.cls == RequestClass::experiment && !made.grace_deadline_ms) without_notice.file(id);
}

void Scheduler::Impl::set_claim(RequestRec& r, Claim claim) {
  KILN_ASSERT(!r.claim, "a request holds one claim at a time");
  KILN_ASSERT(!r.lease, "only pending requests hold claims");
  // A request with a claim is filed as one (Filing::claimant).
  dequeue(r);
  r.claim = std::move(claim);
  enqueue(r);
  claim_lapses.add(lapse_at(*r.claim), r.req.id);
  for (const ChipRef& c : r.claim->chips) nodes[c.node].chip_claim[c.pos] = r.req.id;
  for (std::size_t n : nodes_of(r.claim->chips)) recount_free(n);
}

void Scheduler::Impl::clear_claim(RequestRec& r) {
  if (!r.claim) return;
  KILN_ASSERT(!r.lease, "only pending requests hold claims");
  for (const ChipRef& c : r.claim->chips) nodes[c.node].chip_claim[c.pos] = 0;
  const std::vector<std::size_t> claimed = nodes_of(r.claim->chips);
  claim_lapses.remove(lapse_at(*r.claim), r.req.id);
  dequeue(r);
  r.claim.reset();
  enqueue(r);
  for (std::size_t n : claimed) recount_free(n);
}

void Scheduler::Impl::set_grace_deadline(LeaseRec& l, TimeMs at) {
  lease_deadlines.remove(l);
  l.grace_deadline_ms = at;
  lease_deadlines.add(l);
  without_notice.unfile(l.id);
  for (std::size_t n : nodes_of(l.chips)) file_ends(n);
}

void Scheduler::Impl::end_lease(LeaseId id) {
  auto it = leases.find(id);
  KILN_ASSERT(it != leases.end(), "ending a lease that does not exist");
  const LeaseRec& l = it->second;
  for (const ChipRef& c : l.chips) {
    KILN_ASSERT(nodes[c.node].chip_lease[c.pos] == id, "chip not held by the lease ending");
    nodes[c.node].chip_lease[c.pos] = 0;
  }
  for (std::size_t n : nodes_of(l.chips)) {
    nodes_with_lease_changes.insert(n);
    recount_free(n);
  }
  lease_deadlines.remove(l);
  without_notice.unfile(id);
  chips_in_use.remove(l);
  auto req = requests.find(l.request);
  if (req != requests.end() && req->second.lease == id) {
    req->second.lease.reset();
    enqueue(req->second);
  }
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
    clear_claim(r);
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
    add_lease(std::move(l));
    actions.push_back(std::move(action));
  }
  for (Preemption& pre : p.preemptions) {
    RequestRec& r = requests.at(pre.request);
    for (LeaseId v : pre.claim.victims) {
      LeaseRec& l = leases.at(v);
      set_grace_deadline(l, now + knobs.grace_ms);
      l.preempted_for = pre.request;
      if (requests.at(l.request).preempted_by.insert(pre.request).second) preemptor_mentions.add(pre.request);
      actions.push_back(PreemptNotice{l.id, l.request, pre.request, *l.grace_deadline_ms});
    }
    set_claim(r, std::move(pre.claim));
  }
  wake = p.wake;
}

void Scheduler::Impl::schedule(TimeMs now) {
  if (queue.empty() && !knobs.exhaustive_passes) {
    // Nothing waits: a pass would decide nothing, and there is no window or target to wake for.
    KILN_ASSERT(claim_lapses.empty(), "only pending requests hold claims");
    wake = kNever;
    settled = {};
    return;
  }
  // A claim whose victims are long gone but whose request still cannot start (reservations
  // moved, say) would hold chips idle: let it go, the request plans afresh.
  while (const auto lapsed = claim_lapses.first_lapsed(now)) clear_claim(requests.at(*lapsed));
  refile_targets(now);
  Plan p = plan(now, false);
  const bool decided_nothing = p.grants.empty() && p.preemptions.empty();
  apply(p, now);
  settled = std::move(p.settled);
  settled.decided_nothing = decided_nothing;
  settled.at_ms = now;
}

void Scheduler::Impl::drop_claims_on(std::size_t node) {
  const std::set<RequestId> held(nodes[node].chip_claim.begin(), nodes[node].chip_claim.end());
  for (RequestId id : held) {
    if (id != 0) clear_claim(requests.at(id));
  }
}

bool Scheduler::Impl::lacks_free_chips(const RequestRec& r, const FreeChips& free) const {
  const Request& q = r.req;
  // Maintenance may enter nodes that are not up: it is looked at in full. A claim's free chips
  // are counted free like any other, so a request with one that lacks chips here cannot start.
  if (q.maintenance) return false;
  if (q.node) {
    auto it = node_index.find(*q.node);
    if (it == node_index.end()) return true;
    const int on_node = free.on_node(it->second);
    if (q.nodes > 0) return q.nodes > 1 || on_node < static_cast<int>(nodes[it->second].info.chips.size());
    return on_node < q.chips;
  }
  if (q.nodes > 0) return free.whole_free_nodes() < q.nodes;
  return free.most_on_a_node() < q.chips;
}

bool Scheduler::Impl::settled_without_pass(const RequestRec& r, TimeMs now) const {
  // A pass at this same moment has let the claims due to lapse by now go (schedule()).
  if (knobs.exhaustive_passes || !settled.valid || !settled.decided_nothing || settled.at_ms != now) {
    return false;
  }
  const Request& q = r.req;
  if (!plain(r)) return false;
  if (!queue.empty() && order_key(q) < queue.last_key()) return false;
  switch (knobs.policy) {
    case Policy::kiln:
      if (!settled.reservations_taken) return false;
      break;
    case Policy::fifo:
      // Behind a waiting head nothing starts, whatever is free.
      return settled.fifo_blocked;
    case Policy::strict_priority:
      break;
  }
  return lacks_free_chips(r, settled.free);
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
  if (queue.size() >= knobs.max_pending_requests) {
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
    s.largest_groups.refile(nullptr, node);
    NodeRec rec;
    rec.info = node;
    rec.since_ms = now;
    rec.chip_lease.assign(node.chips.size(), 0);
    rec.chip_claim.assign(node.chips.size(), 0);
    s.node_index.emplace(node.id, s.nodes.size());
    s.nodes.push_back(std::move(rec));
    s.fleet_by_revision.add(s.nodes.size() - 1, s.nodes.back());
    s.recount_free(s.nodes.size() - 1);
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
    s.drop_claims_on(it->second);
    s.largest_groups.refile(&rec.info, node);
    s.fleet_by_revision.remove(it->second, rec);
    rec.info = node;
    rec.chip_lease.resize(node.chips.size(), 0);
    rec.chip_claim.resize(node.chips.size(), 0);
    s.fleet_by_revision.add(it->second, rec);
    s.recount_free(it->second);
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
  s.fleet_by_revision.remove(it->second, rec);
  rec.state = state;
  s.fleet_by_revision.add(it->second, rec);
  rec.reason = std::move(reason);
  rec.owner = std::move(owner);
  rec.since_ms = now;
  s.recount_free(it->second);
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
  const RequestRec& queued = s.add_request(std::move(rec));
  // Checked once it is queued: it then sorts last, as it must to change nothing ahead of it.
  if (!s.settled_without_pass(queued, now)) s.schedule(now);
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
  const LeaseId id = l.id;
  s.add_request(std::move(rec));
  s.add_lease(std::move(l));
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
    s.erase_request(request);
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
  if (it->second.grace_deadline_ms) {
    s.requeue(lease, now);
  } else if (it->second.cls == RequestClass::experiment) {
    s.without_notice.file(lease);
  }
  s.schedule(now);
  return {};
}

void Scheduler::on_tick(TimeMs now) {
  Impl& s = *impl_;
  std::vector<LeaseId> revoke;
  std::vector<LeaseId> expire;
  for (LeaseId id : s.lease_deadlines.due_by(now)) {
    const LeaseRec& l = s.leases.at(id);
    (l.grace_deadline_ms && *l.grace_deadline_ms <= now ? revoke : expire).push_back(id);
  }
  // In lease order, as they are reported.
  std::sort(revoke.begin(), revoke.end());
  std::sort(expire.begin(), expire.end());
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
  // A lease under notice still ends at its expiry if that comes before the grace deadline.
  if (const auto deadline = impl_->lease_deadlines.next()) t = std::min(t, *deadline);
  // A claim its request has not used lets its chips go then (schedule()).
  if (const auto lapse = impl_->claim_lapses.next()) t = std::min(t, *lapse);
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
  return explanation_in(impl_->plan(now, true, request), request, now);
}

std::vector<Explanation> Scheduler::explain_queue(TimeMs now, std::size_t limit) const {
  const Plan plan = impl_->plan(now, true, std::nullopt, limit);
  std::vector<Explanation> out;
  for (auto it = impl_->queue.begin(); it != impl_->queue.end() && out.size() < limit; ++it) {
    out.push_back(explanation_in(plan, it->second->req.id, now));
  }
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

std::optional<NodeView> Scheduler::node(std::string_view id) const {
  auto it = impl_->node_index.find(id);
  if (it == impl_->node_index.end()) return std::nullopt;
  const NodeRec& n = impl_->nodes[it->second];
  return NodeView{n.info, n.state, n.reason, n.owner, n.since_ms};
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

std::vector<std::pair<int, RequestId>> Scheduler::leased_chips(std::string_view node) const {
  std::vector<std::pair<int, RequestId>> out;
  auto it = impl_->node_index.find(node);
  if (it == impl_->node_index.end()) return out;
  const NodeRec& rec = impl_->nodes[it->second];
  for (std::size_t p = 0; p < rec.chip_lease.size(); ++p) {
    if (rec.chip_lease[p] != 0) out.push_back({rec.info.chips[p].index, impl_->leases.at(rec.chip_lease[p]).request});
  }
  return out;
}

std::vector<std::string> Scheduler::take_nodes_with_lease_changes() {
  std::vector<std::string> out;
  for (std::size_t n : impl_->nodes_with_lease_changes) out.push_back(impl_->nodes[n].info.id);
  impl_->nodes_with_lease_changes.clear();
  return out;
}

}  // namespace kiln::scheduler

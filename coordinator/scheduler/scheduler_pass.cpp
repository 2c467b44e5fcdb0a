// The planning pass: which pending requests start now, which preempt, and which hold a
// reservation, read in scheduling order over the requests as they are filed.
#include "coordinator/scheduler/scheduler_impl.h"

#include <queue>

namespace kiln::scheduler {

// One pass over the queue at `now`: the view it marks, the chips it counts off as it grants, and
// the searches it shares among like requests. Made and run once per pass (Impl::plan).
class Scheduler::Impl::PlanningPass {
 public:
  PlanningPass(const Impl& s, TimeMs now, bool with_reasons, std::optional<RequestId> reasons_of,
               std::size_t first_requests)
      : s_(s),
        now_(now),
        with_reasons_(with_reasons),
        reasons_of_(reasons_of),
        first_requests_(first_requests),
        view_(s.initial_view(now)),
        used_(s.chips_in_use.counts()),
        free_(s.free_chips),
        share_searches_(!s.knobs.exhaustive_passes),
        explain_one_(with_reasons && reasons_of && !s.knobs.exhaustive_passes && s.queue.targets_filed_at() == now) {}

  Plan run() &&;

 private:
  // Requests of one shape see the same chips, so one search answers for every later request of
  // that shape until the pass changes what it read: a queue of like requests costs a search per
  // change, not one per request. The reference passes (exhaustive_passes) search for each.
  //  - A reservation found stays the earliest while marks only delay chips on other nodes: a
  //    reservation or a claim marked on a node drops only the answers on that node; a grant
  //    (which also changes how many chips are free) drops them all.
  //  - Placing now and finding victims also depend on the class (quotas), on the request's own
  //    claim (a request with one searches alone, as does one that preempted before), and on its
  //    work left only through which reservations its end would cross: the first reservation
  //    start at or after that end stands for it. A grant, a new claim or a new reservation
  //    drops those answers; a claim made by an earlier pass is in the view from the start.
  using SearchShape = std::tuple<int, int, std::optional<std::string>, std::optional<std::string>, bool,
                                 std::optional<TimeMs>>;
  using LikeRequests = std::tuple<SearchShape, RequestClass, TimeMs>;
  using Entries = std::map<OrderKey, RequestRec*>;
  using Cursor = std::pair<Entries::const_iterator, Entries::const_iterator>;

  static SearchShape search_shape(const Request& q) {
    return SearchShape{q.nodes, q.chips, q.revision, q.node, q.maintenance, q.not_before_ms};
  }
  LikeRequests like_requests(const RequestRec& r, TimeMs end) const {
    const auto crossed = reservation_starts_.lower_bound(end);
    return LikeRequests{search_shape(r.req), r.req.cls, crossed == reservation_starts_.end() ? kNever : *crossed};
  }
  std::optional<Grant> place_now_shared(const RequestRec& r);
  Reservation reserve_shared(const RequestRec& r);
  std::optional<Claim> find_victims_shared(const RequestRec& r);
  // Drops the reservations found that a mark on these chips' nodes may have moved.
  void marked(const std::vector<ChipRef>& chips);
  // A pass asked why one request waits reads the others as any pass does: the same decisions.
  bool explaining(RequestId id) const { return with_reasons_ && (!reasons_of_ || *reasons_of_ == id); }
  const FreeNotices& notices() {
    if (!notices_) notices_ = s_.free_notices(now_);
    return *notices_;
  }

  // Decides for one request: it starts, preempts, reserves or waits, and is explained if asked;
  // `ahead`: how many requests are ahead of it, if the pass knows (it read them all).
  void consider(const RequestRec& r, std::optional<std::size_t> ahead = std::nullopt);
  bool grant_now(const RequestRec& r);
  // Under the kiln policy: when a request that cannot start now will, by its claim, its victims or
  // its reservation, marking the view with what it holds.
  void plan_wait(const RequestRec& r, bool window_open, PendingInfo& info);
  // Whether it preempted; `info` gets its expected start by its victims.
  bool preempt(const RequestRec& r, bool window_open, TimeMs target, PendingInfo& info);
  void hold_reservation(const RequestRec& r, const Reservation& resv, PendingInfo& info);

  // Every request in scheduling order, up to first_requests: the reference passes, and those that
  // explain every request.
  void read_queue();
  // The requests as filed, merged in scheduling order, each shape read only while it could take
  // something (read_filings_merged).
  void read_filings();
  void read_filings_merged();
  // Whether the request at the head of cursor `c` could change nothing in the pass, and so neither
  // could the rest of its shape.
  bool shape_takes_nothing(std::size_t c, const RequestRec& r);
  bool read_elsewhere(std::size_t c) const;

  const Impl& s_;
  const TimeMs now_;
  const bool with_reasons_;
  const std::optional<RequestId> reasons_of_;
  const std::size_t first_requests_;
  Plan out_;
  PassView view_;
  std::map<std::pair<RequestClass, std::string>, int> used_;
  FreeChips free_;
  bool fifo_blocked_ = false;
  std::size_t reservations_ = 0;
  std::optional<FreeNotices> notices_;  // read once, by the first request that waits for its target
  FleetSummary fleet_;                  // filled as explanations need it
  const bool share_searches_;
  // Read in the merged order, as of a moment the requests are filed for; the requests ahead of it
  // are counted by the queue's ranks.
  const bool explain_one_;
  std::set<TimeMs> reservation_starts_;
  std::map<SearchShape, Reservation> reservations_by_shape_;
  std::uint64_t plan_changes_ = 0;
  std::map<LikeRequests, std::uint64_t> placement_failed_at_;
  std::map<LikeRequests, std::pair<std::uint64_t, std::optional<Claim>>> victims_by_shape_;
  // The cursors of read_filings, in groups: those before first_by_shape_ are read in full (the
  // others, the claimants with a free chip of their own claim, the request explained), then one
  // per shape of plain requests, of requests not yet due to preempt, of claimants and of due ones.
  std::vector<Cursor> cursors_;
  Entries own_chips_free_;
  Entries explained_;
  std::size_t first_by_shape_ = 0;
  std::size_t first_target_shape_ = 0;
  std::size_t first_claim_shape_ = 0;
  std::size_t first_due_shape_ = 0;
};

std::optional<Grant> Scheduler::Impl::PlanningPass::place_now_shared(const RequestRec& r) {
  if (!share_searches_ || r.claim) return s_.place_now(r, now_, view_, free_, used_);
  auto [it, added] = placement_failed_at_.try_emplace(like_requests(r, now_ + r.remaining_ms), plan_changes_);
  if (!added && it->second == plan_changes_) return std::nullopt;
  it->second = plan_changes_;
  return s_.place_now(r, now_, view_, free_, used_);
}

Scheduler::Impl::Reservation Scheduler::Impl::PlanningPass::reserve_shared(const RequestRec& r) {
  if (!share_searches_) return s_.reserve(r, now_, view_);
  auto [it, added] = reservations_by_shape_.try_emplace(search_shape(r.req));
  if (added) it->second = s_.reserve(r, now_, view_);
  return it->second;
}

void Scheduler::Impl::PlanningPass::marked(const std::vector<ChipRef>& chips) {
  std::erase_if(reservations_by_shape_, [&](const auto& entry) {
    return std::any_of(entry.second.chips.begin(), entry.second.chips.end(), [&](const ChipRef& found) {
      return std::any_of(chips.begin(), chips.end(), [&](const ChipRef& c) { return c.node == found.node; });
    });
  });
}

std::optional<Claim> Scheduler::Impl::PlanningPass::find_victims_shared(const RequestRec& r) {
  if (!share_searches_ || s_.preemptor_mentions.named(r.req.id)) return s_.find_victims(r, now_, view_, used_);
  auto [it, added] = victims_by_shape_.try_emplace(like_requests(r, now_ + s_.knobs.grace_ms + r.remaining_ms));
  if (added || it->second.first != plan_changes_) it->second = {plan_changes_, s_.find_victims(r, now_, view_, used_)};
  return it->second.second;
}

bool Scheduler::Impl::PlanningPass::grant_now(const RequestRec& r) {
  auto grant = place_now_shared(r);
  if (!grant) return false;
  reservations_by_shape_.clear();
  ++plan_changes_;
  for (const ChipRef& c : grant->chips) {
    ChipPlan& chip = view_[c.node][c.pos];
    chip.lease = kPlannedLease;
    chip.busy_until = now_ + r.remaining_ms;
    chip.claimed_by = 0;
    free_.take(c.node, 1);
  }
  used_[{r.req.cls, s_.nodes[grant->chips.front().node].info.revision}] += static_cast<int>(grant->chips.size());
  out_.grants.push_back(std::move(*grant));
  return true;
}

void Scheduler::Impl::PlanningPass::consider(const RequestRec& r, std::optional<std::size_t> ahead) {
  const RequestId id = r.req.id;
  const Request& q = r.req;
  const bool window_open = !q.not_before_ms || *q.not_before_ms <= now_;
  if (!window_open) out_.wake = std::min(out_.wake, *q.not_before_ms);
  // One waiting for its target wakes the scheduler when it becomes due, whatever else the pass
  // finds for it: a pass that leaves it unread (read_filings) knows that much of it.
  if (s_.waits_for_target(r) && s_.due_at(r) > now_) out_.wake = std::min(out_.wake, s_.due_at(r));
  if (window_open && !fifo_blocked_ && !s_.lacks_free_chips(r, free_) && grant_now(r)) return;
  if (s_.knobs.policy == Policy::fifo && window_open) fifo_blocked_ = true;
  // Past the reservations, a plain request only waits: the pass need not look for its place,
  // unless it is asked why.
  if (!explaining(id) && !s_.knobs.exhaustive_passes && s_.plain(r) &&
      (!s_.kiln_policy() || reservations_ >= s_.knobs.max_reservations)) {
    return;
  }
  PendingInfo info;
  if (s_.kiln_policy()) plan_wait(r, window_open, info);
  if (explaining(id)) {
    if (!ahead) ahead = s_.queue.ahead_of(s_.order_key(q));
    info.reasons = s_.reasons_for(r, now_, view_, used_, *ahead, fleet_);
    out_.pending[id] = std::move(info);
  }
}

void Scheduler::Impl::PlanningPass::plan_wait(const RequestRec& r, bool window_open, PendingInfo& info) {
  if (r.claim) {
    // The view holds its chips for it from the start (claim_end).
    info.expected_start = std::max(r.claim->ready_ms, now_);
    return;
  }
  const Reservation resv = reserve_shared(r);
  const std::optional<TimeMs> target = s_.may_preempt(r) ? s_.target_time(r) : std::nullopt;
  const bool late = resv.start == kNever || (target && resv.start > *target);
  if (target && late && preempt(r, window_open, *target, info)) return;
  if (resv.start != kNever) hold_reservation(r, resv, info);
}

bool Scheduler::Impl::PlanningPass::preempt(const RequestRec& r, bool window_open, TimeMs target, PendingInfo& info) {
  const RequestId id = r.req.id;
  // Preempt once the target can no longer be met otherwise; before that only if the victims lose
  // nothing (a checkpoint falls inside their grace), so the wait for the target does not end on an
  // expensive victim.
  const bool due = now_ + s_.knobs.grace_ms >= target;
  if (!due) out_.wake = std::min({out_.wake, target - s_.knobs.grace_ms, notices().next});
  // Before it is due, victims serve only if a notice to them loses nothing; unless it is asked
  // why, it need not look for them when no notice would.
  const bool look = due || explaining(id) || s_.knobs.exhaustive_passes || (window_open && notices().now);
  auto claim = look ? find_victims_shared(r) : std::nullopt;
  if (!claim) return false;
  if (!due && !(window_open && claim->lost_chip_ms == 0)) {
    // Victims are there: it preempts them when its target comes, at the latest.
    info.expected_start = std::max(target, claim->ready_ms);
    return false;
  }
  marked(claim->chips);
  ++plan_changes_;
  info.expected_start = claim->ready_ms;
  reservation_starts_.insert(claim->ready_ms);
  mark_reserved(view_, claim->chips, claim->ready_ms, claim->ready_ms + r.remaining_ms, id);
  for (const ChipRef& c : claim->chips) view_[c.node][c.pos].claimed_by = id;
  out_.preemptions.push_back({id, std::move(*claim)});
  return true;
}

void Scheduler::Impl::PlanningPass::hold_reservation(const RequestRec& r, const Reservation& resv,
                                                     PendingInfo& info) {
  const Request& q = r.req;
  info.expected_start = std::min(resv.start, info.expected_start.value_or(kNever));
  // Windows booked ahead (release) always hold their nodes; otherwise only the first blocked
  // requests do, so the queue's head is never starved and younger work still backfills around the
  // rest.
  if (!q.not_before_ms && reservations_ >= s_.knobs.max_reservations) return;
  if (!q.not_before_ms) ++reservations_;
  marked(resv.chips);
  ++plan_changes_;
  reservation_starts_.insert(resv.start);
  mark_reserved(view_, resv.chips, resv.start, resv.start + r.remaining_ms, q.id);
}

void Scheduler::Impl::PlanningPass::read_queue() {
  std::size_t read = 0;
  for (auto it = s_.queue.begin(); it != s_.queue.end() && read < first_requests_; ++it, ++read) {
    consider(*it->second, read);
  }
}

// The other requests, each shape's plain ones, each shape's not yet due to preempt, each shape's
// due and each shape's holding a claim, merged in scheduling order. A shape is read no further
// once its next request can take nothing: no chips free for it now (there are only fewer later in
// the pass) and no reservation left, or a fifo queue whose head waits; for due ones, also no node
// where a notice could free chips for it; for claims, no chips free for it now. One not yet due
// could still preempt an experiment that a notice costs nothing now; and each wakes the scheduler
// when it becomes due, or when a notice would cost nothing if it is late, so a shape of them is
// left only while the earliest of those moments is a due one: the pass wakes for it below.
void Scheduler::Impl::PlanningPass::read_filings() {
  KILN_ASSERT(s_.queue.targets_filed_at() == now_, "schedule() files the requests waiting for their targets as of its pass");
  const RequestQueue& queue = s_.queue;
  cursors_.push_back({queue.others().begin(), queue.others().end()});
  // The requests holding a claim with a free chip of it are read in full: the free chips the other
  // claimants may use are only those no claim holds (free_unclaimed), of which there are no more at
  // any point of the pass than at its start.
  for (std::size_t n : s_.claimed_free_nodes.nodes()) {
    for (std::size_t p = 0; p < s_.nodes[n].chip_lease.size(); ++p) {
      const RequestId id = s_.nodes[n].chip_claim[p];
      if (id == 0 || s_.nodes[n].chip_lease[p] != 0) continue;
      const RequestRec& r = s_.requests.at(id);
      if (!filed_as_claimant(r)) continue;
      own_chips_free_.emplace(s_.order_key(r.req), queue.at(s_.order_key(r.req)));
    }
  }
  cursors_.push_back({own_chips_free_.begin(), own_chips_free_.end()});
  // The request explained is read wherever it is filed, and the pass ends with it.
  if (explain_one_) {
    const OrderKey key = s_.order_key(s_.requests.at(*reasons_of_).req);
    explained_.emplace(key, queue.at(key));
  }
  cursors_.push_back({explained_.begin(), explained_.end()});
  first_by_shape_ = cursors_.size();
  const auto add_shapes = [&](const RequestQueue::ByShape& by_shape) {
    for (const auto& [shape, entries] : by_shape) cursors_.push_back({entries.begin(), entries.end()});
    return cursors_.size();
  };
  first_target_shape_ = add_shapes(queue.plain_by_shape());
  first_claim_shape_ = add_shapes(queue.targets_by_shape());
  first_due_shape_ = add_shapes(queue.claims_by_shape());
  add_shapes(queue.due_by_shape());
  if (const auto next_due = queue.next_target_due()) out_.wake = std::min(out_.wake, *next_due);
  read_filings_merged();
}

bool Scheduler::Impl::PlanningPass::read_elsewhere(std::size_t c) const {
  const OrderKey& key = cursors_[c].first->first;
  return (c >= first_claim_shape_ && c < first_due_shape_ && own_chips_free_.count(key)) ||
         (c != first_by_shape_ - 1 && explained_.count(key));
}

bool Scheduler::Impl::PlanningPass::shape_takes_nothing(std::size_t c, const RequestRec& r) {
  const bool may_reserve = s_.kiln_policy() && reservations_ < s_.knobs.max_reservations;
  const bool takes_nothing =
      !may_reserve && (s_.knobs.policy == Policy::fifo ? fifo_blocked_ : s_.lacks_free_chips(r, free_));
  if (c >= first_due_shape_) {
    // Nodes filed for victims only ever hold more than a pass finds there.
    return takes_nothing && !s_.may_find_victims(r.req);
  }
  // A request with a claim reserves nothing: it only starts, or waits.
  if (c >= first_claim_shape_) return s_.lacks_free_chips(r, s_.free_unclaimed);
  if (c >= first_target_shape_ && takes_nothing) {
    return !notices().now && notices().next >= *s_.queue.next_target_due();
  }
  return takes_nothing;
}

void Scheduler::Impl::PlanningPass::read_filings_merged() {
  using Head = std::pair<OrderKey, std::size_t>;
  std::priority_queue<Head, std::vector<Head>, std::greater<>> heads;
  const auto advance = [&](std::size_t c) {
    if (++cursors_[c].first != cursors_[c].second) heads.push({cursors_[c].first->first, c});
  };
  for (std::size_t c = 0; c < cursors_.size(); ++c) {
    if (cursors_[c].first != cursors_[c].second) heads.push({cursors_[c].first->first, c});
  }
  while (!heads.empty()) {
    const std::size_t c = heads.top().second;
    heads.pop();
    const RequestRec& r = *cursors_[c].first->second;
    if (read_elsewhere(c)) {
      advance(c);
      continue;
    }
    if (c >= first_by_shape_ && shape_takes_nothing(c, r)) continue;
    consider(r);
    if (c == first_by_shape_ - 1) break;
    advance(c);
  }
}

Plan Scheduler::Impl::PlanningPass::run() && {
  if ((with_reasons_ && !explain_one_) || s_.knobs.exhaustive_passes) {
    read_queue();
  } else {
    read_filings();
  }
  out_.settled.valid = true;
  out_.settled.free = std::move(free_);
  out_.settled.reservations_taken = reservations_ >= s_.knobs.max_reservations;
  out_.settled.fifo_blocked = fifo_blocked_;
  return std::move(out_);
}

Plan Scheduler::Impl::plan(TimeMs now, bool with_reasons, std::optional<RequestId> reasons_of,
                           std::size_t first_requests) const {
  KILN_ASSERT(first_requests == std::numeric_limits<std::size_t>::max() || (with_reasons && !reasons_of),
              "only a pass explaining every request may end early");
  return PlanningPass(*this, now, with_reasons, reasons_of, first_requests).run();
}

}  // namespace kiln::scheduler

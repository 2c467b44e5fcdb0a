#include <algorithm>
#include <functional>
#include <map>
#include <typeinfo>
#include <set>

#include <doctest/doctest.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "coordinator/scheduler/scheduler.h"

using namespace kiln;
using namespace kiln::scheduler;

namespace {

// Eight chips: NUMA node = chip / 4, switch group = chip / 2, as a typical 2-socket host.
NodeInfo make_node(const std::string& id, const std::string& revision, int chips = 8) {
  NodeInfo n;
  n.id = id;
  n.revision = revision;
  for (int i = 0; i < chips; ++i) n.chips.push_back({i, i / 4, i / 2});
  return n;
}

Request make_request(RequestId id, RequestClass cls, int chips, DurationMs duration_ms,
                     TimeMs submit_ms = 0) {
  Request r;
  r.id = id;
  r.cls = cls;
  r.chips = chips;
  r.expected_duration_ms = duration_ms;
  r.submit_ms = submit_ms;
  return r;
}

std::vector<Action> drain(Scheduler& s) {
  std::vector<Action> out;
  while (auto a = s.poll_action()) out.push_back(std::move(*a));
  return out;
}

template <class T>
std::vector<T> only(const std::vector<Action>& actions) {
  std::vector<T> out;
  for (const Action& a : actions) {
    if (const T* t = std::get_if<T>(&a)) out.push_back(*t);
  }
  return out;
}

std::optional<LeaseGranted> granted(const std::vector<Action>& actions, RequestId request) {
  for (const LeaseGranted& g : only<LeaseGranted>(actions)) {
    if (g.request == request) return g;
  }
  return std::nullopt;
}

std::set<int> numa_of(const LeaseGranted& g) {
  std::set<int> numa;
  for (const Placement& p : g.placement) {
    for (int chip : p.chips) numa.insert(chip / 4);
  }
  return numa;
}

// Presubmit preempts as soon as it cannot start at once, to make preemption easy to provoke.
SchedulerKnobs knobs_with_grace(DurationMs grace_ms) {
  SchedulerKnobs k;
  k.grace_ms = grace_ms;
  k.target_start_latency_ms[rank(RequestClass::presubmit)] = 0;
  return k;
}

// A 5-minute grace, and presubmits that should start within 30 minutes of their submission.
SchedulerKnobs knobs_with_presubmit_target() {
  SchedulerKnobs k = knobs_with_grace(5 * kMinuteMs);
  k.target_start_latency_ms[rank(RequestClass::presubmit)] = 30 * kMinuteMs;
  return k;
}

}  // namespace

TEST_CASE("one-node grants take chips of one NUMA node and fit best to keep nodes whole") {
  Scheduler s{SchedulerKnobs{}};
  REQUIRE(s.upsert_node(make_node("n01", "a"), 0));
  REQUIRE(s.upsert_node(make_node("n02", "a"), 0));
  REQUIRE(s.submit(make_request(1, RequestClass::experiment, 2, kHourMs), 0));
  auto first = granted(drain(s), 1);
  REQUIRE(first);
  CHECK(numa_of(*first).size() == 1);
  CHECK(first->placement.size() == 1);
  const std::string busy_node = first->placement[0].node;

  // Best fit: the 4-chip request goes to the node already in use, on the untouched NUMA node.
  REQUIRE(s.submit(make_request(2, RequestClass::experiment, 4, kHourMs), 0));
  auto second = granted(drain(s), 2);
  REQUIRE(second);
  CHECK(second->placement[0].node == busy_node);
  CHECK(numa_of(*second).size() == 1);
  CHECK(numa_of(*second) != numa_of(*first));

  // The other node stayed whole, so an 8-chip request starts at once.
  REQUIRE(s.submit(make_request(3, RequestClass::experiment, 8, kHourMs), 0));
  auto third = granted(drain(s), 3);
  REQUIRE(third);
  CHECK(third->placement[0].node != busy_node);
  CHECK(third->placement[0].chips.size() == 8);
  CHECK(s.check_invariants());
}

TEST_CASE("multi-node requests get whole nodes of one revision, all or nothing") {
  Scheduler s{SchedulerKnobs{}};
  REQUIRE(s.upsert_node(make_node("a1", "a"), 0));
  REQUIRE(s.upsert_node(make_node("b1", "b"), 0));
  REQUIRE(s.upsert_node(make_node("b2", "b"), 0));
  Request big = make_request(1, RequestClass::nightly, 0, kHourMs);
  big.nodes = 2;
  REQUIRE(s.submit(big, 0));
  auto g = granted(drain(s), 1);
  REQUIRE(g);
  REQUIRE(g->placement.size() == 2);
  CHECK(g->placement[0].node == "b1");
  CHECK(g->placement[1].node == "b2");

  Request too_big = make_request(2, RequestClass::nightly, 0, kHourMs);
  too_big.nodes = 2;
  too_big.revision = "a";
  REQUIRE(s.submit(too_big, 0));
  CHECK(!granted(drain(s), 2));
  CHECK(s.is_pending(2));

  auto bad = s.submit(make_request(3, RequestClass::experiment, 3, kHourMs), 0);
  REQUIRE(!bad);
  CHECK(bad.error().code == Errc::invalid_argument);
  CHECK(bad.error().message.find("1, 2, 4 or 8") != std::string::npos);
}

TEST_CASE("quota without borrowing keeps a class pending and explain says so") {
  SchedulerKnobs k;
  k.quota_chips[{RequestClass::experiment, "a"}] = 8;
  k.may_borrow[rank(RequestClass::experiment)] = false;
  Scheduler s{k};
  REQUIRE(s.upsert_node(make_node("n01", "a"), 0));
  REQUIRE(s.upsert_node(make_node("n02", "a"), 0));
  REQUIRE(s.submit(make_request(1, RequestClass::experiment, 8, kHourMs), 0));
  REQUIRE(s.submit(make_request(2, RequestClass::experiment, 8, kHourMs), 0));
  auto actions = drain(s);
  CHECK(granted(actions, 1));
  CHECK(!granted(actions, 2));
  Explanation why = s.explain(2, 0);
  CHECK(why.pending);
  CHECK(why.text().find("quota of class experiment on a is used up (8/8 chips)") !=
        std::string::npos);
  // Once the first lease ends the second fits inside the quota.
  REQUIRE(s.release(granted(actions, 1)->lease, 10 * kMinuteMs));
  CHECK(granted(drain(s), 2));
}

TEST_CASE("idle capacity is borrowed beyond quota and reclaimed first") {
  SchedulerKnobs k = knobs_with_grace(5 * kMinuteMs);
  k.quota_chips[{RequestClass::experiment, "a"}] = 8;
  Scheduler s{k};
  REQUIRE(s.upsert_node(make_node("n01", "a"), 0));
  REQUIRE(s.upsert_node(make_node("n02", "a"), 0));
  Request owned = make_request(1, RequestClass::experiment, 8, 4 * kHourMs);
  REQUIRE(s.submit(owned, 0));
  auto owned_grant = granted(drain(s), 1);
  REQUIRE(owned_grant);
  CHECK(!owned_grant->borrowed);
  // The borrowed lease has checkpointed just now, the owned one never: by lost work alone the
  // borrowed one would be spared, but lent capacity is reclaimed first.
  REQUIRE(s.submit(make_request(2, RequestClass::experiment, 8, 4 * kHourMs, kMinuteMs), kMinuteMs));
  auto borrowed_grant = granted(drain(s), 2);
  REQUIRE(borrowed_grant);
  CHECK(borrowed_grant->borrowed);
  REQUIRE(s.checkpoint_ack(borrowed_grant->lease, 30 * kMinuteMs));
  drain(s);

  REQUIRE(s.submit(make_request(3, RequestClass::presubmit, 1, 8 * kMinuteMs, 30 * kMinuteMs),
                   30 * kMinuteMs));
  auto notices = only<PreemptNotice>(drain(s));
  REQUIRE(notices.size() == 1);
  CHECK(notices[0].lease == borrowed_grant->lease);
  CHECK(notices[0].preempted_for == 3);
}

// A pass searches once for victims for like requests, but a class's quota makes its own answer:
// a presubmit over its quota finds none, and the bisect of the same shape behind it still does.
TEST_CASE("like requests of different classes do not share a search for victims") {
  SchedulerKnobs knobs;
  knobs.max_reservations = 0;  // no reservation changes the pass's plan between the two
  knobs.quota_chips[{RequestClass::presubmit, "a"}] = 8;
  Scheduler s{knobs};
  for (const char* n : {"n01", "n02", "n03"}) REQUIRE(s.upsert_node(make_node(n, "a"), 0));
  REQUIRE(s.submit(make_request(1, RequestClass::presubmit, 8, 4 * kHourMs), 0));
  REQUIRE(s.submit(make_request(2, RequestClass::experiment, 8, 4 * kHourMs), 0));
  REQUIRE(s.submit(make_request(3, RequestClass::experiment, 8, 4 * kHourMs), 0));
  REQUIRE(only<LeaseGranted>(drain(s)).size() == 3);

  REQUIRE(s.submit(make_request(4, RequestClass::presubmit, 8, kHourMs), 0));
  REQUIRE(s.submit(make_request(5, RequestClass::bisect, 8, kHourMs), 0));
  std::vector<PreemptNotice> notices;
  for (TimeMs now = 0; now <= 40 * kMinuteMs; now += kMinuteMs) {
    s.on_tick(now);
    for (const PreemptNotice& n : only<PreemptNotice>(drain(s))) notices.push_back(n);
  }
  REQUIRE(notices.size() == 1);
  CHECK(notices[0].preempted_for == 5);
}

TEST_CASE("a request due to preempt does not count on chips granted earlier in the same pass") {
  SchedulerKnobs knobs;
  knobs.max_reservations = 0;  // only the grant changes the pass's plan between the two searches
  Scheduler s{knobs};
  for (const char* n : {"n01", "n02"}) REQUIRE(s.upsert_node(make_node(n, "a"), 0));
  REQUIRE(s.upsert_node(make_node("n03", "b"), 0));
  // n01: experiments of 4 and 2 chips and two chips free; n02: experiments of 4 and 4, which
  // notices cost more; n03, of another revision: an experiment whose checkpoint at 00:20 makes a
  // notice free from 00:15, when every presubmit below may look for victims.
  std::vector<Request> experiments;
  for (auto [chips, node] : {std::pair{4, "n01"}, {2, "n01"}, {4, "n02"}, {4, "n02"}, {8, "n03"}}) {
    Request q = make_request(static_cast<RequestId>(experiments.size() + 1), RequestClass::experiment, chips,
                             2 * kHourMs);
    q.node = node;
    experiments.push_back(q);
  }
  experiments.back().checkpoint_interval_ms = 20 * kMinuteMs;
  for (const Request& q : experiments) REQUIRE(s.submit(q, 0));
  std::map<RequestId, LeaseId> lease_of;
  for (const LeaseGranted& g : only<LeaseGranted>(drain(s))) lease_of[g.request] = g.lease;
  REQUIRE(lease_of.size() == 5);

  // In scheduling order: a presubmit of 8 chips long before its target; a one-chip presubmit whose
  // window opens at 00:15; a presubmit like the first, due to preempt from 00:15.
  const TimeMs submitted = kMinuteMs;
  Request patient = make_request(6, RequestClass::presubmit, 8, kHourMs, submitted);
  patient.revision = "a";
  patient.target_start_latency_ms = kHourMs;
  Request one_chip = make_request(7, RequestClass::presubmit, 1, kMinuteMs, submitted);
  one_chip.not_before_ms = 15 * kMinuteMs;
  Request due = patient;
  due.id = 8;
  due.target_start_latency_ms = 19 * kMinuteMs;
  for (const Request& q : {patient, one_chip, due}) REQUIRE(s.submit(q, submitted));
  REQUIRE(drain(s).empty());

  // At 00:15 the first finds n01's experiments cheapest, with the chips free there making 8, and,
  // not due, only waits; the one-chip presubmit takes one of those chips. The due one cannot
  // count on it: it preempts n02's experiments.
  s.on_tick(15 * kMinuteMs);
  const auto decided = drain(s);
  const auto grant = granted(decided, 7);
  REQUIRE(grant);
  REQUIRE(grant->placement.size() == 1);
  CHECK(grant->placement[0].node == "n01");
  std::set<LeaseId> noticed;
  for (const PreemptNotice& n : only<PreemptNotice>(decided)) {
    CHECK(n.preempted_for == 8);
    noticed.insert(n.lease);
  }
  CHECK(noticed == std::set<LeaseId>{lease_of[3], lease_of[4]});
  REQUIRE(s.check_invariants());
}

TEST_CASE("preemption gives notice, revokes at the grace deadline and requeues with its age") {
  Scheduler s{knobs_with_grace(5 * kMinuteMs)};
  REQUIRE(s.upsert_node(make_node("n01", "a"), 0));
  Request exp = make_request(1, RequestClass::experiment, 8, 2 * kHourMs);
  exp.checkpoint_interval_ms = 15 * kMinuteMs;
  REQUIRE(s.submit(exp, 0));
  auto grant = granted(drain(s), 1);
  REQUIRE(grant);

  const TimeMs t = 20 * kMinuteMs;
  REQUIRE(s.submit(make_request(2, RequestClass::presubmit, 1, 8 * kMinuteMs, t), t));
  auto notices = only<PreemptNotice>(drain(s));
  REQUIRE(notices.size() == 1);
  CHECK(notices[0].lease == grant->lease);
  CHECK(notices[0].grace_deadline_ms == t + 5 * kMinuteMs);
  CHECK(s.next_deadline() == t + 5 * kMinuteMs);
  // The victim by its request's name, and the grace as a wait, not as a clock time.
  CHECK(s.explain(2, t).text().find("preempting request 1 for it; the grace ends in 5m") != std::string::npos);

  s.on_tick(t + 5 * kMinuteMs);
  auto actions = drain(s);
  REQUIRE(only<Revoke>(actions).size() == 1);
  auto requeued = only<Requeued>(actions);
  REQUIRE(requeued.size() == 1);
  // Revoked at 25 min, last checkpoint at 15 min: 15 minutes of work are kept.
  CHECK(requeued[0].remaining_ms == 2 * kHourMs - 15 * kMinuteMs);
  CHECK(granted(actions, 2));
  CHECK(s.is_pending(1));
  // Requeued with its original age: still ahead of a younger experiment.
  REQUIRE(s.submit(make_request(3, RequestClass::experiment, 8, kHourMs, t), t + 5 * kMinuteMs));
  CHECK(s.pending().front() == 1);
  CHECK(s.check_invariants());
}

TEST_CASE("a checkpoint acknowledgement under notice lets the lease go early") {
  Scheduler s{knobs_with_grace(5 * kMinuteMs)};
  REQUIRE(s.upsert_node(make_node("n01", "a"), 0));
  REQUIRE(s.submit(make_request(1, RequestClass::experiment, 8, 2 * kHourMs), 0));
  auto grant = granted(drain(s), 1);
  REQUIRE(grant);
  const TimeMs t = 30 * kMinuteMs;
  REQUIRE(s.submit(make_request(2, RequestClass::presubmit, 4, 8 * kMinuteMs, t), t));
  REQUIRE(only<PreemptNotice>(drain(s)).size() == 1);

  REQUIRE(s.checkpoint_ack(grant->lease, t + kMinuteMs));
  auto actions = drain(s);
  CHECK(only<Revoke>(actions).empty());
  auto requeued = only<Requeued>(actions);
  REQUIRE(requeued.size() == 1);
  CHECK(requeued[0].remaining_ms == 2 * kHourMs - 31 * kMinuteMs);
  auto ci = granted(actions, 2);
  REQUIRE(ci);
  CHECK(numa_of(*ci).size() == 1);
}

TEST_CASE("a request ahead of a preempting one does not reserve the chips its claim holds") {
  Scheduler s{knobs_with_grace(5 * kMinuteMs)};
  REQUIRE(s.upsert_node(make_node("n01", "a"), 0));
  REQUIRE(s.submit(make_request(1, RequestClass::experiment, 8, 2 * kHourMs), 0));
  REQUIRE(granted(drain(s), 1));
  // Ahead in the queue and far from its target: it waits, and reserves the node.
  Request patient = make_request(2, RequestClass::presubmit, 8, kHourMs, 10 * kMinuteMs);
  patient.target_start_latency_ms = 2 * kHourMs;
  REQUIRE(s.submit(patient, 10 * kMinuteMs));
  CHECK(drain(s).empty());
  const TimeMs t = 11 * kMinuteMs;
  REQUIRE(s.submit(make_request(3, RequestClass::presubmit, 8, 8 * kMinuteMs, t), t));
  REQUIRE(only<PreemptNotice>(drain(s)).size() == 1);
  // The reservation ahead waits for the claim's work, not only for the victim's grace.
  CHECK(s.explain(2, t).expected_start_ms == t + 5 * kMinuteMs + 8 * kMinuteMs);

  // When the victim is gone the chips go to the request that preempted for them, not idle until
  // its claim lapses.
  s.on_tick(t + 5 * kMinuteMs);
  auto actions = drain(s);
  REQUIRE(only<Revoke>(actions).size() == 1);
  CHECK(granted(actions, 3));
  CHECK(s.check_invariants());
}

TEST_CASE("a node whose free chips a claim holds is not one of the free nodes for others") {
  SchedulerKnobs knobs = knobs_with_grace(5 * kMinuteMs);
  // The nightlies here only wait, as they would without a start target: what is tested is where
  // they may start, not whom they preempt.
  knobs.target_start_latency_ms[rank(RequestClass::nightly)] = std::nullopt;
  Scheduler s{knobs};
  for (const char* id : {"n00", "n01", "n02", "n03"}) REQUIRE(s.upsert_node(make_node(id, "a"), 0));
  // The experiments are pinned: requeued, the victim waits for its own node.
  for (RequestId id : {1, 2}) {
    Request pinned = make_request(id, RequestClass::experiment, 8, 2 * kHourMs);
    pinned.node = fmt::format("n0{}", id - 1);
    REQUIRE(s.submit(pinned, 0));
  }
  REQUIRE(s.submit(make_request(3, RequestClass::nightly, 8, kHourMs), 0));
  REQUIRE(s.submit(make_request(4, RequestClass::nightly, 8, kHourMs), 0));
  auto started = drain(s);
  REQUIRE(only<LeaseGranted>(started).size() == 4);
  // Due to preempt a grace before its window opens: it claims an experiment's node at 2 minutes.
  Request windowed = make_request(5, RequestClass::presubmit, 8, 30 * kMinuteMs, kMinuteMs);
  windowed.not_before_ms = 7 * kMinuteMs;
  REQUIRE(s.submit(windowed, kMinuteMs));
  s.on_tick(2 * kMinuteMs);
  auto notices = only<PreemptNotice>(drain(s));
  REQUIRE(notices.size() == 1);
  // The victim goes early: its node is wholly free, held for a request whose window is not open.
  REQUIRE(s.checkpoint_ack(notices[0].lease, 3 * kMinuteMs));
  CHECK(only<LeaseGranted>(drain(s)).empty());
  const TimeMs t = 4 * kMinuteMs;
  REQUIRE(s.release(granted(started, 3)->lease, t));
  REQUIRE(s.release(granted(started, 4)->lease, t));
  drain(s);

  const auto whole_node = [&](RequestId id, DurationMs work_ms) {
    Request q = make_request(id, RequestClass::nightly, 8, work_ms, t);
    q.nodes = 1;
    return q;
  };
  // A whole-node request starts on a node the nightlies left...
  REQUIRE(s.submit(whole_node(6, 5 * kMinuteMs), t));
  auto grant = granted(drain(s), 6);
  REQUIRE(grant);
  CHECK((grant->placement.front().node == "n02" || grant->placement.front().node == "n03"));
  // ...one with a window reserves the other one from its window on...
  Request later = whole_node(7, 20 * kMinuteMs);
  later.not_before_ms = 10 * kMinuteMs;
  REQUIRE(s.submit(later, t));
  CHECK(drain(s).empty());
  // ...so that a request behind it that would not end by then does not start there.
  REQUIRE(s.submit(whole_node(8, 20 * kMinuteMs), t));
  CHECK(drain(s).empty());
  CHECK(s.check_invariants());
}

TEST_CASE("a claim its request cannot use lapses a grace after its victims' and wakes the scheduler for it") {
  SchedulerKnobs knobs = knobs_with_grace(5 * kMinuteMs);
  knobs.quota_chips[{RequestClass::presubmit, "a"}] = 8;
  knobs.may_borrow[rank(RequestClass::presubmit)] = false;
  Scheduler s{knobs};
  REQUIRE(s.upsert_node(make_node("n00", "a"), 0));
  REQUIRE(s.upsert_node(make_node("n01", "a"), 0));
  REQUIRE(s.submit(make_request(1, RequestClass::experiment, 8, 2 * kHourMs), 0));
  REQUIRE(s.submit(make_request(2, RequestClass::nightly, 8, kHourMs), 0));
  auto started = drain(s);
  REQUIRE(granted(started, 2));
  // Ahead in the queue, pinned to the nightly's node, and far from its target: it waits.
  Request pinned = make_request(3, RequestClass::presubmit, 8, kHourMs);
  pinned.node = granted(started, 2)->placement.front().node;
  pinned.target_start_latency_ms = 2 * kHourMs;
  REQUIRE(s.submit(pinned, 0));
  // Due at once: it preempts the experiment and claims its node, ready at 6 minutes.
  REQUIRE(s.submit(make_request(4, RequestClass::presubmit, 8, kHourMs, kMinuteMs), kMinuteMs));
  REQUIRE(only<PreemptNotice>(drain(s)).size() == 1);
  // The pinned presubmit takes the class's whole quota: the claimant cannot start when its victim goes.
  REQUIRE(s.release(granted(started, 2)->lease, 2 * kMinuteMs));
  REQUIRE(granted(drain(s), 3));
  REQUIRE(s.submit(make_request(5, RequestClass::nightly, 8, kHourMs, 3 * kMinuteMs), 3 * kMinuteMs));
  CHECK(drain(s).empty());
  s.on_tick(6 * kMinuteMs);
  auto revoked = drain(s);
  CHECK(only<Revoke>(revoked).size() == 1);
  CHECK(only<LeaseGranted>(revoked).empty());
  const std::string held = "free chips on n00 are held for request 4 (preemption under way)";
  CHECK(s.explain(5, 10 * kMinuteMs).text().find(held) != std::string::npos);
  // The claim lapses a grace after its victims' grace ended, and the scheduler wakes for it.
  CHECK(s.next_deadline() == 11 * kMinuteMs);
  s.on_tick(11 * kMinuteMs);
  drain(s);
  CHECK(s.explain(5, 11 * kMinuteMs).text().find(held) == std::string::npos);
  CHECK(s.check_invariants());
}

TEST_CASE("an explanation names the node with the most free chips after the pass's own grants") {
  Scheduler s{SchedulerKnobs{}};
  for (const char* id : {"n0", "n1", "n2"}) REQUIRE(s.upsert_node(make_node(id, "a"), 0));
  // Half of each node taken.
  for (RequestId id : {1, 2, 3}) {
    Request half = make_request(id, RequestClass::nightly, 4, kHourMs);
    half.node = fmt::format("n{}", id - 1);
    REQUIRE(s.submit(half, 0));
  }
  REQUIRE(only<LeaseGranted>(drain(s)).size() == 3);
  // Its window opens at 10 minutes: the pass that explains the queue then grants it two chips of
  // n0, and the whole-node request after it reserves n1; n2 is left unread.
  Request windowed = make_request(4, RequestClass::presubmit, 2, kHourMs);
  windowed.not_before_ms = 10 * kMinuteMs;
  REQUIRE(s.submit(windowed, 0));
  REQUIRE(s.submit(make_request(5, RequestClass::experiment, 8, kHourMs), 0));
  drain(s);
  CHECK(s.explain(5, 10 * kMinuteMs).text().find("no node of any revision has 8 free chips (most free: 4 on n1)") !=
        std::string::npos);
}

TEST_CASE("the victim is the lease that loses the least work") {
  Scheduler s{knobs_with_grace(5 * kMinuteMs)};
  REQUIRE(s.upsert_node(make_node("n01", "a"), 0));
  REQUIRE(s.upsert_node(make_node("n02", "a"), 0));
  REQUIRE(s.submit(make_request(1, RequestClass::experiment, 8, 3 * kHourMs), 0));
  REQUIRE(s.submit(make_request(2, RequestClass::experiment, 8, 3 * kHourMs), 0));
  auto actions = drain(s);
  auto l1 = granted(actions, 1);
  auto l2 = granted(actions, 2);
  REQUIRE(l1);
  REQUIRE(l2);
  // Request 2 checkpointed recently, request 1 never did.
  REQUIRE(s.checkpoint_ack(l2->lease, 50 * kMinuteMs));
  drain(s);
  const TimeMs t = kHourMs;
  REQUIRE(s.submit(make_request(3, RequestClass::presubmit, 1, 8 * kMinuteMs, t), t));
  auto notices = only<PreemptNotice>(drain(s));
  REQUIRE(notices.size() == 1);
  CHECK(notices[0].lease == l2->lease);
}

TEST_CASE("a request within its target waits instead of preempting") {
  SchedulerKnobs k = knobs_with_presubmit_target();
  Scheduler s{k};
  REQUIRE(s.upsert_node(make_node("n01", "a"), 0));
  REQUIRE(s.submit(make_request(1, RequestClass::experiment, 8, 20 * kMinuteMs), 0));
  drain(s);
  REQUIRE(s.submit(make_request(2, RequestClass::presubmit, 1, 8 * kMinuteMs, kMinuteMs), kMinuteMs));
  CHECK(only<PreemptNotice>(drain(s)).empty());
  auto why = s.explain(2, kMinuteMs);
  REQUIRE(why.expected_start_ms);
  CHECK(*why.expected_start_ms == 20 * kMinuteMs);
}

TEST_CASE("no preemption loops: the same demand never preempts the same request twice") {
  Scheduler s{knobs_with_grace(5 * kMinuteMs)};
  REQUIRE(s.upsert_node(make_node("n01", "a"), 0));
  REQUIRE(s.submit(make_request(1, RequestClass::experiment, 8, 4 * kHourMs), 0));
  auto exp_grant = granted(drain(s), 1);
  REQUIRE(exp_grant);
  const TimeMs t = 10 * kMinuteMs;
  Request demand = make_request(2, RequestClass::presubmit, 8, kHourMs, t);
  REQUIRE(s.submit(demand, t));
  REQUIRE(only<PreemptNotice>(drain(s)).size() == 1);
  REQUIRE(s.checkpoint_ack(exp_grant->lease, t + kMinuteMs));
  auto ci_grant = granted(drain(s), 2);
  REQUIRE(ci_grant);

  // The experiment restarts on a new node; the node running the demand is lost and its owner
  // resubmits the same demand.
  REQUIRE(s.upsert_node(make_node("n02", "a"), t + 2 * kMinuteMs));
  REQUIRE(granted(drain(s), 1));
  REQUIRE(s.set_node_state("n01", NodeState::lost, "power", "lab", t + 3 * kMinuteMs));
  REQUIRE(only<LeaseLost>(drain(s)).size() == 1);
  REQUIRE(s.submit(demand, t + 3 * kMinuteMs));
  s.on_tick(t + 30 * kMinuteMs);
  CHECK(only<PreemptNotice>(drain(s)).empty());
  CHECK(s.is_pending(2));
}

TEST_CASE("experiments never preempt, and CI never preempts CI") {
  Scheduler s{knobs_with_grace(5 * kMinuteMs)};
  REQUIRE(s.upsert_node(make_node("n01", "a"), 0));
  REQUIRE(s.submit(make_request(1, RequestClass::nightly, 8, 3 * kHourMs), 0));
  drain(s);
  REQUIRE(s.submit(make_request(2, RequestClass::presubmit, 1, 8 * kMinuteMs, 0), 0));
  s.on_tick(kHourMs);
  CHECK(only<PreemptNotice>(drain(s)).empty());

  Scheduler t{knobs_with_grace(5 * kMinuteMs)};
  REQUIRE(t.upsert_node(make_node("n01", "a"), 0));
  REQUIRE(t.submit(make_request(1, RequestClass::experiment, 8, 3 * kHourMs), 0));
  drain(t);
  Request exp = make_request(2, RequestClass::experiment, 8, kHourMs, 0);
  exp.target_start_latency_ms = 0;  // even with a target, experiments do not preempt
  REQUIRE(t.submit(exp, 0));
  t.on_tick(kHourMs);
  CHECK(only<PreemptNotice>(drain(t)).empty());
}

// Two nodes of revision a, each running one single-chip request (1 until 01:00, 2 until 00:30).
void run_two_short_requests(Scheduler& s) {
  REQUIRE(s.upsert_node(make_node("n01", "a"), 0));
  REQUIRE(s.upsert_node(make_node("n02", "a"), 0));
  REQUIRE(s.submit(make_request(1, RequestClass::experiment, 1, kHourMs), 0));
  REQUIRE(s.submit(make_request(2, RequestClass::experiment, 1, 30 * kMinuteMs), 0));
}

TEST_CASE("reservations hold nodes for a multi-node request and only shorter work backfills") {
  Scheduler s{SchedulerKnobs{}};
  run_two_short_requests(s);
  auto actions = drain(s);
  REQUIRE(granted(actions, 1));
  REQUIRE(granted(actions, 2));
  Request big = make_request(3, RequestClass::experiment, 0, 2 * kHourMs, kMinuteMs);
  big.nodes = 2;
  REQUIRE(s.submit(big, kMinuteMs));
  auto why = s.explain(3, kMinuteMs);
  REQUIRE(why.expected_start_ms);
  CHECK(*why.expected_start_ms == kHourMs);

  REQUIRE(s.submit(make_request(4, RequestClass::experiment, 4, 20 * kMinuteMs, 2 * kMinuteMs),
                   2 * kMinuteMs));
  CHECK(granted(drain(s), 4));  // ends before 01:00: backfills
  REQUIRE(s.submit(make_request(5, RequestClass::experiment, 4, 2 * kHourMs, 3 * kMinuteMs),
                   3 * kMinuteMs));
  CHECK(!granted(drain(s), 5));  // would delay the reservation
  std::string text = s.explain(5, 3 * kMinuteMs).text();
  CHECK(text.find("reservation for request 3 holds n01,n02 from 01:00") != std::string::npos);
}

TEST_CASE("explanations name a request by the name its owner gave it, not by its id") {
  Scheduler s{SchedulerKnobs{}};
  run_two_short_requests(s);
  drain(s);
  Request big = make_request(7, RequestClass::experiment, 0, 2 * kHourMs, kMinuteMs);
  big.nodes = 2;
  big.name = "job 12";
  REQUIRE(s.submit(big, kMinuteMs));
  REQUIRE(s.submit(make_request(8, RequestClass::experiment, 4, 2 * kHourMs, 3 * kMinuteMs), 3 * kMinuteMs));
  const std::string text = s.explain(8, 3 * kMinuteMs).text();
  CHECK(text.find("reservation for job 12 holds n01,n02 from 01:00") != std::string::npos);
  CHECK(text.find("request 7") == std::string::npos);
}

TEST_CASE("a multi-node request is not starved by a stream of small ones") {
  Scheduler s{SchedulerKnobs{}};
  REQUIRE(s.upsert_node(make_node("n01", "a"), 0));
  REQUIRE(s.upsert_node(make_node("n02", "a"), 0));
  std::map<LeaseId, TimeMs> ends;
  RequestId next = 100;
  bool big_started = false;
  TimeMs big_start = 0;
  for (TimeMs now = 0; now <= 6 * kHourMs && !big_started; now += 5 * kMinuteMs) {
    for (auto it = ends.begin(); it != ends.end();) {
      if (it->second <= now) {
        REQUIRE(s.release(it->first, now));
        it = ends.erase(it);
      } else {
        ++it;
      }
    }
    // Two one-chip requests of 40 minutes every 5 minutes keep both nodes partly busy forever.
    for (int i = 0; i < 2; ++i) {
      REQUIRE(s.submit(make_request(next++, RequestClass::experiment, 1, 40 * kMinuteMs, now), now));
    }
    if (now == 10 * kMinuteMs) {
      Request big = make_request(1, RequestClass::experiment, 0, kHourMs, now);
      big.nodes = 2;
      REQUIRE(s.submit(big, now));
    }
    for (const Action& a : drain(s)) {
      if (const auto* g = std::get_if<LeaseGranted>(&a)) {
        if (g->request == 1) {
          big_started = true;
          big_start = now;
        }
        ends[g->lease] = now + 40 * kMinuteMs;
      }
    }
    REQUIRE(s.check_invariants());
  }
  REQUIRE(big_started);
  CHECK(big_start <= 10 * kMinuteMs + 45 * kMinuteMs);
}

TEST_CASE("a release reserves whole nodes for its window ahead of time and starts on time") {
  Scheduler s{SchedulerKnobs{}};
  REQUIRE(s.upsert_node(make_node("n01", "a"), 0));
  REQUIRE(s.upsert_node(make_node("n02", "a"), 0));
  Request release = make_request(1, RequestClass::release, 0, 8 * kHourMs, 0);
  release.nodes = 1;
  release.not_before_ms = 14 * kHourMs;
  REQUIRE(s.submit(release, 0));
  CHECK(!granted(drain(s), 1));
  CHECK(s.next_deadline() == 14 * kHourMs);
  REQUIRE(s.submit(make_request(2, RequestClass::experiment, 8, 20 * kHourMs, 9 * kHourMs),
                   9 * kHourMs));
  REQUIRE(s.submit(make_request(3, RequestClass::experiment, 8, 20 * kHourMs, 9 * kHourMs),
                   9 * kHourMs));
  REQUIRE(s.submit(make_request(4, RequestClass::experiment, 8, 2 * kHourMs, 9 * kHourMs),
                   9 * kHourMs));
  auto actions = drain(s);
  CHECK(granted(actions, 2));
  CHECK(!granted(actions, 3));
  auto short_one = granted(actions, 4);
  REQUIRE(short_one);
  REQUIRE(s.release(short_one->lease, 11 * kHourMs));
  CHECK(!granted(drain(s), 3));  // still would run into the window
  s.on_tick(14 * kHourMs);
  CHECK(granted(drain(s), 1));
}

TEST_CASE("quarantine blocks new leases and keeps reason and owner") {
  Scheduler s{SchedulerKnobs{}};
  REQUIRE(s.upsert_node(make_node("n01", "b"), 0));
  REQUIRE(s.set_node_state("n01", NodeState::quarantined, "ecc errors on chip 3", "lab:alice", 0));
  REQUIRE(s.submit(make_request(1, RequestClass::presubmit, 1, 8 * kMinuteMs), 0));
  CHECK(!granted(drain(s), 1));
  auto nodes = s.nodes();
  REQUIRE(nodes.size() == 1);
  CHECK(nodes[0].state == NodeState::quarantined);
  CHECK(nodes[0].reason == "ecc errors on chip 3");
  CHECK(nodes[0].owner == "lab:alice");
  CHECK(s.explain(1, 0).text().find("no node of any revision is up (1 quarantined") !=
        std::string::npos);
  REQUIRE(s.set_node_state("n01", NodeState::up, "diagnostics passed", "lab:alice", kHourMs));
  CHECK(granted(drain(s), 1));
  CHECK(!s.set_node_state("n99", NodeState::up, "", "", 0));
}

TEST_CASE("losing a node ends its leases with LeaseLost and frees nothing twice") {
  Scheduler s{SchedulerKnobs{}};
  REQUIRE(s.upsert_node(make_node("n01", "a"), 0));
  Request big = make_request(1, RequestClass::experiment, 8, kHourMs);
  REQUIRE(s.submit(big, 0));
  auto g = granted(drain(s), 1);
  REQUIRE(g);
  REQUIRE(s.set_node_state("n01", NodeState::lost, "heartbeat timeout", "ops", kMinuteMs));
  auto lost = only<LeaseLost>(drain(s));
  REQUIRE(lost.size() == 1);
  CHECK(lost[0].lease == g->lease);
  CHECK(lost[0].node == "n01");
  CHECK(s.leases().empty());
  CHECK(!s.release(g->lease, 2 * kMinuteMs));
  CHECK(s.check_invariants());
}

TEST_CASE("leases expire at expected duration times the slack, or at the explicit length") {
  SchedulerKnobs k;
  k.lease_slack = 1.5;
  Scheduler s{k};
  REQUIRE(s.upsert_node(make_node("n01", "a"), 0));
  REQUIRE(s.submit(make_request(1, RequestClass::presubmit, 1, kHourMs), 0));
  Request dev = make_request(2, RequestClass::experiment, 2, kHourMs);
  dev.lease_ms = 2 * kHourMs;
  REQUIRE(s.submit(dev, 0));
  auto actions = drain(s);
  REQUIRE(granted(actions, 1));
  REQUIRE(granted(actions, 2));
  CHECK(granted(actions, 1)->expires_at_ms == 90 * kMinuteMs);
  CHECK(granted(actions, 2)->expires_at_ms == 2 * kHourMs);
  CHECK(s.next_deadline() == 90 * kMinuteMs);
  s.on_tick(90 * kMinuteMs);
  auto expired = only<LeaseExpired>(drain(s));
  REQUIRE(expired.size() == 1);
  CHECK(expired[0].request == 1);
}

TEST_CASE("explain names missing free chips and the queue ahead") {
  Scheduler s{SchedulerKnobs{}};
  REQUIRE(s.upsert_node(make_node("n01", "b"), 0));
  REQUIRE(s.submit(make_request(1, RequestClass::nightly, 4, kHourMs), 0));
  REQUIRE(s.submit(make_request(2, RequestClass::nightly, 1, kHourMs), 0));
  drain(s);
  Request r = make_request(3, RequestClass::experiment, 8, kHourMs);
  r.revision = "b";
  REQUIRE(s.submit(r, 0));
  Explanation why = s.explain(3, 0);
  CHECK(why.pending);
  CHECK(why.text().find("no node of revision b has 8 free chips (most free: 3 on n01)") !=
        std::string::npos);
  REQUIRE(why.expected_start_ms);
  CHECK(*why.expected_start_ms == kHourMs);
  CHECK(why.text().find("expected to start at 01:00") != std::string::npos);
  CHECK(!s.explain(1, 0).pending);
}

TEST_CASE("explain counts the requests ahead in a long queue, as it changes in the middle") {
  SchedulerKnobs knobs;
  knobs.max_pending_requests = 5000;
  Scheduler s{knobs};
  REQUIRE(s.upsert_node(make_node("n01", "b"), 0));
  REQUIRE(s.submit(make_request(1, RequestClass::nightly, 8, 10 * kHourMs), 0));
  drain(s);
  // Classes and ages mixed, so that each request sorts somewhere in the middle of those before it.
  const RequestClass classes[] = {RequestClass::experiment, RequestClass::nightly, RequestClass::presubmit};
  const TimeMs now = 10'000;
  for (RequestId id = 2; id < 2002; ++id) {
    REQUIRE(s.submit(make_request(id, classes[id % 3], 8, kHourMs, static_cast<TimeMs>(id * 7919 % 9973)), now));
  }
  for (RequestId id = 2; id < 2002; id += 4) REQUIRE(s.cancel(id, now));
  drain(s);
  REQUIRE(s.check_invariants());
  const std::vector<RequestId> order = s.pending();
  REQUIRE(order.size() == 1500);
  const auto said_ahead = [](const Explanation& why) -> std::size_t {
    const std::string text = why.text();
    const auto at = text.find(" requests of higher priority or older are ahead of it");
    if (at == std::string::npos) return 0;
    const auto from = text.find_last_of(' ', at - 1) + 1;
    return std::stoul(text.substr(from, at - from));
  };
  for (std::size_t rank : {std::size_t{0}, std::size_t{1}, std::size_t{511}, std::size_t{512}, std::size_t{700},
                           std::size_t{1024}, std::size_t{1499}}) {
    CHECK(said_ahead(s.explain(order[rank], now)) == rank);
  }
  const std::vector<Explanation> queue = s.explain_queue(now);
  REQUIRE(queue.size() == order.size());
  for (std::size_t rank = 0; rank < queue.size(); rank += 97) CHECK(said_ahead(queue[rank]) == rank);
}

TEST_CASE("baseline policies: fifo blocks behind its head, strict priority skips ahead") {
  for (Policy policy : {Policy::fifo, Policy::strict_priority}) {
    SchedulerKnobs k;
    k.policy = policy;
    Scheduler s{k};
    REQUIRE(s.upsert_node(make_node("n01", "a"), 0));
    REQUIRE(s.submit(make_request(1, RequestClass::experiment, 4, kHourMs), 0));
    drain(s);
    REQUIRE(s.submit(make_request(2, RequestClass::experiment, 8, kHourMs, 1), 1));
    REQUIRE(s.submit(make_request(3, RequestClass::presubmit, 1, kMinuteMs, 2), 2));
    auto actions = drain(s);
    CHECK(only<PreemptNotice>(actions).empty());
    CHECK(granted(actions, 3).has_value() == (policy == Policy::strict_priority));
  }
}

TEST_CASE("before its target a request preempts only a victim that loses nothing") {
  SchedulerKnobs k = knobs_with_presubmit_target();
  Scheduler s{k};
  REQUIRE(s.upsert_node(make_node("n01", "a"), 0));
  Request exp = make_request(1, RequestClass::experiment, 8, 3 * kHourMs);
  exp.checkpoint_interval_ms = 15 * kMinuteMs;
  REQUIRE(s.submit(exp, 0));
  auto grant = granted(drain(s), 1);
  REQUIRE(grant);
  // At 00:20 the next checkpoint (00:30) is outside a 5-minute grace: wait.
  REQUIRE(s.submit(make_request(2, RequestClass::presubmit, 1, 8 * kMinuteMs, 20 * kMinuteMs),
                   20 * kMinuteMs));
  CHECK(only<PreemptNotice>(drain(s)).empty());
  // From 00:25 it falls inside the grace: the notice costs nothing, so it goes out then.
  REQUIRE(s.next_deadline() == 25 * kMinuteMs);
  s.on_tick(25 * kMinuteMs);
  auto notices = only<PreemptNotice>(drain(s));
  REQUIRE(notices.size() == 1);
  CHECK(notices[0].lease == grant->lease);
}

TEST_CASE("a presubmit left unread behind another's reservation still preempts when it becomes due") {
  SchedulerKnobs k = knobs_with_presubmit_target();
  k.max_reservations = 1;
  Scheduler s{k};
  REQUIRE(s.upsert_node(make_node("n01", "a"), 0));
  REQUIRE(s.submit(make_request(1, RequestClass::experiment, 8, 3 * kHourMs), 0));
  const auto grant = granted(drain(s), 1);
  REQUIRE(grant);
  // The first presubmit, with a target two hours out, holds the one reservation; the second,
  // with no chips free and no reservation left, is not read by the passes until it is due.
  Request patient = make_request(2, RequestClass::presubmit, 8, 10 * kMinuteMs);
  patient.target_start_latency_ms = 2 * kHourMs;
  REQUIRE(s.submit(patient, 0));
  REQUIRE(s.submit(make_request(3, RequestClass::presubmit, 8, 10 * kMinuteMs, kMinuteMs), kMinuteMs));
  CHECK(only<PreemptNotice>(drain(s)).empty());
  CHECK(s.check_invariants());
  // Its target is 00:31: with a 5-minute grace it is due at 00:26, and preempts then.
  CHECK(s.next_deadline() == 26 * kMinuteMs);
  s.on_tick(26 * kMinuteMs);
  auto notices = only<PreemptNotice>(drain(s));
  REQUIRE(notices.size() == 1);
  CHECK(notices[0].lease == grant->lease);
  CHECK(notices[0].preempted_for == 3);
  CHECK(s.check_invariants());
}

TEST_CASE("a presubmit found due and then asked about with the clock set back waits for its target again") {
  SchedulerKnobs k = knobs_with_presubmit_target();
  Scheduler s{k};
  REQUIRE(s.upsert_node(make_node("n01", "a"), 0));
  REQUIRE(s.submit(make_request(1, RequestClass::experiment, 8, 28 * kMinuteMs), 0));
  REQUIRE(granted(drain(s), 1));
  // Due from 00:25, but the experiment ends at 00:28, before the target: no preemption.
  REQUIRE(s.submit(make_request(2, RequestClass::presubmit, 8, 10 * kMinuteMs), 0));
  for (TimeMs at : {26 * kMinuteMs, 10 * kMinuteMs, 20 * kMinuteMs, 26 * kMinuteMs}) {
    s.on_tick(at);
    CHECK(only<PreemptNotice>(drain(s)).empty());
    CHECK(s.check_invariants());
  }
}

TEST_CASE("the queue's explanations come in scheduling order, and an expected start counts preemption") {
  SchedulerKnobs k = knobs_with_grace(5 * kMinuteMs);
  k.target_start_latency_ms[rank(RequestClass::presubmit)] = kHourMs;
  Scheduler s{k};
  REQUIRE(s.upsert_node(make_node("n01", "a"), 0));
  REQUIRE(s.submit(make_request(1, RequestClass::experiment, 8, 4 * kHourMs), 0));
  REQUIRE(granted(drain(s), 1));
  const TimeMs t = 10 * kMinuteMs;
  REQUIRE(s.submit(make_request(2, RequestClass::experiment, 8, kHourMs, t), t));
  REQUIRE(s.submit(make_request(3, RequestClass::presubmit, 8, 10 * kMinuteMs, t), t));
  CHECK(only<PreemptNotice>(drain(s)).empty());  // its target is an hour away: no preemption yet

  const std::vector<Explanation> queue = s.explain_queue(t);
  REQUIRE(queue.size() == 2);
  CHECK(queue[0].request == 3);  // presubmit before the older experiment
  CHECK(queue[1].request == 2);
  // Presubmit preempts the experiment at its target at the latest, not when its 4 h lease ends.
  REQUIRE(queue[0].expected_start_ms.has_value());
  CHECK(*queue[0].expected_start_ms == t + kHourMs);
  // The same as explaining each request alone.
  for (const Explanation& e : queue) {
    const Explanation alone = s.explain(e.request, t);
    CHECK(alone.reasons == e.reasons);
    CHECK(alone.expected_start_ms == e.expected_start_ms);
  }
  // The head of the queue alone: its first requests, explained as in the whole queue's.
  const std::vector<Explanation> head = s.explain_queue(t, 1);
  REQUIRE(head.size() == 1);
  CHECK(head[0].request == 3);
  CHECK(head[0].reasons == queue[0].reasons);
  CHECK(head[0].expected_start_ms == queue[0].expected_start_ms);
  CHECK(s.explain_queue(t, 5).size() == 2);
}

// The indexes let a step skip work: a submission that can change nothing is queued without a
// pass, a pass reads a shape of plain requests only while one could take chips or a
// reservation, an empty queue is not planned, and a reservation reads nodes by their chips' ends.
// Over random days, under every policy, each step decides and explains exactly what a scheduler
// reading every request and node at every step does.
TEST_CASE("the shortcuts decide exactly what reading every request at every step decides") {
  auto describe = [](const Action& a) {
    return std::visit(
        [](const auto& act) -> std::string {
          using T = std::decay_t<decltype(act)>;
          if constexpr (std::is_same_v<T, LeaseGranted>) {
            std::string out = fmt::format("grant {} lease {}", act.request, act.lease);
            for (const Placement& p : act.placement) out += fmt::format(" {}:{}", p.node, fmt::join(p.chips, ","));
            return out;
          } else if constexpr (std::is_same_v<T, PreemptNotice>) {
            return fmt::format("notice lease {} for {}", act.lease, act.preempted_for);
          } else {
            return fmt::format("{} request {}", typeid(T).name(), act.request);
          }
        },
        a);
  };
  for (Policy policy : {Policy::kiln, Policy::fifo, Policy::strict_priority}) {
    // More days under kiln's policy, the only one that reserves, preempts and claims.
    for (std::uint32_t seed = 1; seed <= (policy == Policy::kiln ? 20u : 12u); ++seed) {
      CAPTURE(seed);
      CAPTURE(to_string(policy));
      SchedulerKnobs knobs;
      knobs.policy = policy;
      knobs.max_reservations = 2;
      // Quotas on some days: a class's victims then depend on what it holds already.
      if (seed % 3 == 0) {
        knobs.quota_chips[{RequestClass::presubmit, "a"}] = 24;
        knobs.quota_chips[{RequestClass::bisect, "a"}] = 8;
        knobs.may_borrow[static_cast<std::size_t>(RequestClass::bisect)] = false;
      }
      Scheduler fast(knobs);
      knobs.exhaustive_passes = true;
      Scheduler reference(knobs);
      std::uint64_t state = seed * 0x9E3779B97F4A7C15ULL;
      auto next = [&](std::uint64_t bound) {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        return state % bound;
      };
      TimeMs now = 0;
      RequestId next_id = 1;
      std::vector<LeaseId> live;
      // Larger fleets too: a pass places a one-node request by reading nodes in the order of
      // their free chips and stops early, which a handful of nodes barely exercises.
      const int fleet = seed <= 6 ? 5 : 40;
      for (int step = 0; step < 500; ++step) {
        CAPTURE(step);
        // Several inputs at one moment, as a busy coordinator sees them within a millisecond.
        if (next(3) == 0) now += static_cast<TimeMs>(next(3) * kMinuteMs);
        const auto roll = next(12);
        std::function<void(Scheduler&)> input;
        if (step < fleet) {
          input = [&, n = step](Scheduler& s) {
            // Some nodes of 4 chips in the larger fleets, and some whose chips share one NUMA node:
            // a revision's nodes need not be alike, and no bound on placement may assume they are.
            NodeInfo node = make_node(fmt::format("n{}", n), n < fleet * 3 / 5 ? "a" : "b",
                                      fleet > 5 && n % 7 == 3 ? 4 : 8);
            if (fleet > 5 && n % 11 == 6) {
              for (auto& chip : node.chips) chip.numa_node = 0;
            }
            (void)s.upsert_node(node, now);
          };
        } else if (roll < 7) {
          Request q = make_request(next_id++, static_cast<RequestClass>(next(kClassCount)), 1 << next(4),
                                   static_cast<DurationMs>((1 + next(60)) * kMinuteMs), now);
          if (next(6) == 0) q.node = fmt::format("n{}", next(fleet));
          if (next(5) == 0) q.revision = next(2) == 0 ? "a" : "b";
          if (next(8) == 0) {
            q.nodes = 1 + static_cast<int>(next(2));
            q.node.reset();
          }
          if (next(10) == 0) q.not_before_ms = now + static_cast<TimeMs>(next(30) * kMinuteMs);
          // Experiments that checkpoint: a notice inside the grace before a checkpoint loses
          // nothing, so a demand may preempt them before it is due.
          if (q.cls == RequestClass::experiment && next(2) == 0) {
            q.checkpoint_interval_ms = static_cast<DurationMs>((1 + next(4)) * 5 * kMinuteMs);
          }
          // Sometimes a burst of like requests (a pipeline's jobs): one shape, one class, their work
          // left unlike, which a pass searches for once until its plan changes.
          std::vector<Request> burst{q};
          if (next(4) == 0) {
            for (std::uint64_t k = 1 + next(5); k > 0; --k) {
              Request like = q;
              like.id = next_id++;
              like.expected_duration_ms = static_cast<DurationMs>((1 + next(60)) * kMinuteMs);
              burst.push_back(like);
            }
          }
          input = [burst, &now](Scheduler& s) {
            for (const Request& like : burst) (void)s.submit(like, now);
          };
          if (q.cls == RequestClass::experiment && next(6) == 0) {
            // An experiment that ran before a restart, restored with the start it recorded: before
            // now, or after it if the clock went back meanwhile.
            const TimeMs start = now + (static_cast<TimeMs>(next(21)) - 10) * kMinuteMs;
            const Placement where{fmt::format("n{}", next(fleet)), {static_cast<int>(next(4))}};
            input = [q, where, start, &now](Scheduler& s) { (void)s.restore_lease(q, {where}, start, now); };
          }
        } else if (roll < 9 && !live.empty()) {
          const LeaseId lease = live[next(live.size())];
          if (next(3) == 0) {
            input = [lease, &now](Scheduler& s) { (void)s.checkpoint_ack(lease, now); };
          } else {
            input = [lease, &now](Scheduler& s) { (void)s.release(lease, now); };
          }
        } else if (roll == 9 && next_id > 1) {
          const RequestId request = 1 + next(next_id - 1);
          input = [request, &now](Scheduler& s) { (void)s.cancel(request, now); };
        } else if (roll == 10) {
          const auto node = fmt::format("n{}", next(fleet));
          const NodeState to = next(3) == 0 ? NodeState::draining : NodeState::up;
          input = [node, to, &now](Scheduler& s) { (void)s.set_node_state(node, to, "test", "", now); };
        } else {
          input = [&now](Scheduler& s) { s.on_tick(now); };
        }
        std::vector<std::string> decided[2];
        Scheduler* both[2] = {&fast, &reference};
        for (int k = 0; k < 2; ++k) {
          // As the shell does: a deadline that passed is ticked before the next input.
          if (auto deadline = both[k]->next_deadline(); deadline && *deadline <= now) both[k]->on_tick(now);
          input(*both[k]);
          while (auto a = both[k]->poll_action()) decided[k].push_back(describe(*a));
        }
        INFO("with the shortcuts: ", fmt::format("{}", fmt::join(decided[0], "; ")));
        INFO("reading every request: ", fmt::format("{}", fmt::join(decided[1], "; ")));
        REQUIRE(decided[0] == decided[1]);
        REQUIRE(fast.next_deadline() == reference.next_deadline());
        {
          const auto checked = fast.check_invariants();
          INFO("invariants: ", checked ? std::string("held") : checked.error().message);
          REQUIRE(checked);
        }
        // Every request's reservation, found through the nodes filed by their chips' ends, is the
        // one reading every node finds.
        std::vector<std::string> explained[2];
        for (int k = 0; k < 2; ++k) {
          for (const Explanation& e : both[k]->explain_queue(now)) explained[k].push_back(fmt::format("{} ({})", e.text(), e.expected_start_ms.value_or(-1)));
        }
        INFO("explained with the shortcuts: ", fmt::format("{}", fmt::join(explained[0], " | ")));
        INFO("explained reading every node: ", fmt::format("{}", fmt::join(explained[1], " | ")));
        REQUIRE(explained[0] == explained[1]);
        // One request explained alone is explained as in the whole queue's explanations, and the
        // queue's head (a page of `kiln queue`) as in the whole queue's.
        if (step % 25 == 0) {
          std::size_t k = 0;
          for (const Explanation& e : fast.explain_queue(now)) {
            const Explanation alone = fast.explain(e.request, now);
            REQUIRE(fmt::format("{} ({})", alone.text(), alone.expected_start_ms.value_or(-1)) == explained[0][k++]);
          }
          const std::size_t head = explained[0].size() / 2 + 1;
          std::vector<std::string> explained_head;
          for (const Explanation& e : fast.explain_queue(now, head)) {
            explained_head.push_back(fmt::format("{} ({})", e.text(), e.expected_start_ms.value_or(-1)));
          }
          REQUIRE(explained_head.size() == std::min(head, explained[0].size()));
          REQUIRE(std::equal(explained_head.begin(), explained_head.end(), explained[0].begin()));
        }
        live.clear();
        for (const LeaseView& l : fast.leases()) live.push_back(l.lease);
      }
    }
  }
}

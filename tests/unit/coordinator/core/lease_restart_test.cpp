// Developer leases survive a coordinator restart: the core is rebuilt from the records it asked
// the store to save (SaveNode, SaveJob, SaveLease), as the shell does at start-up.
#include <doctest/doctest.h>

#include <algorithm>
#include <set>

#include "coordinator/core/coordinator_core.h"
#include "tests/support/core_harness.h"

using namespace kiln;
using namespace kiln::coordinator;
using namespace kiln::protocol;
using namespace kiln::coordinator::testing;

namespace {

constexpr TimeMs kRestartMs = 100000;

CoordinatorKnobs knobs() {
  CoordinatorKnobs k;
  k.heartbeat_interval_ms = 1000;
  k.liveness_missed_beats = 10;
  k.restart_grace_ms = 10000;  // a node has 10 s to register after the restart
  return k;
}

LeaseSummary lease_of(const Harness& h, std::uint64_t id) {
  for (const auto& l : h.core.leases()) {
    if (l.lease_id == id) return l;
  }
  FAIL("lease L" << id << " is unknown to the coordinator");
  return {};
}

std::set<std::uint32_t> chips_of(const LeaseSummary& lease) {
  std::set<std::uint32_t> chips;
  for (const auto& p : lease.placement) chips.insert(p.chip_indices.begin(), p.chip_indices.end());
  return chips;
}

}  // namespace

TEST_CASE("a pending lease request survives a restart, keeps its age and is granted later; ids are not reused") {
  Snapshot store;
  {
    Harness h(knobs());
    h.agent("p1", "n01", hello("n01", "a"), 0);
    REQUIRE(std::holds_alternative<LeaseGranted>(h.client("alice", Role::developer, lease_request(8), 10)));
    REQUIRE(std::holds_alternative<LeasePending>(h.client("bob", Role::developer, lease_request(8), 20)));
    // Saved before the reply that acknowledged it.
    REQUIRE(h.stored_leases.count(2) == 1);
    CHECK(h.stored_leases.at(2).summary.state == LeaseState::pending);
    store = h.store();
  }
  Harness h(knobs(), store, kRestartMs);
  CHECK(lease_of(h, 1).state == LeaseState::granted);
  CHECK(lease_of(h, 2).state == LeaseState::pending);
  CHECK(lease_of(h, 2).requested_at_ms == 20);
  h.agent("p9", "n01", hello("n01", "a"), kRestartMs + 500);
  CHECK(lease_of(h, 2).state == LeaseState::pending);  // L1 holds the whole node again
  CHECK(std::holds_alternative<Ok>(h.client("alice", Role::developer, ReleaseLease{1}, kRestartMs + 1000)));
  const LeaseSummary granted = lease_of(h, 2);
  CHECK(granted.state == LeaseState::granted);
  CHECK(chips_of(granted).size() == 8);
  CHECK(granted.requested_at_ms == 20);
  CHECK(h.stored_leases.at(2).summary.state == LeaseState::granted);
  CHECK(h.stored_leases.at(1).summary.state == LeaseState::ended);
  // A new lease gets a new id, after the recovered ones.
  Body third = h.client("carol", Role::developer, lease_request(1), kRestartMs + 2000);
  REQUIRE(std::holds_alternative<LeasePending>(third));
  CHECK(std::get<LeasePending>(third).lease.lease_id == 3);
}

TEST_CASE("a granted lease keeps its chips and its expiry across a restart") {
  Snapshot store;
  LeaseSummary before;
  {
    Harness h(knobs());
    h.agent("p1", "n01", hello("n01", "a"), 0);
    Body reply = h.client("alice", Role::developer, lease_request(4, "", 3600000), 10);
    REQUIRE(std::holds_alternative<LeaseGranted>(reply));
    before = std::get<LeaseGranted>(reply).lease;
    store = h.store();
  }
  Harness h(knobs(), store, kRestartMs);
  LeaseSummary after = lease_of(h, before.lease_id);
  CHECK(after.state == LeaseState::granted);
  CHECK(chips_of(after) == chips_of(before));
  CHECK(after.expires_at_ms == before.expires_at_ms);
  // Before and after its node registers again, nobody else gets those chips.
  Body early = h.client("bob", Role::developer, lease_request(4), kRestartMs + 100);
  REQUIRE(std::holds_alternative<LeasePending>(early));
  h.agent("p9", "n01", hello("n01", "a"), kRestartMs + 500);
  const LeaseSummary bob = lease_of(h, 2);
  REQUIRE(bob.state == LeaseState::granted);
  for (std::uint32_t chip : chips_of(bob)) CHECK(chips_of(before).count(chip) == 0);
  Body carol = h.client("carol", Role::developer, lease_request(4), kRestartMs + 600);
  REQUIRE(std::holds_alternative<LeasePending>(carol));
  // Alice's lease ends at its original expiry, then Carol gets the chips.
  for (TimeMs t = kRestartMs + 1000; t < static_cast<TimeMs>(before.expires_at_ms); t += 5 * kMinuteMs) {
    h.agent("p9", "n01", Heartbeat{}, t);
    h.tick(t);
  }
  CHECK(lease_of(h, before.lease_id).state == LeaseState::granted);
  h.agent("p9", "n01", Heartbeat{}, static_cast<TimeMs>(before.expires_at_ms));
  h.tick(static_cast<TimeMs>(before.expires_at_ms));
  CHECK(lease_of(h, before.lease_id).state == LeaseState::ended);
  CHECK(lease_of(h, 3).state == LeaseState::granted);
  CHECK(chips_of(lease_of(h, 3)) == chips_of(before));
}

TEST_CASE("jobs inside a lease survive a restart: the running one keeps running, the waiting one starts after it") {
  Snapshot store;
  std::uint64_t running = 0;
  std::uint64_t waiting = 0;
  {
    Harness h(knobs());
    h.agent("p1", "n01", hello("n01", "a"), 0);
    REQUIRE(std::holds_alternative<LeaseGranted>(h.client("alice", Role::developer, lease_request(8), 10)));
    running = std::get<JobAccepted>(h.client("alice", Role::developer, SubmitInLease{1, sleep_job(8)}, 20)).job_id;
    h.agent("p1", "n01", JobStarted{running, 1}, 30);
    waiting = std::get<JobAccepted>(h.client("alice", Role::developer, SubmitInLease{1, sleep_job(4)}, 40)).job_id;
    REQUIRE(h.job(running).summary.state == JobState::running);
    REQUIRE(h.job(waiting).summary.state == JobState::queued);
    store = h.store();
  }
  Harness h(knobs(), store, kRestartMs);
  CHECK(h.job(running).lease_id == 1);
  CHECK(h.job(waiting).summary.state == JobState::queued);
  h.agent("p9", "n01", hello("n01", "a", {running}), kRestartMs + 500);
  CHECK(h.job(running).summary.state == JobState::running);
  CHECK(h.agent_bodies<JobCancel>("p9").empty());
  CHECK(h.agent_bodies<Welcome>("p9").at(0).cancel_jobs.empty());
  JobFinished fin;
  fin.job_id = running;
  fin.attempt = 1;
  fin.outcome = JobOutcome::succeeded;
  h.agent("p9", "n01", fin, kRestartMs + 1000);
  CHECK(h.job(running).summary.state == JobState::succeeded);
  auto starts = h.agent_bodies<JobStart>("p9");
  REQUIRE(starts.size() == 1);
  CHECK(starts[0].job_id == waiting);
  CHECK(lease_of(h, 1).state == LeaseState::granted);
}

TEST_CASE("a granted lease whose node does not return within the restart grace is queued again") {
  Snapshot store;
  {
    Harness h(knobs());
    h.agent("p1", "n01", hello("n01", "a"), 0);
    h.agent("p2", "n02", hello("n02", "a"), 0);
    Body reply = h.client("alice", Role::developer, lease_request(8), 10);
    REQUIRE(std::holds_alternative<LeaseGranted>(reply));
    REQUIRE(std::get<LeaseGranted>(reply).lease.placement.at(0).node_id == "n01");
    // n02 is busy with Bob's lease.
    REQUIRE(std::holds_alternative<LeaseGranted>(h.client("bob", Role::developer, lease_request(8), 20)));
    store = h.store();
  }
  Harness h(knobs(), store, kRestartMs);
  // Only n02 comes back; Bob releases his lease.
  h.agent("p2", "n02", hello("n02", "a"), kRestartMs + 500);
  CHECK(std::holds_alternative<Ok>(h.client("bob", Role::developer, ReleaseLease{2}, kRestartMs + 600)));
  CHECK(lease_of(h, 1).state == LeaseState::granted);  // n01 still has time to register
  const TimeMs lost_at = kRestartMs + knobs().restart_grace_ms + 1;
  h.agent("p2", "n02", Heartbeat{}, lost_at);
  h.tick(lost_at);
  CHECK(h.core.nodes().at("n01").summary.state == NodeState::lost);
  const LeaseSummary again = lease_of(h, 1);
  // Queued again keeping its age, and granted at once on the node that came back.
  CHECK(again.state == LeaseState::granted);
  CHECK(again.placement.at(0).node_id == "n02");
  CHECK(again.requested_at_ms == 10);
  Body watch = h.client("alice", Role::developer, WatchLease{1, 0, 0}, lost_at + 1);
  REQUIRE(std::holds_alternative<LeaseEvent>(watch));
  CHECK(std::get<LeaseEvent>(watch).kind == LeaseEventKind::requeued);
  CHECK(std::get<LeaseEvent>(watch).message.find("n01 was lost") != std::string::npos);
  // Event numbers continue after those the developer saw before the restart.
  CHECK(std::get<LeaseEvent>(watch).seq == 2);
}

TEST_CASE("a lease that expired while the coordinator was down ends at the restart") {
  Snapshot store;
  {
    Harness h(knobs());
    h.agent("p1", "n01", hello("n01", "a"), 0);
    REQUIRE(std::holds_alternative<LeaseGranted>(h.client("alice", Role::developer, lease_request(8, "", 60000), 10)));
    store = h.store();
  }
  Harness h(knobs(), store, kRestartMs);
  CHECK(lease_of(h, 1).state == LeaseState::ended);
  CHECK(lease_of(h, 1).detail.find("expired") != std::string::npos);
  CHECK(h.stored_leases.at(1).summary.state == LeaseState::ended);
  h.agent("p9", "n01", hello("n01", "a"), kRestartMs + 500);
  CHECK(std::holds_alternative<LeaseGranted>(h.client("bob", Role::developer, lease_request(8), kRestartMs + 600)));
}

TEST_CASE("a lease under preemption notice keeps its grace deadline across a restart and is revoked at it") {
  CoordinatorKnobs k = knobs();
  k.liveness_missed_beats = 1000;  // the node stays alive through the grace without heartbeats
  k.scheduler.grace_ms = 60000;
  k.scheduler.target_start_latency_ms[scheduler::rank(scheduler::RequestClass::presubmit)] = 0;
  Snapshot store;
  std::uint64_t ci_job = 0;
  TimeMs deadline = 0;
  {
    Harness h(k);
    h.agent("p1", "n01", hello("n01", "a"), 0);
    REQUIRE(std::holds_alternative<LeaseGranted>(h.client("alice", Role::developer, lease_request(8), 10)));
    SubmitJob presubmit = sleep_job(8);
    presubmit.priority_class = PriorityClass::presubmit;
    ci_job = h.submit("ci", Role::ci, presubmit, 20);
    REQUIRE(lease_of(h, 1).state == LeaseState::preempting);
    deadline = static_cast<TimeMs>(lease_of(h, 1).grace_deadline_ms);
    REQUIRE(deadline == 20 + 60000);
    store = h.store();
  }
  const TimeMs restart = 30000;
  Harness h(k, store, restart);
  h.agent("p9", "n01", hello("n01", "a"), restart + 500);
  CHECK(lease_of(h, 1).state == LeaseState::preempting);
  CHECK(static_cast<TimeMs>(lease_of(h, 1).grace_deadline_ms) == deadline);  // not extended by the restart
  CHECK(h.job(ci_job).summary.state == JobState::queued);
  CHECK(h.core.next_deadline().value_or(deadline + 1) <= deadline);
  h.tick(deadline - 1);
  CHECK(lease_of(h, 1).state == LeaseState::preempting);
  h.tick(deadline);
  CHECK(lease_of(h, 1).state == LeaseState::pending);
  CHECK(lease_of(h, 1).requested_at_ms == 10);
  CHECK(h.job(ci_job).summary.state == JobState::assigned);
}

TEST_CASE("a watcher that missed an event before a restart is told at once, and events keep their numbers") {
  Snapshot store;
  std::uint64_t seen = 0;
  {
    Harness h(knobs());
    h.agent("p1", "n01", hello("n01", "a"), 0);
    REQUIRE(std::holds_alternative<LeaseGranted>(h.client("alice", Role::developer, lease_request(8), 10)));
    Body pending = h.client("bob", Role::developer, lease_request(8), 20);
    REQUIRE(std::holds_alternative<LeasePending>(pending));
    seen = std::get<LeasePending>(pending).lease.event_seq;  // what bob's watcher knows
    // L1 is released and L2 granted: an event bob's watcher never got.
    REQUIRE(std::holds_alternative<Ok>(h.client("alice", Role::developer, ReleaseLease{1}, 30)));
    REQUIRE(lease_of(h, 2).state == LeaseState::granted);
    REQUIRE(lease_of(h, 2).event_seq == seen + 1);
    store = h.store();
  }
  Harness h(knobs(), store, kRestartMs);
  h.agent("p9", "n01", hello("n01", "a"), kRestartMs + 500);
  // Asked again with what it had seen, the watch is answered at once with the lease as it is.
  Body answer = h.client("bob", Role::developer, WatchLease{2, seen, 5000}, kRestartMs + 600);
  REQUIRE(std::holds_alternative<LeaseEvent>(answer));
  const LeaseEvent& now = std::get<LeaseEvent>(answer);
  CHECK(now.kind == LeaseEventKind::status);
  CHECK(now.seq == seen + 1);
  CHECK(now.lease.state == LeaseState::granted);
  // From there it waits, and the first event after the restart carries the next number.
  const std::size_t replies = h.to_clients.size();
  h.core.on_client_message("c-bob", Caller{"bob", Role::developer}, make_envelope(WatchLease{2, now.seq, 60000}, 99),
                           kRestartMs + 700);
  h.drain();
  CHECK(h.to_clients.size() == replies);  // parked
  (void)h.client("bob", Role::developer, ReleaseLease{2}, kRestartMs + 800);  // the watch is answered first
  CHECK(std::holds_alternative<Ok>(h.to_clients.back().body));
  bool told = false;
  for (std::size_t i = replies; i < h.to_clients.size(); ++i) {
    if (h.to_clients[i].corr != 99) continue;
    const auto& next = std::get<LeaseEvent>(h.to_clients[i].body);
    CHECK(next.seq == seen + 2);
    CHECK(next.kind == LeaseEventKind::ended);
    told = true;
  }
  CHECK(told);
}

TEST_CASE("a lease recovered under notice and then released leaves no deadline behind for the loop") {
  CoordinatorKnobs k = knobs();
  k.liveness_missed_beats = 1000;
  k.scheduler.grace_ms = 60000;
  k.scheduler.target_start_latency_ms[scheduler::rank(scheduler::RequestClass::presubmit)] = 0;
  Snapshot store;
  {
    Harness h(k);
    h.agent("p1", "n01", hello("n01", "a"), 0);
    REQUIRE(std::holds_alternative<LeaseGranted>(h.client("alice", Role::developer, lease_request(8), 10)));
    SubmitJob presubmit = sleep_job(8);
    presubmit.priority_class = PriorityClass::presubmit;
    h.submit("ci", Role::ci, presubmit, 20);
    REQUIRE(lease_of(h, 1).state == LeaseState::preempting);
    store = h.store();
  }
  const TimeMs restart = 30000;
  Harness h(k, store, restart);
  h.agent("p9", "n01", hello("n01", "a"), restart + 500);
  REQUIRE(lease_of(h, 1).state == LeaseState::preempting);
  REQUIRE(std::holds_alternative<Ok>(h.client("alice", Role::developer, ReleaseLease{1}, restart + 1000)));
  REQUIRE(lease_of(h, 1).state == LeaseState::ended);
  // Its old grace deadline went with it: a deadline in the past would have the loop spin.
  const TimeMs after = restart + 2000;
  h.tick(after);
  const auto next = h.core.next_deadline();
  CHECK((!next || *next > after));
}

TEST_CASE("a released lease stops its running job and cancels its queued one before its end is told: the ended "
          "event lists only the job still stopping") {
  Harness h(knobs());
  h.agent("p1", "n01", hello("n01", "a"), 0);
  REQUIRE(std::holds_alternative<LeaseGranted>(h.client("alice", Role::developer, lease_request(8), 10)));
  const auto running = std::get<JobAccepted>(h.client("alice", Role::developer, SubmitInLease{1, sleep_job(8)}, 20));
  h.agent("p1", "n01", JobStarted{running.job_id, 1}, 30);
  const auto waiting = std::get<JobAccepted>(h.client("alice", Role::developer, SubmitInLease{1, sleep_job(4)}, 40));
  REQUIRE(h.job(waiting.job_id).summary.state == JobState::queued);
  // A watcher parked on the lease hears its end.
  const LeaseSummary granted = lease_of(h, 1);
  h.core.on_client_message("c-bob", Caller{"bob", Role::ops},
                           make_envelope(WatchLease{1, granted.event_seq, 60000}, h.next_id++), 50);
  h.drain();
  const std::size_t replies = h.to_clients.size();

  h.core.on_client_message("c-alice", Caller{"alice", Role::developer}, make_envelope(ReleaseLease{1}, h.next_id++),
                           60);
  h.drain();
  CHECK(h.job(waiting.job_id).summary.state == JobState::cancelled);
  const auto cancels = h.agent_bodies<JobCancel>("p1");
  REQUIRE(cancels.size() == 1);
  CHECK(cancels[0].job_id == running.job_id);
  // The watcher's event, then the release's answer: the event was recorded once the jobs had been
  // told, so it names the job still stopping and not the one cancelled.
  REQUIRE(h.to_clients.size() == replies + 2);
  const auto& event = std::get<LeaseEvent>(h.to_clients[replies].body);
  CHECK(h.to_clients[replies].client == "c-bob");
  CHECK(event.kind == LeaseEventKind::ended);
  CHECK(event.lease.job_ids == std::vector<std::uint64_t>{running.job_id});
  CHECK(std::holds_alternative<Ok>(h.to_clients[replies + 1].body));
  CHECK(h.stored_leases.at(1).summary.job_ids == std::vector<std::uint64_t>{running.job_id});
}

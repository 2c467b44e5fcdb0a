// Time in the coordinator core: deadlines on the monotonic clock, the wall clock for display
// and for times people set, and the grace recovered nodes get to register after a restart.
#include <doctest/doctest.h>

#include "coordinator/core/coordinator_core.h"
#include "tests/support/core_harness.h"

using namespace kiln;
using namespace kiln::coordinator;
using namespace kiln::protocol;
using namespace kiln::coordinator::testing;

namespace {

constexpr TimeMs kWallStartMs = 1767603600000;  // 2026-01-05 09:00 UTC

}  // namespace

TEST_CASE("the wall clock stepping by hours, forward or back, loses no node and expires no lease") {
  CoordinatorKnobs knobs;
  knobs.heartbeat_interval_ms = 1000;
  TimeMs step_ms = 0;
  SUBCASE("forward") { step_ms = 5 * kHourMs; }
  SUBCASE("back") { step_ms = -5 * kHourMs; }
  // Monotonic time starts anywhere (boot time); the wall clock steps at monotonic 10 s.
  auto at = [&](TimeMs monotonic_ms) {
    const TimeMs wall = kWallStartMs + monotonic_ms + (monotonic_ms >= 10000 ? step_ms : 0);
    return Now{monotonic_ms + 123456, wall};
  };
  Harness h(knobs, {}, at(0));
  h.agent("p1", "n01", hello("n01", "a"), at(100));
  REQUIRE(std::holds_alternative<LeaseGranted>(
      h.client("alice", Role::developer, lease_request(4, "", 60 * kMinuteMs), at(200))));
  const auto job = h.submit("bob", Role::developer, sleep_job(4, PriorityClass::experiment, 30 * kMinuteMs), at(300));
  REQUIRE(h.job(job).summary.state == JobState::assigned);
  for (TimeMs t = 1000; t <= 20000; t += 1000) {
    h.agent("p1", "n01", Heartbeat{{job}}, at(t));
    h.tick(at(t));
  }
  CHECK(h.core.nodes().at("n01").summary.state == NodeState::up);
  CHECK(h.job(job).summary.state == JobState::assigned);
  REQUIRE(h.core.leases().size() == 1);
  CHECK(h.core.leases()[0].state == LeaseState::granted);
  // The next deadline is on the monotonic clock: the node's liveness, seconds away.
  REQUIRE(h.core.next_deadline().has_value());
  CHECK(*h.core.next_deadline() <= at(20000).monotonic_ms + knobs.liveness_timeout_ms() + 1);
  CHECK(*h.core.next_deadline() > at(20000).monotonic_ms);
  // Silence is still noticed on the monotonic clock.
  h.tick(at(20000 + knobs.liveness_timeout_ms() + 1));
  CHECK(h.core.nodes().at("n01").summary.state == NodeState::lost);
}

TEST_CASE("a lease expires after its duration on the monotonic clock, whatever the wall clock says") {
  CoordinatorKnobs knobs;
  knobs.heartbeat_interval_ms = 60000;  // a heartbeat a minute keeps the node for 4 minutes
  Harness h(knobs, {}, Now{0, kWallStartMs});
  h.agent("p1", "n01", hello("n01", "a"), Now{0, kWallStartMs});
  REQUIRE(std::holds_alternative<LeaseGranted>(
      h.client("alice", Role::developer, lease_request(8, "", 30 * kMinuteMs), Now{0, kWallStartMs})));
  // The wall clock jumps a day ahead at once; 29 minutes pass on the monotonic clock.
  for (TimeMs minute = 1; minute <= 29; ++minute) {
    const Now now{minute * kMinuteMs, kWallStartMs + 24 * kHourMs + minute * kMinuteMs};
    h.agent("p1", "n01", Heartbeat{}, now);
    h.tick(now);
  }
  CHECK(h.core.leases()[0].state == LeaseState::granted);
  const Now expiry{30 * kMinuteMs, kWallStartMs + 24 * kHourMs + 30 * kMinuteMs};
  h.agent("p1", "n01", Heartbeat{}, expiry);
  h.tick(expiry);
  CHECK(h.core.leases()[0].state == LeaseState::ended);
}

TEST_CASE("a lease booked ahead opens when the wall clock reads its start, after a step of the clock too") {
  Harness h(CoordinatorKnobs{}, {}, Now{0, kWallStartMs});
  h.agent("p1", "n01", hello("n01", "a"), Now{0, kWallStartMs});
  // The wall clock was an hour slow and is corrected: 10:00 is now 10 minutes away.
  const Now corrected{1000, kWallStartMs + kHourMs - 10 * kMinuteMs};
  RequestLease booked = lease_request(8, "", 30 * kMinuteMs);
  booked.start_at_ms = static_cast<std::uint64_t>(kWallStartMs + kHourMs);
  REQUIRE(std::holds_alternative<LeasePending>(h.client("alice", Role::developer, booked, corrected)));
  const auto& pending = std::get<LeasePending>(h.last_client_reply());
  REQUIRE(pending.expected_start_ms != 0);
  // On the core's clock the window opens 10 minutes (not an hour) after monotonic 1 s.
  CHECK(static_cast<TimeMs>(pending.expected_start_ms) == kWallStartMs + 1000 + 10 * kMinuteMs);
}

TEST_CASE("after a restart, recovered nodes have the restart grace to register before they are lost") {
  CoordinatorKnobs knobs;
  knobs.heartbeat_interval_ms = 1000;  // liveness timeout 4 s
  knobs.restart_grace_ms = 30000;
  Snapshot store;
  std::uint64_t job = 0;
  {
    Harness h(knobs);
    h.agent("p1", "n01", hello("n01", "a"), 0);
    h.agent("p2", "n02", hello("n02", "a"), 0);
    job = h.submit("bob", Role::developer, sleep_job(8, PriorityClass::experiment, 600000), 10);
    REQUIRE(h.job(job).summary.node_id == "n01");
    store = h.store();
  }
  constexpr TimeMs kRestartMs = 100000;
  Harness h(knobs, store, kRestartMs);
  // Long past the liveness timeout, within the grace: the agents are still in reconnect backoff.
  h.tick(kRestartMs + 20000);
  CHECK(h.core.nodes().at("n01").summary.state != NodeState::lost);
  CHECK(h.job(job).summary.state == JobState::assigned);
  h.agent("p9", "n01", hello("n01", "a", {job}), kRestartMs + 25000);
  CHECK(h.job(job).summary.state == JobState::running);
  CHECK(h.job(job).summary.attempt == 1);
  // n02 never comes back: lost at the end of the grace. n01, registered, counts liveness again.
  h.agent("p9", "n01", Heartbeat{{job}}, kRestartMs + 28000);
  h.tick(kRestartMs + 30001);
  CHECK(h.core.nodes().at("n02").summary.state == NodeState::lost);
  CHECK(h.core.nodes().at("n01").summary.state == NodeState::up);
  h.tick(kRestartMs + 28000 + knobs.liveness_timeout_ms() + 1);
  CHECK(h.core.nodes().at("n01").summary.state == NodeState::lost);
}

#include <doctest/doctest.h>

#include <map>
#include <set>

#include "agent/core/agent_core.h"
#include "tests/support/text.h"

using namespace kiln;
using namespace kiln::agent;
using namespace kiln::protocol;

namespace {

struct Harness {
  AgentCore core;
  std::vector<Action> actions;
  std::uint64_t next_id = 1;

  Harness() : core(identity(), knobs()) {}

  static AgentIdentity identity() {
    AgentIdentity id;
    id.node_id = "n01";
    id.hardware_revision = "a";
    for (std::uint32_t i = 0; i < 8; ++i) id.chips.push_back(ChipInfo{i, "S" + std::to_string(i), "1.0", 0, true});
    return id;
  }
  static SessionKnobs knobs() {
    SessionKnobs k;
    k.heartbeat_interval_ms = 1000;
    k.liveness_missed_beats = 3;
    k.reconnect_backoff_initial_ms = 100;
    k.reconnect_backoff_max_ms = 800;
    k.probe_interval_ms = 60000;
    return k;
  }
  void drain() {
    while (auto a = core.poll_action()) actions.push_back(*a);
  }
  void deliver(Body body, TimeMs now) {
    core.on_message(make_envelope(std::move(body), next_id++), now);
    drain();
  }
  template <class T>
  std::vector<T> sent() const {
    std::vector<T> out;
    for (const auto& a : actions) {
      if (auto* s = std::get_if<action::Send>(&a)) {
        if (auto* b = std::get_if<T>(&s->body)) out.push_back(*b);
      }
    }
    return out;
  }
  template <class T>
  std::size_t count() const {
    std::size_t n = 0;
    for (const auto& a : actions) n += std::holds_alternative<T>(a) ? 1 : 0;
    return n;
  }
};

Welcome welcome(std::vector<std::uint64_t> cancel = {}) {
  Welcome w;
  w.heartbeat_interval_ms = 1000;
  w.liveness_missed_beats = 3;
  w.cancel_jobs = std::move(cancel);
  return w;
}

// Each job on its own chip unless the test says otherwise.
JobStart job(std::uint64_t id, std::vector<std::uint32_t> chips = {}) {
  JobStart s;
  s.job_id = id;
  s.workload = "smoke";
  s.chip_indices = chips.empty() ? std::vector<std::uint32_t>{static_cast<std::uint32_t>(id % 8)} : chips;
  return s;
}

using kiln::testing::contains;

}  // namespace

TEST_CASE("the agent connects, says hello with its chips, and heartbeats once welcomed") {
  Harness h;
  h.core.on_start(0);
  h.drain();
  CHECK(h.count<action::Connect>() == 1);
  auto hellos = h.sent<Hello>();
  REQUIRE(hellos.size() == 1);
  CHECK(hellos[0].chips.size() == 8);
  CHECK(hellos[0].protocol_versions == std::vector<std::uint32_t>{1});
  h.deliver(welcome(), 10);
  CHECK(h.core.session_state() == AgentCore::SessionState::registered);
  h.core.on_tick(500);
  h.drain();
  CHECK(h.sent<Heartbeat>().empty());
  h.core.on_tick(1010);
  h.drain();
  CHECK(h.sent<Heartbeat>().size() == 1);
}

TEST_CASE("a silent coordinator gets hellos on the open connection, then a new connection, backing off up to the "
          "limit") {
  Harness h;
  h.core.on_start(0);
  h.deliver(welcome(), 0);
  // Heartbeats answered until 2000, then silence: 3 missed beats of 1000 ms.
  h.deliver(Heartbeat{}, 2000);
  h.core.on_tick(4999);
  h.drain();
  CHECK(h.core.session_state() == AgentCore::SessionState::registered);
  h.core.on_tick(5001);
  h.drain();
  CHECK(h.core.session_state() == AgentCore::SessionState::disconnected);
  REQUIRE(h.core.next_deadline().has_value());
  // A session that went silent tries again within half a liveness window (1500 ms), on the
  // connection it has: a stalled coordinator reads it when it resumes, and no new CURVE
  // handshake is added to what it finds waiting.
  const TimeMs first = *h.core.next_deadline();
  CHECK(first >= 5001);
  CHECK(first <= 5001 + 1500);
  h.core.on_tick(first);
  h.drain();
  CHECK(h.count<action::Connect>() == 1);
  CHECK(h.sent<Hello>().size() == 2);
  CHECK(h.core.session_state() == AgentCore::SessionState::registering);
  // No welcome: two more hellos on that connection, then a new connection, which gets its own
  // three. Each wait is longer, never more than the maximum, and between half and all of its
  // backoff.
  TimeMs now = first;
  std::vector<TimeMs> waits;
  std::vector<std::size_t> connections;
  for (int i = 0; i < 5; ++i) {
    now += 3001;
    h.core.on_tick(now);
    h.drain();
    auto deadline = h.core.next_deadline();
    REQUIRE(deadline.has_value());
    waits.push_back(*deadline - now);
    now = *deadline;
    h.core.on_tick(now);
    h.drain();
    connections.push_back(h.count<action::Connect>());
  }
  CHECK(connections == std::vector<std::size_t>{1, 1, 2, 2, 2});
  CHECK(h.sent<Hello>().size() == 7);
  const std::vector<TimeMs> backoffs = {200, 400, 800, 800, 800};
  for (std::size_t i = 0; i < waits.size(); ++i) {
    CHECK(waits[i] >= backoffs[i] / 2);
    CHECK(waits[i] <= backoffs[i]);
  }
}

TEST_CASE("after the transport reports the connection dropped, the agent reconnects on a new one") {
  Harness h;
  h.core.on_start(0);
  h.deliver(welcome(), 0);
  h.core.on_connection_lost();
  h.core.on_tick(3001);
  h.drain();
  REQUIRE(h.core.session_state() == AgentCore::SessionState::disconnected);
  h.core.on_tick(*h.core.next_deadline());
  h.drain();
  CHECK(h.count<action::Connect>() == 2);
  CHECK(h.sent<Hello>().size() == 2);
  // A message on the connection shows it works again: the next silence tries it first.
  h.deliver(welcome(), 3500);
  h.core.on_connection_lost();
  h.deliver(Heartbeat{}, 3600);
  h.core.on_tick(6601);
  h.drain();
  h.core.on_tick(*h.core.next_deadline());
  h.drain();
  CHECK(h.count<action::Connect>() == 2);
  CHECK(h.sent<Hello>().size() == 3);
}

TEST_CASE("the welcome to an older hello is ignored: the coordinator reconciles by the newest one") {
  Harness h;
  h.core.on_start(0);
  h.deliver(welcome(), 0);
  h.core.on_tick(3001);
  h.drain();
  h.core.on_tick(*h.core.next_deadline());
  h.drain();
  h.core.on_tick(*h.core.next_deadline());
  h.drain();
  h.core.on_tick(*h.core.next_deadline());
  h.drain();
  // Two hellos on the open connection; ids as the agent numbered them.
  std::vector<std::uint64_t> hello_ids;
  for (const auto& a : h.actions) {
    if (auto* s = std::get_if<action::Send>(&a); s && std::holds_alternative<Hello>(s->body)) hello_ids.push_back(s->id);
  }
  REQUIRE(hello_ids.size() == 3);
  CHECK(hello_ids[1] < hello_ids[2]);
  const TimeMs now = *h.core.next_deadline() - 1;
  // The coordinator answers the first of them, then starts a job before reading the second.
  h.core.on_message(make_envelope(welcome(), 50, hello_ids[1]), now);
  h.core.on_message(make_envelope(job(7), 51), now);
  h.drain();
  CHECK(h.core.session_state() == AgentCore::SessionState::registering);
  CHECK(h.count<action::StartJob>() == 0);
  // The newest hello's welcome registers.
  h.core.on_message(make_envelope(welcome(), 52, hello_ids[2]), now);
  h.drain();
  CHECK(h.core.session_state() == AgentCore::SessionState::registered);
  CHECK(h.core.running_jobs().empty());
}

TEST_CASE("agents whose coordinator went silent at once come back spread over the window, not in one burst") {
  // 200 agents, silent at the same moment: their first reconnects fall across half a liveness
  // window (1500 ms), no 100 ms of it taking more than a fifth of them.
  std::map<TimeMs, int> per_100ms;
  std::set<TimeMs> distinct;
  for (int n = 0; n < 200; ++n) {
    AgentIdentity id = Harness::identity();
    id.node_id = "n" + std::to_string(n);
    AgentCore core(id, Harness::knobs());
    core.on_start(0);
    core.on_message(make_envelope(welcome(), 1), 0);
    core.on_tick(3001);
    REQUIRE(core.session_state() == AgentCore::SessionState::disconnected);
    const TimeMs at = *core.next_deadline();
    CHECK(at >= 3001);
    CHECK(at <= 3001 + 1500);
    ++per_100ms[(at - 3001) / 100];
    distinct.insert(at);
  }
  for (const auto& [bucket, count] : per_100ms) CHECK(count <= 40);
  CHECK(distinct.size() > 100);
  // The same agent replayed waits the same: the jitter is seeded by its name.
  AgentCore again(Harness::identity(), Harness::knobs());
  AgentCore once_more(Harness::identity(), Harness::knobs());
  for (AgentCore* core : {&again, &once_more}) {
    core->on_start(0);
    core->on_message(make_envelope(welcome(), 1), 0);
    core->on_tick(3001);
  }
  CHECK(again.next_deadline() == once_more.next_deadline());
}

TEST_CASE("a job's result is kept until acknowledged and resent after re-registering") {
  Harness h;
  h.core.on_start(0);
  h.deliver(welcome(), 0);
  h.deliver(job(7), 10);
  CHECK(h.count<action::StartJob>() == 1);
  CHECK(h.sent<JobStarted>().size() == 1);
  h.deliver(job(7), 11);  // a duplicate delivery starts nothing
  CHECK(h.count<action::StartJob>() == 1);
  auto retry = job(7);
  retry.attempt = 2;  // the coordinator gave up on attempt 1 while it still ran here
  h.deliver(retry, 12);
  CHECK(h.count<action::StartJob>() == 1);
  REQUIRE(h.sent<JobStarted>().size() == 2);
  CHECK(h.sent<JobStarted>()[1].attempt == 2);
  JobEnded ended;
  ended.job_id = 7;
  ended.outcome = JobOutcome::succeeded;
  h.core.on_job_ended(ended, 20);
  h.drain();
  REQUIRE(h.sent<JobFinished>().size() == 1);
  CHECK(h.sent<JobFinished>()[0].attempt == 2);
  CHECK(h.core.unacknowledged_results() == 1);
  // The coordinator restarts before acknowledging: it answers heartbeats with not_registered.
  h.deliver(ErrorReply{"not_registered", "send hello", {}}, 30);
  h.deliver(ErrorReply{"not_registered", "send hello", {}}, 31);
  auto hellos = h.sent<Hello>();
  REQUIRE(hellos.size() == 2);  // the first at start, one more: never two outstanding
  CHECK(hellos[1].finished_jobs == std::vector<std::uint64_t>{7});
  h.deliver(welcome(), 40);
  CHECK(h.sent<JobFinished>().size() == 2);
  h.deliver(JobFinishedAck{7, 2}, 50);
  CHECK(h.core.unacknowledged_results() == 0);
}

TEST_CASE("cancel, preemption notice and reconciliation reach the running job") {
  Harness h;
  h.core.on_start(0);
  h.deliver(welcome(), 0);
  h.deliver(job(1), 1);
  h.deliver(job(2), 2);
  h.deliver(JobPreempt{1, 300000, "presubmit needs the chips"}, 3);
  CHECK(h.count<action::NotifyPreemption>() == 1);
  h.deliver(JobCancel{2, "cancelled by dev"}, 4);
  CHECK(h.count<action::CancelJob>() == 1);
  h.deliver(welcome({1}), 5);
  CHECK(h.count<action::CancelJob>() == 2);
  // Unknown jobs are ignored.
  h.deliver(JobCancel{99, "x"}, 6);
  CHECK(h.count<action::CancelJob>() == 2);
}

TEST_CASE("probes run periodically once registered and their report goes to the coordinator") {
  Harness h;
  h.core.on_start(0);
  h.deliver(welcome(), 0);
  h.core.on_tick(1);
  h.drain();
  CHECK(h.count<action::RunProbe>() == 1);
  h.core.on_tick(2);
  h.drain();
  CHECK(h.count<action::RunProbe>() == 1);  // one at a time
  HealthReport report;
  report.verdict = HealthStatus::fail;
  h.core.on_probe_result(report, 1'700'000'000'000, 100);
  h.drain();
  CHECK(h.sent<HealthReport>().size() == 1);
  h.deliver(Heartbeat{}, 60000);  // the coordinator is alive throughout
  h.core.on_tick(60099);
  h.drain();
  CHECK(h.count<action::RunProbe>() == 1);
  h.core.on_tick(60100);
  h.drain();
  CHECK(h.count<action::RunProbe>() == 2);
}

TEST_CASE("no probe runs while an install swaps the firmware, and none measured across an install is reported") {
  Harness h;
  h.core.on_start(0);
  h.deliver(welcome(), 0);
  h.core.on_tick(1);
  h.drain();
  REQUIRE(h.count<action::RunProbe>() == 1);
  // An install starts while that probe runs: what the probe saw may be the firmware mid-swap.
  JobStart install = job(7, {0, 1, 2, 3, 4, 5, 6, 7});
  install.workload = std::string(kInstallWorkload);
  h.deliver(install, 2);
  HealthReport failing;
  failing.verdict = HealthStatus::fail;
  h.core.on_probe_result(failing, 1'700'000'000'000, 100);
  h.drain();
  CHECK(h.sent<HealthReport>().empty());
  // Past the probe interval, still installing: no probe, and no deadline that would spin.
  h.deliver(Heartbeat{}, 70000);
  h.core.on_tick(70001);
  h.drain();
  CHECK(h.count<action::RunProbe>() == 1);
  CHECK(*h.core.next_deadline() > 70001);
  h.core.on_job_ended(JobEnded{7, JobOutcome::succeeded, 0, 1000, "", "", ""}, 70002);
  h.core.on_tick(70003);
  h.drain();
  CHECK(h.count<action::RunProbe>() == 2);
  h.core.on_probe_result(failing, 1'700'000'070'000, 70100);
  h.drain();
  CHECK(h.sent<HealthReport>().size() == 1);
}

TEST_CASE("after a successful install the next hello reports the installed driver and firmware") {
  Harness h;
  h.core.on_start(0);
  h.deliver(welcome(), 0);
  const auto install = [&](std::uint64_t id, const char* report, JobOutcome outcome, TimeMs now) {
    JobStart start = job(id, {0, 1, 2, 3, 4, 5, 6, 7});
    start.workload = std::string(kInstallWorkload);
    h.deliver(start, now);
    h.core.on_job_ended(JobEnded{id, outcome, 0, 1000, "", report, ""}, now + 1);
  };
  install(1, R"({"kind": "driver", "version": "2.0.0", "outcome": "installed"})", JobOutcome::succeeded, 10);
  install(2, R"({"kind": "firmware", "version": "3.0", "outcome": "rolled_back"})", JobOutcome::failed, 20);
  install(3, R"({"kind": "firmware", "version": "2.0", "outcome": "installed"})", JobOutcome::succeeded, 30);
  // The coordinator falls silent; the agent registers again.
  h.core.on_tick(5000);
  h.core.on_tick(*h.core.next_deadline());
  h.drain();
  const auto hellos = h.sent<Hello>();
  REQUIRE(hellos.size() == 2);
  CHECK(hellos[1].driver_version == "2.0.0");
  for (const ChipInfo& chip : hellos[1].chips) CHECK(chip.firmware_version == "2.0");
}

TEST_CASE("one owner per chip: a job_start for busy chips is refused and names who holds them") {
  Harness h;
  h.core.on_start(0);
  h.deliver(welcome(), 0);
  h.deliver(job(1, {0, 1}), 1);
  REQUIRE(h.count<action::StartJob>() == 1);
  h.deliver(job(2, {1, 2}), 2);  // chip 1 is job 1's
  CHECK(h.count<action::StartJob>() == 1);
  REQUIRE(h.sent<JobFinished>().size() == 1);
  const JobFinished refused = h.sent<JobFinished>()[0];
  CHECK(refused.job_id == 2);
  CHECK(refused.outcome == JobOutcome::failed_to_start);
  CHECK(refused.exit_code == -1);
  CHECK(contains(refused.detail, "chip 1 is held by job 1 attempt 1 (smoke)"));
  CHECK(h.core.running_jobs() == std::vector<std::uint64_t>{1});

  // The agent's own diagnostics ask the same table.
  const Status diag = h.core.claim_chips("local-diag-1", "level 2 diagnostics asked on this host's local socket",
                                         h.core.chip_indices());
  REQUIRE(!diag.has_value());
  CHECK(diag.error().code == Errc::unavailable);
  CHECK(contains(diag.error().message, "chips 0,1 are held by job 1 attempt 1 (smoke)"));

  JobEnded ended;
  ended.job_id = 1;
  ended.outcome = JobOutcome::succeeded;
  h.core.on_job_ended(ended, 3);
  h.drain();
  REQUIRE(h.core.claim_chips("local-diag-2", "level 2 diagnostics asked on this host's local socket",
                             h.core.chip_indices())
              .has_value());
  // A second local request and any job wait for the running diagnostics.
  const Status second = h.core.claim_chips("local-diag-3", "level 1 diagnostics asked on this host's local socket",
                                           h.core.chip_indices());
  REQUIRE(!second.has_value());
  CHECK(contains(second.error().message, "chips 0,1,2,3,4,5,6,7 are held by level 2 diagnostics"));
  h.deliver(job(3, {5}), 4);
  CHECK(h.count<action::StartJob>() == 1);
  REQUIRE(h.sent<JobFinished>().size() == 3);
  CHECK(h.sent<JobFinished>()[2].job_id == 3);
  CHECK(contains(h.sent<JobFinished>()[2].detail, "chip 5 is held by level 2 diagnostics asked on this host's local "
                                                  "socket"));

  h.core.release_chips("local-diag-2");
  h.deliver(job(4, {5}), 5);
  CHECK(h.count<action::StartJob>() == 2);
}

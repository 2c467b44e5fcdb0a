// The coordinator core sharing chips through the scheduler core: grants, preemption with
// notice reaching the agent, requeue keeping age, quarantine, maintenance, developer leases
// and `kiln queue --why`.
#include <doctest/doctest.h>

#include <algorithm>

#include "coordinator/core/coordinator_core.h"
#include "tests/support/core_harness.h"
#include "coordinator/server/coordinator_config.h"
#include "tests/support/temp_dir.h"

using namespace kiln;
using namespace kiln::coordinator;
using namespace kiln::protocol;
using namespace kiln::coordinator::testing;

namespace {


// Whether chips of the node are held for an attempt being stopped there.
bool holds_stopping_chips(const Harness& h, const std::string& node) {
  for (const auto& lease : h.core.scheduler().leases()) {
    const auto owner = h.core.request_owner(lease.request);
    if (!owner || !std::holds_alternative<kiln::coordinator::request_owner::StopHold>(*owner)) continue;
    for (const auto& p : lease.placement) {
      if (p.node == node) return true;
    }
  }
  return false;
}

}  // namespace

TEST_CASE("the scheduler places jobs: topology first, CI ahead of experiments, revision respected") {
  Harness h(knobs_with_fast_preemption());
  h.agent("p1", "n01", hello("n01", "a"), 0);
  const auto first = h.submit("dev", Role::developer, sleep_job(2, PriorityClass::experiment), 10);
  auto starts = h.agent_bodies<JobStart>("p1");
  REQUIRE(starts.size() == 1);
  CHECK(starts[0].job_id == first);
  CHECK(starts[0].chip_indices.size() == 2);
  // Both chips on one NUMA node (chips 0-3 are NUMA 0, 4-7 NUMA 1).
  CHECK(starts[0].chip_indices[0] / 4 == starts[0].chip_indices[1] / 4);
  CHECK(h.job(first).summary.state == JobState::assigned);

  // A job for a revision no node has is refused; a 3-chip job gets a 4-chip lease and uses 3.
  const auto on_b = h.submit("dev", Role::developer, sleep_job(1, PriorityClass::experiment), 20);
  CHECK(h.agent_bodies<JobStart>("p1").size() == 2);
  (void)on_b;
  SubmitJob for_b = sleep_job(1, PriorityClass::experiment);
  for_b.hardware_revision = "b";
  const Body refused = h.client("dev", Role::developer, for_b, 30);
  REQUIRE(std::holds_alternative<ErrorReply>(refused));
  CHECK(std::get<ErrorReply>(refused).message.find("no node has hardware revision 'b'") != std::string::npos);
  const auto three = h.submit("dev", Role::developer, sleep_job(3, PriorityClass::experiment), 40);
  CHECK(h.job(three).summary.chip_indices.size() == 3);
  CHECK(h.core.nodes().at("n01").summary.chips_used >= 6);
  CHECK(h.core.scheduler().check_invariants().has_value());
}

TEST_CASE("a presubmit job preempts an experiment: JobPreempt with the grace, JobCancel when it ends, requeue keeping age") {
  Harness h(knobs_with_fast_preemption());
  h.agent("p1", "n01", hello("n01", "a"), 0);
  const auto experiment = h.submit("dev", Role::developer, sleep_job(8, PriorityClass::experiment), 100);
  h.agent("p1", "n01", JobStarted{experiment, 1}, 200);
  REQUIRE(h.job(experiment).summary.state == JobState::running);

  // A developer cannot preempt: another experiment just waits.
  const auto other = h.submit("dev2", Role::developer, sleep_job(1, PriorityClass::experiment), 500);
  CHECK(h.agent_bodies<JobPreempt>("p1").empty());

  const auto presubmit = h.submit("ci", Role::ci, sleep_job(1, PriorityClass::presubmit), 1000);
  auto notices = h.agent_bodies<JobPreempt>("p1");
  REQUIRE(notices.size() == 1);
  CHECK(notices[0].job_id == experiment);
  CHECK(notices[0].grace_ms == kGraceMs);
  CHECK(notices[0].reason.find("job " + std::to_string(presubmit)) != std::string::npos);
  CHECK(h.job(presubmit).summary.state == JobState::queued);
  CHECK(h.core.next_deadline().value_or(0) <= 1000 + kGraceMs);

  SUBCASE("the workload does not let go: at the end of the grace the job is cancelled and requeued") {
    h.tick(1000 + kGraceMs - 1);
    CHECK(h.agent_bodies<JobCancel>("p1").empty());
    h.tick(1000 + kGraceMs);
    auto cancels = h.agent_bodies<JobCancel>("p1");
    REQUIRE(cancels.size() == 1);
    CHECK(cancels[0].job_id == experiment);
    // Its chips stay held until the cancelled attempt is gone; then the presubmit job starts.
    CHECK(h.job(experiment).summary.state == JobState::queued);
    CHECK(h.job(presubmit).summary.state == JobState::queued);
    CHECK(h.core.scheduler().leases().size() == 1);  // the hold on the stopping attempt's chips
    h.agent("p1", "n01", finished(experiment, 1, JobOutcome::cancelled), 1000 + kGraceMs + 500);
  }
  SUBCASE("the workload checkpoints and exits: requeued at once") {
    h.agent("p1", "n01", finished(experiment, 1, JobOutcome::succeeded, R"({"status": "preempted"})"), 5000);
    CHECK(h.agent_bodies<JobCancel>("p1").empty());
  }
  const auto& requeued = h.job(experiment);
  CHECK(requeued.summary.state == JobState::queued);
  CHECK(requeued.submitted_at_ms == 100);
  CHECK(requeued.preemptions == 1);
  CHECK(requeued.summary.detail.find("preempted") != std::string::npos);
  // The presubmit job has the chips now.
  CHECK(h.job(presubmit).summary.state == JobState::assigned);
  // Its late result, if any, is stale and changes nothing.
  h.agent("p1", "n01", finished(experiment, 1, JobOutcome::cancelled), 70000);
  CHECK(h.job(experiment).summary.state == JobState::queued);

  // When the presubmit job ends the experiment runs again ahead of the younger experiment,
  // and the preemption did not use up one of its attempts.
  h.agent("p1", "n01", finished(presubmit, 1, JobOutcome::succeeded), 80000);
  CHECK(h.job(presubmit).summary.state == JobState::succeeded);
  CHECK(h.job(experiment).summary.state == JobState::assigned);
  CHECK(h.job(experiment).summary.attempt == 2);
  CHECK(h.job(other).summary.state == JobState::queued);
  CHECK(h.core.scheduler().check_invariants().has_value());
}

TEST_CASE("a job that completes during its notice is done, not requeued") {
  Harness h(knobs_with_fast_preemption());
  h.agent("p1", "n01", hello("n01", "a"), 0);
  const auto experiment = h.submit("dev", Role::developer, sleep_job(8, PriorityClass::experiment), 100);
  h.submit("ci", Role::ci, sleep_job(1, PriorityClass::presubmit), 1000);
  REQUIRE(h.agent_bodies<JobPreempt>("p1").size() == 1);
  h.agent("p1", "n01", finished(experiment, 1, JobOutcome::succeeded, R"({"status": "completed"})"), 2000);
  CHECK(h.job(experiment).summary.state == JobState::succeeded);
}

TEST_CASE("a quarantined node gets no leases; maintenance still runs there after draining") {
  Harness h(knobs_with_fast_preemption());
  h.agent("p1", "n01", hello("n01", "a"), 0);
  const auto busy = h.submit("dev", Role::developer, sleep_job(4, PriorityClass::experiment), 10);
  h.agent("p1", "n01", JobStarted{busy, 1}, 15);
  HealthReport report;
  report.verdict = HealthStatus::fail;
  report.checks.push_back(HealthCheck{"ecc", 3, HealthStatus::fail, "ecc_uncorrected", "memory", "12 uncorrected", ""});
  h.agent("p1", "n01", report, 20);
  REQUIRE(h.core.nodes().at("n01").summary.state == NodeState::quarantined);

  // A lease waits and says why.
  Body reply = h.client("dev", Role::developer, lease_request(2), 30);
  REQUIRE(std::holds_alternative<LeasePending>(reply));
  const auto& pending = std::get<LeasePending>(reply);
  CHECK(pending.lease.state == LeaseState::pending);
  CHECK(pending.explanation.find("quarantined") != std::string::npos);

  // Diagnostics on it wait for the running job (the node drains), then take the whole node.
  SubmitJob diag;
  diag.workload = std::string(kDiagWorkload);
  diag.node_id = "n01";
  const auto diag_id = h.submit("lab1", Role::lab, diag, 40);
  CHECK(h.job(diag_id).summary.state == JobState::queued);
  Body why = h.client("lab1", Role::lab, QueueWhy{diag_id, 0}, 50);
  REQUIRE(std::holds_alternative<QueueExplanation>(why));
  CHECK(std::get<QueueExplanation>(why).pending);
  h.agent("p1", "n01", finished(busy, 1, JobOutcome::succeeded), 60);
  CHECK(h.job(diag_id).summary.state == JobState::assigned);
  CHECK(h.job(diag_id).summary.chip_indices.size() == 8);

  // Passing level 2 brings the node back; the waiting lease is granted.
  h.agent("p1", "n01", finished(diag_id, 1, JobOutcome::succeeded, R"({"level": 2, "verdict": "pass"})"), 70);
  CHECK(h.core.nodes().at("n01").summary.state == NodeState::up);
  auto leases = h.core.leases();
  REQUIRE(leases.size() == 1);
  CHECK(leases[0].state == LeaseState::granted);
}

TEST_CASE("queue --why explains a pending job: what blocks it and when it is expected to start") {
  Harness h(knobs_with_fast_preemption());
  h.agent("p1", "n01", hello("n01", "a"), 0);
  const auto running = h.submit("dev", Role::developer, sleep_job(8, PriorityClass::experiment, 600000), 0);
  const auto waiting = h.submit("dev", Role::developer, sleep_job(4, PriorityClass::experiment), 1000);
  Body reply = h.client("dev", Role::developer, QueueWhy{waiting, 0}, 2000);
  REQUIRE(std::holds_alternative<QueueExplanation>(reply));
  const auto& e = std::get<QueueExplanation>(reply);
  CHECK(e.pending);
  CHECK(e.state == "queued");
  CHECK_FALSE(e.reasons.empty());
  CHECK(e.text.find("no node of any revision has 4 free chips") != std::string::npos);
  // Expected when the running job's expected duration (its timeout) is over.
  CHECK(e.expected_start_ms == 600000);
  CHECK(e.text.find("expected to start in") != std::string::npos);

  Body about_running = h.client("dev", Role::developer, QueueWhy{running, 0}, 2000);
  CHECK_FALSE(std::get<QueueExplanation>(about_running).pending);
  CHECK(std::get<QueueExplanation>(about_running).text.find("n01") != std::string::npos);
  Body unknown = h.client("dev", Role::developer, QueueWhy{999, 0}, 2000);
  CHECK(std::get<ErrorReply>(unknown).code == "not_found");
}

TEST_CASE("the queue is listed a page at a time, in scheduling order, saying when more follow") {
  Harness h(knobs_with_fast_preemption());
  h.agent("p1", "n01", hello("n01", "a"), 0);
  (void)h.submit("dev", Role::developer, sleep_job(8, PriorityClass::experiment, 600000), 0);
  std::vector<std::uint64_t> waiting;
  for (int i = 0; i < 5; ++i) {
    waiting.push_back(h.submit("dev", Role::developer, sleep_job(4, PriorityClass::experiment), 1000 + i));
  }
  const auto page = [&](std::uint32_t limit) {
    ListQueue ask;
    ask.limit = limit;
    Body reply = h.client("dev", Role::developer, ask, 2000);
    REQUIRE(std::holds_alternative<QueueList>(reply));
    return std::get<QueueList>(reply);
  };
  const QueueList two = page(2);
  REQUIRE(two.entries.size() == 2);
  CHECK(two.entries[0].job_id == waiting[0]);
  CHECK(two.entries[1].job_id == waiting[1]);
  CHECK(two.more);
  const QueueList all = page(5);
  REQUIRE(all.entries.size() == 5);
  CHECK_FALSE(all.more);
  // A page says of its requests what the whole queue says of them.
  for (std::size_t i = 0; i < 2; ++i) {
    CHECK(all.entries[i].job_id == two.entries[i].job_id);
    CHECK(all.entries[i].reasons == two.entries[i].reasons);
    CHECK(all.entries[i].expected_start_ms == two.entries[i].expected_start_ms);
  }
  CHECK(page(4).more);
  CHECK_FALSE(page(1000).more);
}

TEST_CASE("developer leases: granted, jobs run inside, watched, listed and released") {
  Harness h(knobs_with_fast_preemption());
  h.agent("p1", "n01", hello("n01", "a"), 0);
  h.agent("p2", "n02", hello("n02", "b"), 0);

  SUBCASE("developers lease only experiment class") {
    RequestLease r = lease_request(8);
    r.priority_class = PriorityClass::presubmit;
    Body reply = h.client("dev", Role::developer, r, 10);
    CHECK(std::get<ErrorReply>(reply).code == "unauthorized");
    Body both = h.client("dev", Role::developer, RequestLease{4, 1, "", 3600000, PriorityClass::experiment}, 10);
    CHECK(std::get<ErrorReply>(both).code == "invalid_argument");
    Body odd = h.client("dev", Role::developer, lease_request(3), 10);
    CHECK(std::get<ErrorReply>(odd).code == "invalid_argument");
  }

  Body reply = h.client("dev", Role::developer, lease_request(4, "b"), 10);
  REQUIRE(std::holds_alternative<LeaseGranted>(reply));
  const LeaseSummary lease = std::get<LeaseGranted>(reply).lease;
  CHECK(lease.state == LeaseState::granted);
  CHECK(lease.owner == "dev");
  REQUIRE(lease.placement.size() == 1);
  CHECK(lease.placement[0].node_id == "n02");
  CHECK(lease.placement[0].chip_indices.size() == 4);
  CHECK(lease.expires_at_ms == 10 + 2 * 3600000);
  CHECK(h.core.nodes().at("n02").summary.chips_used == 4);

  // Listed for everyone.
  Body list = h.client("other", Role::developer, ListLeases{false}, 20);
  REQUIRE(std::get<LeaseList>(list).leases.size() == 1);

  // A watch from the start sees the grant at once; a watch after it waits, then reports status.
  Body first = h.client("dev", Role::developer, WatchLease{lease.lease_id, 0, 1000}, 30);
  CHECK(std::get<LeaseEvent>(first).kind == LeaseEventKind::granted);
  const auto seq = std::get<LeaseEvent>(first).seq;
  CHECK(seq == lease.event_seq);  // the reply tells a watcher where to start
  const std::size_t replies = h.to_clients.size();
  h.core.on_client_message("c-dev", Caller{"dev", Role::developer},
                           make_envelope(WatchLease{lease.lease_id, seq, 1000}, h.next_id++), 40);
  h.drain();
  CHECK(h.to_clients.size() == replies);  // parked
  CHECK(h.core.next_deadline().value_or(0) <= 1040);
  h.tick(1040);
  REQUIRE(h.to_clients.size() == replies + 1);
  CHECK(std::get<LeaseEvent>(h.to_clients.back().body).kind == LeaseEventKind::status);

  // Someone else may not use, watch or release it.
  SubmitInLease foreign{lease.lease_id, sleep_job(1, PriorityClass::experiment)};
  CHECK(std::get<ErrorReply>(h.client("mallory", Role::developer, foreign, 50)).code == "unauthorized");
  CHECK(std::get<ErrorReply>(h.client("mallory", Role::developer, ReleaseLease{lease.lease_id}, 50)).code ==
        "unauthorized");

  // Jobs run on the lease's chips; more than it holds is refused; a second one waits its turn.
  SubmitInLease in_lease{lease.lease_id, sleep_job(2, PriorityClass::experiment)};
  Body accepted = h.client("dev", Role::developer, in_lease, 60);
  const auto job_a = std::get<JobAccepted>(accepted).job_id;
  auto starts = h.agent_bodies<JobStart>("p2");
  REQUIRE(starts.size() == 1);
  for (auto chip : starts[0].chip_indices) {
    CHECK(std::find(lease.placement[0].chip_indices.begin(), lease.placement[0].chip_indices.end(), chip) !=
          lease.placement[0].chip_indices.end());
  }
  in_lease.job.chips = 8;
  CHECK(std::get<ErrorReply>(h.client("dev", Role::developer, in_lease, 70)).code == "invalid_argument");
  in_lease.job.chips = 4;
  const auto job_b = std::get<JobAccepted>(h.client("dev", Role::developer, in_lease, 80)).job_id;
  CHECK(h.job(job_b).summary.state == JobState::queued);
  Body why = h.client("dev", Role::developer, QueueWhy{job_b, 0}, 90);
  CHECK(std::get<QueueExplanation>(why).text.find("inside lease L") != std::string::npos);
  h.agent("p2", "n02", finished(job_a, 1, JobOutcome::succeeded), 100);
  CHECK(h.job(job_b).summary.state == JobState::assigned);

  // Releasing ends it and cancels what runs in it.
  Body released = h.client("dev", Role::developer, ReleaseLease{lease.lease_id}, 200);
  CHECK(std::holds_alternative<Ok>(released));
  auto cancels = h.agent_bodies<JobCancel>("p2");
  REQUIRE(cancels.size() == 1);
  CHECK(cancels[0].job_id == job_b);
  CHECK(h.core.leases()[0].state == LeaseState::ended);
  CHECK(std::get<LeaseList>(h.client("dev", Role::developer, ListLeases{false}, 210)).leases.empty());
  CHECK(std::get<LeaseList>(h.client("dev", Role::developer, ListLeases{true}, 210)).leases.size() == 1);
  CHECK(std::get<ErrorReply>(h.client("dev", Role::developer, ReleaseLease{lease.lease_id}, 220)).code == "conflict");
  h.agent("p2", "n02", finished(job_b, 1, JobOutcome::cancelled), 230);
  CHECK(h.core.nodes().at("n02").summary.chips_used == 0);
  CHECK(h.core.scheduler().check_invariants().has_value());
}

TEST_CASE("a developer lease gets a preemption notice from CI, is revoked at the end of the grace and requeued") {
  Harness h(knobs_with_fast_preemption());
  h.agent("p1", "n01", hello("n01", "a"), 0);
  Body reply = h.client("dev", Role::developer, lease_request(8), 10);
  const LeaseSummary lease = std::get<LeaseGranted>(reply).lease;
  SubmitInLease in_lease{lease.lease_id, sleep_job(8, PriorityClass::experiment)};
  const auto inner = std::get<JobAccepted>(h.client("dev", Role::developer, in_lease, 20)).job_id;
  Body granted = h.client("dev", Role::developer, WatchLease{lease.lease_id, 0, 0}, 30);
  const auto seq = std::get<LeaseEvent>(granted).seq;

  // The developer is watching when CI needs the node.
  h.core.on_client_message("c-dev", Caller{"dev", Role::developer},
                           make_envelope(WatchLease{lease.lease_id, seq, 30000}, h.next_id++), 40);
  h.drain();
  const auto ci = h.submit("ci", Role::ci, sleep_job(2, PriorityClass::presubmit), 1000);
  auto events = h.client_bodies<LeaseEvent>("dev");
  REQUIRE(events.size() == 2);
  CHECK(events.back().kind == LeaseEventKind::preempt_notice);
  CHECK(events.back().lease.state == LeaseState::preempting);
  CHECK(events.back().lease.grace_deadline_ms == 1000 + kGraceMs);
  CHECK(events.back().message.find("job " + std::to_string(ci)) != std::string::npos);
  // The workload running in the lease gets the notice too.
  auto notices = h.agent_bodies<JobPreempt>("p1");
  REQUIRE(notices.size() == 1);
  CHECK(notices[0].job_id == inner);

  h.tick(1000 + kGraceMs);
  CHECK(h.agent_bodies<JobCancel>("p1").size() == 1);
  auto now_lease = h.core.leases().at(0);
  CHECK(now_lease.state == LeaseState::pending);
  Body requeued = h.client("dev", Role::developer, WatchLease{lease.lease_id, seq + 1, 0}, 1000 + kGraceMs + 1);
  CHECK(std::get<LeaseEvent>(requeued).kind == LeaseEventKind::requeued);
  // The job in the lease keeps its chips until it has stopped; then CI gets them.
  CHECK(h.job(ci).summary.state == JobState::queued);
  CHECK(h.core.nodes().at("n01").summary.chips_used == 8);
  h.agent("p1", "n01", finished(inner, 1, JobOutcome::cancelled), 1000 + kGraceMs + 10);
  CHECK(h.job(inner).summary.state == JobState::cancelled);
  CHECK(h.job(ci).summary.state == JobState::assigned);

  // When CI is done the lease comes back, with a new grant event.
  h.agent("p1", "n01", finished(ci, 1, JobOutcome::succeeded), 1000 + kGraceMs + 20);
  CHECK(h.core.leases().at(0).state == LeaseState::granted);
}

TEST_CASE("a developer lease expires: its jobs are cancelled and watchers told") {
  Harness h(knobs_with_fast_preemption());
  h.agent("p1", "n01", hello("n01", "a"), 0);
  const LeaseSummary lease =
      std::get<LeaseGranted>(h.client("dev", Role::developer, lease_request(1, "", 60000), 0)).lease;
  const auto inner = std::get<JobAccepted>(
      h.client("dev", Role::developer, SubmitInLease{lease.lease_id, sleep_job(1, PriorityClass::experiment)}, 10)).job_id;
  CHECK(h.core.next_deadline().value_or(0) <= 60000);
  h.tick(60000);
  CHECK(h.core.leases().at(0).state == LeaseState::ended);
  CHECK(h.core.leases().at(0).detail == "expired");
  REQUIRE(h.agent_bodies<JobCancel>("p1").size() == 1);
  CHECK(h.agent_bodies<JobCancel>("p1")[0].job_id == inner);
}

TEST_CASE("after a restart, queued jobs keep their age and running jobs keep their chips") {
  Snapshot snapshot;
  {
    Harness before(knobs_with_fast_preemption());
    before.agent("p1", "n01", hello("n01", "a"), 0);
    before.submit("dev", Role::developer, sleep_job(4, PriorityClass::experiment), 10);
    before.submit("dev", Role::developer, sleep_job(8, PriorityClass::experiment), 20);
    snapshot.jobs = before.store().jobs;
    snapshot.nodes.push_back(before.core.nodes().at("n01"));
  }
  Harness h(knobs_with_fast_preemption(), snapshot, 100000);
  REQUIRE(h.core.request_of_job(2).has_value());
  CHECK(h.core.scheduler().is_pending(*h.core.request_of_job(2)));
  // A new 4-chip job must not be placed on the chips job 1 still holds.
  h.agent("p9", "n01", hello("n01", "a", {1}), 100500);
  CHECK(h.job(1).summary.state == JobState::running);
  REQUIRE(h.core.request_of_job(1).has_value());
  CHECK(h.core.scheduler().lease_of(*h.core.request_of_job(1)).has_value());
  const auto fresh = h.submit("dev", Role::developer, sleep_job(4, PriorityClass::experiment), 100600);
  // Job 2 (older, 8 chips) holds a reservation; the new one may not jump it onto the free half.
  CHECK(h.job(fresh).summary.state == JobState::queued);
  h.agent("p9", "n01", finished(1, 1, JobOutcome::succeeded), 100700);
  CHECK(h.job(2).summary.state == JobState::assigned);
  CHECK(h.core.scheduler().check_invariants().has_value());
}

TEST_CASE("coordinator.toml's [scheduler] table sets the scheduler's knobs") {
  kiln::testing::TempDir dir("kiln-sched-config");
  const std::string path = dir.write("coordinator.toml",
                                     "[coordinator]\nsecret_key_file = \"c.key\"\n\n[scheduler]\ngrace_ms = 2000\n"
                                     "[scheduler.target_start_latency_ms]\npresubmit = 0\n");
  auto config = load_coordinator_config(path);
  REQUIRE_MESSAGE(config.has_value(), config.error().message);
  CHECK(config->knobs.scheduler.grace_ms == 2000);
  CHECK(config->knobs.scheduler.target_start_latency_ms[1] == 0);

  dir.write("coordinator.toml", "[coordinator]\nsecret_key_file = \"c.key\"\n\n[scheduler]\ngrace_minutes = 2\n");
  auto bad = load_coordinator_config(path);
  REQUIRE_FALSE(bad.has_value());
  CHECK(bad.error().message.find("grace_minutes") != std::string::npos);
}

TEST_CASE("[environments] names the repository the rollouts watch; its problems name the line") {
  kiln::testing::TempDir dir("kiln-environments-config");
  std::filesystem::create_directories(dir / "environments");
  const std::string path =
      dir.write("coordinator.toml", "[coordinator]\nsecret_key_file = \"c.key\"\n\n[environments]\n"
                                    "repo = \"environments\"\nbranch = \"release\"\nwave_size = 8\n");
  auto config = load_coordinator_config(path);
  REQUIRE_MESSAGE(config.has_value(), config.error().message);
  CHECK(config->environments_repo == (dir / "environments").string());
  CHECK(config->environments_branch == "release");
  CHECK(config->environments_poll_interval_ms == 10000);
  CHECK(config->knobs.rollout_wave_size == 8);

  dir.write("coordinator.toml", "[coordinator]\nsecret_key_file = \"c.key\"\n\n[environments]\nwave_size = 0\n"
                                "repos = \"x\"\n");
  auto bad = load_coordinator_config(path);
  REQUIRE_FALSE(bad.has_value());
  CHECK(bad.error().message.find("wave_size must be between 1 and 10000") != std::string::npos);
  CHECK(bad.error().message.find("repos") != std::string::npos);
  CHECK(bad.error().message.find("[environments] needs repo") != std::string::npos);
}

TEST_CASE("a revoked job granted again on its node starts only once its old attempt has stopped") {
  Harness h(knobs_with_fast_preemption());
  h.agent("p1", "n01", hello("n01", "a"), 0);
  const auto e1 = h.submit("dev", Role::developer, sleep_job(2, PriorityClass::experiment), 100);
  const auto e3 = h.submit("dev", Role::developer, sleep_job(4, PriorityClass::experiment), 150);
  const auto victim = h.submit("dev", Role::developer, sleep_job(2, PriorityClass::experiment), 200);
  const auto p = h.submit("ci", Role::ci, sleep_job(2, PriorityClass::presubmit), 1000);
  auto notices = h.agent_bodies<JobPreempt>("p1");
  REQUIRE(notices.size() == 1);
  REQUIRE(notices[0].job_id == victim);  // the least work lost
  h.tick(1000 + kGraceMs);
  REQUIRE(h.agent_bodies<JobCancel>("p1").size() == 1);
  CHECK(h.job(victim).summary.state == JobState::queued);
  CHECK(h.job(p).summary.state == JobState::queued);  // the victim's chips are still held
  h.agent("p1", "n01", finished(e1, 1, JobOutcome::succeeded), 61500);
  CHECK(h.job(p).summary.state == JobState::assigned);

  // Chips free up on the same node while the old attempt still runs: the victim gets them, but
  // the agent is not asked to start it yet (it would take the start for a duplicate).
  const std::size_t starts_before = h.agent_bodies<JobStart>("p1").size();
  h.agent("p1", "n01", finished(e3, 1, JobOutcome::succeeded), 62000);
  CHECK(h.job(victim).summary.state == JobState::assigned);
  CHECK(h.job(victim).summary.attempt == 2);
  CHECK(h.agent_bodies<JobStart>("p1").size() == starts_before);

  // The old attempt reports its end (stale, attempt 1): now the new attempt starts.
  h.agent("p1", "n01", finished(victim, 1, JobOutcome::cancelled), 62500);
  auto starts = h.agent_bodies<JobStart>("p1");
  REQUIRE(starts.size() == starts_before + 1);
  CHECK(starts.back().job_id == victim);
  CHECK(starts.back().attempt == 2);
  CHECK(h.core.scheduler().check_invariants().has_value());
}

TEST_CASE("a quarantined node that is lost and comes back is still quarantined") {
  CoordinatorKnobs knobs = knobs_with_fast_preemption();
  knobs.liveness_missed_beats = 4;
  Harness h(knobs);
  h.agent("p1", "n01", hello("n01", "a"), 0);
  HealthReport report;
  report.verdict = HealthStatus::fail;
  report.checks.push_back(HealthCheck{"ecc", 3, HealthStatus::fail, "ecc_uncorrected", "memory", "", ""});
  h.agent("p1", "n01", report, 10);
  h.tick(5000);
  REQUIRE(h.core.nodes().at("n01").summary.state == NodeState::lost);
  h.agent("p2", "n01", hello("n01", "a"), 6000);
  CHECK(h.core.nodes().at("n01").summary.state == NodeState::quarantined);
  const auto waiting = h.submit("dev", Role::developer, sleep_job(1, PriorityClass::experiment), 7000);
  CHECK(h.job(waiting).summary.state == JobState::queued);
}

TEST_CASE("a released or expired lease keeps the chips of its running jobs until they have stopped") {
  Harness h(knobs_with_fast_preemption());
  h.agent("p1", "n01", hello("n01", "a"), 0);
  const LeaseSummary lease =
      std::get<LeaseGranted>(h.client("dev", Role::developer, lease_request(8, "", 600000), 0)).lease;
  const auto inner = std::get<JobAccepted>(
      h.client("dev", Role::developer, SubmitInLease{lease.lease_id, sleep_job(8, PriorityClass::experiment)}, 10)).job_id;
  SUBCASE("released") { h.client("dev", Role::developer, ReleaseLease{lease.lease_id}, 5000); }
  SUBCASE("expired") { h.tick(600000); }
  CHECK(h.core.leases().at(0).state == LeaseState::ended);
  REQUIRE(h.agent_bodies<JobCancel>("p1").size() == 1);
  const auto waiting = h.submit("ci", Role::ci, sleep_job(8, PriorityClass::nightly), 600001);
  CHECK(h.job(waiting).summary.state == JobState::queued);
  REQUIRE(h.core.request_of_job(inner).has_value());
  CHECK(h.core.scheduler().lease_of(*h.core.request_of_job(inner)).has_value());
  h.agent("p1", "n01", finished(inner, 1, JobOutcome::cancelled), 600002);
  CHECK(h.job(waiting).summary.state == JobState::assigned);
  CHECK(h.core.scheduler().check_invariants().has_value());
}

TEST_CASE("a node back from a partition takes new work only once the jobs it was told to stop are gone") {
  CoordinatorKnobs knobs = knobs_with_fast_preemption();
  knobs.liveness_missed_beats = 4;
  Harness h(knobs);
  h.agent("p1", "n01", hello("n01", "a"), 0);
  SubmitJob once = sleep_job(8, PriorityClass::presubmit);
  once.max_attempts = 1;
  const auto old_job = h.submit("ci", Role::ci, once, 10);
  h.tick(5000);  // silent: lost; the job has no attempts left
  REQUIRE(h.job(old_job).summary.state == JobState::lost);
  const auto next = h.submit("ci", Role::ci, sleep_job(8, PriorityClass::presubmit), 5100);
  // Back, still running the old job: told to stop it, and nothing new starts meanwhile.
  h.agent("p2", "n01", hello("n01", "a", {old_job}), 6000);
  REQUIRE(h.agent_bodies<Welcome>("p2").size() == 1);
  CHECK(h.agent_bodies<Welcome>("p2")[0].cancel_jobs == std::vector<std::uint64_t>{old_job});
  CHECK(h.job(next).summary.state == JobState::queued);
  Heartbeat still;
  still.running_jobs = {old_job};
  h.agent("p2", "n01", still, 6500);
  CHECK(h.job(next).summary.state == JobState::queued);
  h.agent("p2", "n01", Heartbeat{}, 7000);
  CHECK(h.job(next).summary.state == JobState::assigned);
}

TEST_CASE("a resent result of an earlier attempt does not free the chips of a later attempt still stopping") {
  CoordinatorKnobs knobs = knobs_with_fast_preemption();
  knobs.liveness_missed_beats = 4;
  Harness h(knobs);
  h.agent("p1", "n01", hello("n01", "a"), 0);
  SubmitJob three = sleep_job(8, PriorityClass::presubmit);
  three.max_attempts = 3;
  const auto job = h.submit("ci", Role::ci, three, 10);
  h.tick(5000);  // silent: attempt 1 lost, queued again
  REQUIRE(h.job(job).summary.state == JobState::queued);
  // Back still running attempt 1: told to stop it; once gone, attempt 2 starts on the same chips.
  // (The result of attempt 1 is lost on the way, so the agent keeps it unacknowledged.)
  h.agent("p2", "n01", hello("n01", "a", {job}), 6000);
  h.agent("p2", "n01", Heartbeat{}, 6500);
  REQUIRE(h.job(job).summary.attempt == 2);
  REQUIRE(h.agent_bodies<JobStart>("p2").size() == 1);
  Heartbeat running;
  running.running_jobs = {job};
  h.agent("p2", "n01", running, 7000);
  h.tick(12000);  // silent again: attempt 2 lost while it runs
  REQUIRE(h.job(job).summary.state == JobState::queued);

  // Back, still running attempt 2, and resending attempt 1's result.
  Hello back = hello("n01", "a", {job});
  back.finished_jobs = {job};
  h.agent("p3", "n01", back, 13000);
  REQUIRE(h.agent_bodies<Welcome>("p3").at(0).cancel_jobs == std::vector<std::uint64_t>{job});
  const auto next = h.submit("ci", Role::ci, sleep_job(8, PriorityClass::presubmit), 13100);
  h.agent("p3", "n01", finished(job, 1, JobOutcome::cancelled), 13200);
  CHECK(holds_stopping_chips(h, "n01"));
  CHECK(h.agent_bodies<JobStart>("p3").empty());
  CHECK(h.job(next).summary.state == JobState::queued);

  // Attempt 2 itself ends: now its chips are free.
  h.agent("p3", "n01", finished(job, 2, JobOutcome::cancelled), 13300);
  CHECK_FALSE(holds_stopping_chips(h, "n01"));
  CHECK(h.agent_bodies<JobStart>("p3").size() == 1);
  CHECK(h.core.scheduler().check_invariants().has_value());
}

TEST_CASE("work placed on a node stopping jobs whose chips are not held starts only once they are gone") {
  // Where a job the node is told to stop runs may be unknown (first registration, or its chips
  // overlap another hold): nothing holds its chips. Regular work keeps off the node meanwhile,
  // but maintenance enters a quarantined node whatever it is stopping.
  CoordinatorKnobs knobs = knobs_with_fast_preemption();
  knobs.liveness_missed_beats = 4;
  Harness h(knobs);
  h.agent("p1", "n01", hello("n01", "a", {77, 78}), 0);
  REQUIRE(h.agent_bodies<Welcome>("p1").at(0).cancel_jobs == std::vector<std::uint64_t>{77, 78});
  HealthReport report;
  report.verdict = HealthStatus::fail;
  report.checks.push_back(HealthCheck{"ecc", 3, HealthStatus::fail, "ecc_uncorrected", "memory", "", ""});
  h.agent("p1", "n01", report, 10);
  REQUIRE(h.core.nodes().at("n01").summary.state == NodeState::quarantined);
  SubmitJob diag;
  diag.workload = std::string(kDiagWorkload);
  diag.args = {"--level", "2"};
  diag.node_id = "n01";
  const auto diag_id = h.submit("lab1", Role::lab, diag, 20);
  CHECK(h.agent_bodies<JobStart>("p1").empty());

  Heartbeat one_left;
  one_left.running_jobs = {78};
  h.agent("p1", "n01", one_left, 500);  // 77 is gone, 78 still stops
  CHECK(h.agent_bodies<JobStart>("p1").empty());

  h.agent("p1", "n01", Heartbeat{}, 1000);
  REQUIRE(h.agent_bodies<JobStart>("p1").size() == 1);
  CHECK(h.agent_bodies<JobStart>("p1")[0].job_id == diag_id);
  CHECK(h.job(diag_id).summary.state == JobState::assigned);
  CHECK(h.core.scheduler().check_invariants().has_value());
}

TEST_CASE("diagnostics wait for every developer lease on the node's chips, as for its jobs") {
  Harness h(knobs_with_fast_preemption());
  h.agent("p1", "n03", hello("n03", "a"), 0);
  const LeaseSummary lease = std::get<LeaseGranted>(h.client("dev", Role::developer, lease_request(8), 10)).lease;
  const auto inner = std::get<JobAccepted>(
      h.client("dev", Role::developer, SubmitInLease{lease.lease_id, sleep_job(8, PriorityClass::experiment)}, 20)).job_id;
  REQUIRE(h.job(inner).summary.state == JobState::assigned);
  SubmitJob diag;
  diag.workload = std::string(kDiagWorkload);
  diag.node_id = "n03";
  diag.args = {"--level", "2"};
  const auto diag_job = h.submit("lab1", Role::lab, diag, 30);
  for (TimeMs t = 1000; t <= 30 * kMinuteMs; t += kMinuteMs) {
    h.agent("p1", "n03", Heartbeat{{inner}}, t);
    h.tick(t);
  }
  CHECK(h.job(diag_job).summary.state == JobState::queued);
  CHECK(h.core.leases().at(0).state == LeaseState::granted);
  const auto dispatched_diag = [&] {
    for (const auto& start : h.agent_bodies<JobStart>("p1")) {
      if (start.job_id == diag_job) return true;
    }
    return false;
  };
  CHECK_FALSE(dispatched_diag());
  // Released: the job in it is cancelled, and its chips stay held until it has stopped.
  h.client("dev", Role::developer, ReleaseLease{lease.lease_id}, 31 * kMinuteMs);
  CHECK_FALSE(dispatched_diag());
  h.agent("p1", "n03", finished(inner, 1, JobOutcome::cancelled), 31 * kMinuteMs + 10);
  CHECK(h.job(diag_job).summary.state == JobState::assigned);
  CHECK(dispatched_diag());
}

TEST_CASE("a job stopping on two nodes at once keeps its chips held on both (sweep seeds 900152, 900684)") {
  // Holds were kept by job: the second stopping attempt of a job found one held elsewhere and
  // held nothing, nor drained its node, and new work started on chips it still used.
  CoordinatorKnobs knobs = knobs_with_fast_preemption();
  knobs.liveness_missed_beats = 4;
  Harness h(knobs);
  h.agent("p1", "n01", hello("n01", "a"), 0);
  SubmitJob three = sleep_job(8, PriorityClass::presubmit);
  three.max_attempts = 3;
  const auto job = h.submit("ci", Role::ci, three, 10);
  REQUIRE(h.job(job).summary.node_id == "n01");
  h.agent("p2", "n02", hello("n02", "a"), 100);
  for (TimeMs t = 1000; t <= 4000; t += 1000) h.agent("p2", "n02", Heartbeat{}, t);
  h.tick(4500);  // n01 is silent: attempt 1 lost, attempt 2 goes to n02
  REQUIRE(h.job(job).summary.node_id == "n02");
  REQUIRE(h.job(job).summary.attempt == 2);
  // n02's agent registers again without attempt 2, which may still reach it: its chips are held.
  h.agent("p3", "n02", hello("n02", "a"), 5000);
  REQUIRE(holds_stopping_chips(h, "n02"));
  // n01 is back, still running attempt 1: told to stop it, and its chips are held too.
  h.agent("p4", "n01", hello("n01", "a", {job}), 5500);
  REQUIRE(h.agent_bodies<Welcome>("p4").at(0).cancel_jobs == std::vector<std::uint64_t>{job});
  CHECK(holds_stopping_chips(h, "n01"));
  CHECK(holds_stopping_chips(h, "n02"));
  const auto other = h.submit("ci", Role::ci, sleep_job(8, PriorityClass::presubmit), 5600);
  CHECK(h.job(other).summary.state == JobState::queued);
  CHECK(h.agent_bodies<JobStart>("p4").empty());
  // Attempt 1 is gone from n01's heartbeats: n01's chips are free again.
  h.agent("p4", "n01", Heartbeat{}, 6000);
  CHECK_FALSE(holds_stopping_chips(h, "n01"));
  CHECK(h.agent_bodies<JobStart>("p4").size() == 1);
  CHECK(h.core.scheduler().check_invariants().has_value());
}

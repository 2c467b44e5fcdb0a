// Quarantine as the fleet lives it: a quarantined node takes only its diagnostics in every order
// of events (quarantined in the step that grants it work, after a dispatch the agent has not
// started, while a job runs there), it returns only through diagnostics that can see what
// quarantined it, and nightly work preempts experiment leases, pinned work included.
#include <doctest/doctest.h>

#include <algorithm>

#include "tests/support/core_harness.h"

using namespace kiln;
using namespace kiln::coordinator;
using namespace kiln::protocol;
using namespace kiln::coordinator::testing;

namespace {

// Knobs under which nodes stay alive through long waits; the scheduler's are the defaults.
CoordinatorKnobs patient_knobs() {
  CoordinatorKnobs knobs;
  knobs.heartbeat_interval_ms = 1000;
  knobs.liveness_missed_beats = 100000;
  return knobs;
}

// What the nightly's triage submits: a rerun of a model pinned to the node it chose.
SubmitJob triage_rerun(const std::string& node) {
  SubmitJob s = sleep_job(1, PriorityClass::nightly);
  s.node_id = node;
  s.hardware_revision = "a";
  return s;
}

SubmitJob diagnostics(const std::string& node, int level) {
  SubmitJob s;
  s.workload = std::string(kDiagWorkload);
  s.args = {"--level", std::to_string(level)};
  s.node_id = node;
  return s;
}

// The job starts sent to the peer for `job_id`.
std::size_t starts_of(const Harness& h, const std::string& peer, std::uint64_t job_id) {
  const auto starts = h.agent_bodies<JobStart>(peer);
  return static_cast<std::size_t>(
      std::count_if(starts.begin(), starts.end(), [&](const JobStart& s) { return s.job_id == job_id; }));
}

JobFinished diag_outcome(std::uint64_t job_id, int level, const std::string& verdict) {
  JobFinished fin = finished(job_id, 1, verdict == "fail" ? JobOutcome::failed : JobOutcome::succeeded,
                             fmt::format(R"({{"level": {}, "verdict": "{}"}})", level, verdict));
  fin.exit_code = verdict == "fail" ? 1 : 0;
  return fin;
}

HealthReport probe_failing(const std::string& check, const std::string& category) {
  HealthReport report;
  report.verdict = HealthStatus::fail;
  report.checks.push_back(HealthCheck{check, 2, HealthStatus::fail, check + "_bad", category, "found", "drain"});
  return report;
}

}  // namespace

TEST_CASE("triage reruns granted in the very step their node is quarantined are not dispatched there") {
  Harness h(patient_knobs());
  h.agent("p1", "n01", hello("n01", "a"), 0);
  // The lab runs level 2 diagnostics on n01; the nightly's two reruns pinned to n01 wait for it.
  const auto diag = h.submit("lab1", Role::lab, diagnostics("n01", 2), 10);
  REQUIRE(h.job(diag).summary.state == JobState::assigned);
  const auto first = h.submit("ci", Role::ci, triage_rerun("n01"), 20);
  const auto second = h.submit("ci", Role::ci, triage_rerun("n01"), 21);
  REQUIRE(h.job(first).summary.state == JobState::queued);

  // The diagnostics fail: in that one step its chips free up (the scheduler grants the reruns)
  // and the node is quarantined.
  h.agent("p1", "n01", diag_outcome(diag, 2, "fail"), 1000);
  REQUIRE(h.core.nodes().at("n01").summary.state == NodeState::quarantined);
  CHECK(starts_of(h, "p1", first) == 0);
  CHECK(starts_of(h, "p1", second) == 0);
  CHECK(h.job(first).summary.state == JobState::queued);
  CHECK(h.job(second).summary.state == JobState::queued);
  CHECK(h.job(first).summary.attempt == 0);
  CHECK(h.core.nodes().at("n01").summary.chips_used == 0);

  // Diagnostics of the level that failed release it; then the reruns run there.
  const auto again = h.submit("lab1", Role::lab, diagnostics("n01", 2), 2000);
  CHECK(starts_of(h, "p1", again) == 1);
  h.agent("p1", "n01", diag_outcome(again, 2, "pass"), 3000);
  REQUIRE(h.core.nodes().at("n01").summary.state == NodeState::up);
  CHECK(starts_of(h, "p1", first) == 1);
  CHECK(starts_of(h, "p1", second) == 1);
  CHECK(h.job(first).summary.node_quarantined.empty());
}

TEST_CASE("an attempt dispatched to a node quarantined before it started is withdrawn and costs no attempt") {
  Harness h(patient_knobs());
  h.agent("p1", "n01", hello("n01", "a"), 0);
  h.agent("p2", "n02", hello("n02", "a"), 1);
  const auto pinned = h.submit("ci", Role::ci, triage_rerun("n01"), 10);
  REQUIRE(h.job(pinned).summary.state == JobState::assigned);
  REQUIRE(h.job(pinned).summary.node_id == "n01");

  SUBCASE("the quarantine comes before the agent says the job started") {
    h.agent("p1", "n01", failing_probe(), 10);  // the same millisecond
    REQUIRE(h.core.nodes().at("n01").summary.state == NodeState::quarantined);
    const auto cancels = h.agent_bodies<JobCancel>("p1");
    REQUIRE(cancels.size() == 1);
    CHECK(cancels[0].job_id == pinned);
    const JobRecord& job = h.job(pinned);
    CHECK(job.summary.state == JobState::queued);
    CHECK(job.preemptions == 1);  // the withdrawn attempt does not count against max_attempts
    CHECK(job.summary.detail.find("withdrawn from n01 before it started") != std::string::npos);
    // Its job_started and result, already on their way, change nothing.
    h.agent("p1", "n01", JobStarted{pinned, 1}, 11);
    CHECK(h.job(pinned).summary.state == JobState::queued);
    h.agent("p1", "n01", finished(pinned, 1, JobOutcome::cancelled), 12);
    CHECK(h.job(pinned).summary.state == JobState::queued);
    // Work not pinned goes to the healthy node.
    auto anywhere = sleep_job(8, PriorityClass::nightly);
    anywhere.hardware_revision = "a";
    const auto other = h.submit("ci", Role::ci, anywhere, 13);
    CHECK(h.job(other).summary.node_id == "n02");
    // Released by the level its link fault needs, the node runs the rerun as attempt 2.
    const auto diag = h.submit("lab1", Role::lab, diagnostics("n01", 2), 20);
    h.agent("p1", "n01", diag_outcome(diag, 2, "pass"), 30);
    REQUIRE(h.core.nodes().at("n01").summary.state == NodeState::up);
    CHECK(h.job(pinned).summary.state == JobState::assigned);
    CHECK(h.job(pinned).summary.attempt == 2);
    CHECK(h.job(pinned).summary.node_quarantined.empty());
  }
  SUBCASE("the job was running when the node was quarantined: it runs on, its result marked") {
    h.agent("p1", "n01", JobStarted{pinned, 1}, 10);
    h.agent("p1", "n01", failing_probe(), 20);
    CHECK(h.agent_bodies<JobCancel>("p1").empty());
    CHECK(h.job(pinned).summary.state == JobState::running);
    h.agent("p1", "n01", finished(pinned, 1, JobOutcome::succeeded, R"({"correct": false})"), 30);
    const JobRecord& job = h.job(pinned);
    CHECK(job.summary.state == JobState::succeeded);
    CHECK(job.summary.node_quarantined.find("health probe failed") != std::string::npos);
    // What a client reads about the job says so.
    const Body detail = h.client("ci", Role::ci, GetJob{pinned}, 40);
    REQUIRE(std::holds_alternative<JobDetail>(detail));
    CHECK(std::get<JobDetail>(detail).job.node_quarantined == job.summary.node_quarantined);
  }
}

TEST_CASE("jobs inside a developer lease are not dispatched to chips of a quarantined node") {
  Harness h(patient_knobs());
  h.agent("p1", "n01", hello("n01", "a"), 0);
  const LeaseSummary lease = std::get<LeaseGranted>(h.client("dev", Role::developer, lease_request(4), 10)).lease;
  h.agent("p1", "n01", failing_probe(), 20);
  REQUIRE(h.core.nodes().at("n01").summary.state == NodeState::quarantined);
  const Body reply =
      h.client("dev", Role::developer, SubmitInLease{lease.lease_id, sleep_job(1, PriorityClass::experiment)}, 30);
  const auto inner = std::get<JobAccepted>(reply).job_id;
  CHECK(h.job(inner).summary.state == JobState::queued);
  CHECK(starts_of(h, "p1", inner) == 0);
}

TEST_CASE("a node quarantined for wrong results returns only after level 3 diagnostics; level 2 is refused") {
  Harness h(patient_knobs());
  h.agent("p1", "n01", hello("n01", "a"), 0);
  QuarantineNode request{"n01", "fp8-small failed on n01 and passes on n02: node n01 is suspect", "lab"};
  request.cause = QuarantineCause::wrong_results;
  const Body ok = h.client("ci", Role::ci, request, 10);
  REQUIRE(std::holds_alternative<Ok>(ok));
  CHECK(std::get<Ok>(ok).detail.find("level 3") != std::string::npos);
  const NodeSummary& node = h.core.nodes().at("n01").summary;
  REQUIRE(node.state == NodeState::quarantined);
  CHECK(node.release_diag_level == 3);
  CHECK(node.quarantine_reason.find("released by level 3 diagnostics (adds the compute self-test") !=
        std::string::npos);

  const auto weak = h.submit("lab1", Role::lab, diagnostics("n01", 2), 20);
  h.agent("p1", "n01", diag_outcome(weak, 2, "pass"), 30);
  CHECK(h.core.nodes().at("n01").summary.state == NodeState::quarantined);
  // The lab engineer reads why in the diagnostics job, and the audit log keeps it.
  CHECK(h.job(weak).summary.detail.find("stays quarantined: level 2 diagnostics cannot clear its quarantine") !=
        std::string::npos);
  CHECK(h.job(weak).summary.detail.find("it needs level 3 (kiln diag n01 --level 3)") != std::string::npos);
  CHECK(std::any_of(h.audit.begin(), h.audit.end(),
                    [](const AuditEntry& line) { return line.action == "release_refused"; }));

  const auto strong = h.submit("lab1", Role::lab, diagnostics("n01", 3), 40);
  h.agent("p1", "n01", diag_outcome(strong, 3, "pass"), 50);
  CHECK(h.core.nodes().at("n01").summary.state == NodeState::up);
  CHECK(h.core.nodes().at("n01").summary.release_diag_level == 0);
}

TEST_CASE("each quarantine names the diagnostics level that can see its cause") {
  Harness h(patient_knobs());
  h.agent("p1", "n01", hello("n01", "a"), 0);
  SUBCASE("a memory fault: the level 2 memory self-test") {
    h.agent("p1", "n01", probe_failing("ecc", "memory"), 10);
    CHECK(h.core.nodes().at("n01").summary.release_diag_level == 2);
  }
  SUBCASE("throttling shows under load: the level 3 compute stress") {
    h.agent("p1", "n01", probe_failing("thermal", "thermal"), 10);
    CHECK(h.core.nodes().at("n01").summary.release_diag_level == 3);
  }
  SUBCASE("a software fault: the knob's minimum, level 2") {
    h.agent("p1", "n01", probe_failing("driver", "software"), 10);
    CHECK(h.core.nodes().at("n01").summary.release_diag_level == 2);
  }
  SUBCASE("level 3 diagnostics that fail: level 3 again") {
    const auto diag = h.submit("lab1", Role::lab, diagnostics("n01", 3), 10);
    h.agent("p1", "n01", diag_outcome(diag, 3, "fail"), 20);
    CHECK(h.core.nodes().at("n01").summary.release_diag_level == 3);
  }
  SUBCASE("wrong results found on a node already quarantined for its link: level 3 now") {
    h.agent("p1", "n01", failing_probe(), 10);
    REQUIRE(h.core.nodes().at("n01").summary.release_diag_level == 2);
    QuarantineNode request{"n01", "wrong outputs", "lab"};
    request.cause = QuarantineCause::wrong_results;
    REQUIRE(std::holds_alternative<Ok>(h.client("ci", Role::ci, request, 20)));
    CHECK(h.core.nodes().at("n01").summary.release_diag_level == 3);
    CHECK(h.core.nodes().at("n01").summary.quarantine_reason.find("wrong outputs") != std::string::npos);
  }
  REQUIRE(h.core.nodes().at("n01").summary.state == NodeState::quarantined);
  // Kept with the node across a coordinator restart.
  Harness restarted(patient_knobs(), h.store(), 100);
  CHECK(restarted.core.nodes().at("n01").summary.release_diag_level ==
        h.core.nodes().at("n01").summary.release_diag_level);
}

TEST_CASE("nightly triage reruns pinned to a node a 7-day experiment lease holds preempt it with notice") {
  Harness h(patient_knobs());
  h.agent("p1", "n01", hello("n01", "a"), 0);
  RequestLease week = lease_request(8, "a", 7ULL * 24 * 3600 * 1000);
  const LeaseSummary lease = std::get<LeaseGranted>(h.client("dev", Role::developer, week, 10)).lease;

  const auto rerun = h.submit("ci", Role::ci, triage_rerun("n01"), 1000);
  // The usual notice: the lease is told at once and has the default grace to checkpoint.
  const auto& leases = h.core.leases();
  REQUIRE(leases.size() == 1);
  CHECK(leases[0].state == LeaseState::preempting);
  const TimeMs grace_ms = h.knobs.scheduler.grace_ms;
  CHECK(leases[0].grace_deadline_ms == static_cast<std::uint64_t>(1000 + grace_ms));
  CHECK(h.job(rerun).summary.state == JobState::queued);
  // At the end of the grace the rerun runs on its node; the lease waits for chips again.
  h.tick(1000 + grace_ms);
  CHECK(h.job(rerun).summary.state == JobState::assigned);
  CHECK(h.job(rerun).summary.node_id == "n01");
  CHECK(h.core.leases().at(0).state == LeaseState::pending);
  CHECK(h.core.leases().at(0).lease_id == lease.lease_id);
}

namespace {

// A nightly job that ran on n01 (chips 2 and 3 first taken by a 2-chip job) and reported its
// outputs against the golden: `correct` or not.
std::uint64_t job_with_outputs(Harness& h, bool correct, TimeMs now) {
  const auto blocker = h.submit("ci", Role::ci, sleep_job(2, PriorityClass::nightly), now);
  h.agent("p1", "n01", JobStarted{blocker, 1}, now + 1);
  const auto job = h.submit("ci", Role::ci, sleep_job(2, PriorityClass::nightly), now + 2);
  h.agent("p1", "n01", JobStarted{job, 1}, now + 3);
  h.agent("p1", "n01",
          finished(job, 1, JobOutcome::succeeded, fmt::format(R"({{"correctness_passed": {}}})", correct)), now + 4);
  h.agent("p1", "n01", finished(blocker, 1, JobOutcome::succeeded), now + 5);
  return job;
}

QuarantineNode wrong_results_of(std::uint64_t job) {
  QuarantineNode request{"n01", "fp8-small gave wrong outputs on n01 and correct ones on n02", "lab"};
  request.cause = QuarantineCause::wrong_results;
  request.failing_job_id = job;
  return request;
}

}  // namespace

TEST_CASE("a node quarantined for one job's wrong outputs returns after a correct rerun of that job on its chips") {
  Harness h(patient_knobs());
  h.agent("p1", "n01", hello("n01", "a"), 0);
  const auto failing = job_with_outputs(h, false, 10);
  const std::vector<std::uint32_t> failing_chips = h.job(failing).summary.chip_indices;
  REQUIRE(failing_chips.size() == 2);
  REQUIRE(std::holds_alternative<Ok>(h.client("ci", Role::ci, wrong_results_of(failing), 20)));
  const NodeSummary& node = h.core.nodes().at("n01").summary;
  REQUIRE(node.state == NodeState::quarantined);
  CHECK(node.wrong_results_job_id == failing);
  CHECK(node.quarantine_reason.find(fmt::format("or by a correct rerun of job {} there (kiln recheck n01)", failing)) !=
        std::string::npos);
  // Other work still waits elsewhere: the quarantined node takes none of it.
  const auto other = h.submit("ci", Role::ci, sleep_job(1, PriorityClass::nightly), 25);
  CHECK(starts_of(h, "p1", other) == 0);

  const Body accepted = h.client("lab1", Role::lab, RecheckNode{"n01"}, 30);
  REQUIRE(std::holds_alternative<JobAccepted>(accepted));
  const auto recheck = std::get<JobAccepted>(accepted).job_id;
  CHECK(h.job(recheck).summary.recheck_of_job_id == failing);
  REQUIRE(starts_of(h, "p1", recheck) == 1);
  CHECK(h.job(recheck).summary.chip_indices == failing_chips);
  CHECK(h.job(recheck).summary.workload == h.job(failing).summary.workload);
  CHECK(h.job(recheck).summary.args == h.job(failing).summary.args);
  // One rerun at a time.
  const Body twice = h.client("lab1", Role::lab, RecheckNode{"n01"}, 31);
  REQUIRE(std::holds_alternative<ErrorReply>(twice));
  CHECK(std::get<ErrorReply>(twice).message.find(fmt::format("job {} already reruns job {}", recheck, failing)) !=
        std::string::npos);
  h.agent("p1", "n01", JobStarted{recheck, 1}, 32);

  SUBCASE("wrong outputs again: it stays quarantined, and may be rechecked again") {
    h.agent("p1", "n01", finished(recheck, 1, JobOutcome::succeeded, R"({"correctness_passed": false})"), 40);
    CHECK(h.core.nodes().at("n01").summary.state == NodeState::quarantined);
    CHECK(h.job(recheck).summary.detail.find("stays quarantined") != std::string::npos);
    CHECK(h.job(recheck).summary.detail.find("its outputs were wrong again") != std::string::npos);
    CHECK(std::any_of(h.audit.begin(), h.audit.end(),
                      [](const AuditEntry& line) { return line.action == "release_refused"; }));
    CHECK(std::holds_alternative<JobAccepted>(h.client("lab1", Role::lab, RecheckNode{"n01"}, 50)));
  }
  SUBCASE("a rerun that says nothing of its outputs releases nothing") {
    h.agent("p1", "n01", finished(recheck, 1, JobOutcome::succeeded, R"({"throughput": 3.0})"), 40);
    CHECK(h.core.nodes().at("n01").summary.state == NodeState::quarantined);
    CHECK(h.job(recheck).summary.detail.find("says nothing of its outputs") != std::string::npos);
  }
  SUBCASE("correct outputs: the node returns, and the audit says how") {
    h.agent("p1", "n01", finished(recheck, 1, JobOutcome::succeeded, R"({"correctness_passed": true})"), 40);
    CHECK(h.core.nodes().at("n01").summary.state == NodeState::up);
    CHECK(h.core.nodes().at("n01").summary.wrong_results_job_id == 0);
    CHECK(h.job(recheck).summary.detail.find("node n01 leaves quarantine") != std::string::npos);
    CHECK(std::any_of(h.audit.begin(), h.audit.end(), [&](const AuditEntry& line) {
      return line.action == "released_from_quarantine" &&
             line.detail.find(fmt::format("job {} reran job {} there with correct outputs", recheck, failing)) !=
                 std::string::npos;
    }));
  }
}

TEST_CASE("a rerun cannot clear a quarantine for a fault only the diagnostics see") {
  Harness h(patient_knobs());
  h.agent("p1", "n01", hello("n01", "a"), 0);
  SUBCASE("a probe's fault") {
    h.agent("p1", "n01", failing_probe(), 10);
  }
  SUBCASE("wrong outputs, and then failed level 2 diagnostics") {
    const auto failing = job_with_outputs(h, false, 10);
    REQUIRE(std::holds_alternative<Ok>(h.client("ci", Role::ci, wrong_results_of(failing), 20)));
    const auto diag = h.submit("lab1", Role::lab, diagnostics("n01", 2), 30);
    h.agent("p1", "n01", diag_outcome(diag, 2, "fail"), 40);
  }
  SUBCASE("wrong outputs named without the job") {
    REQUIRE(std::holds_alternative<Ok>(h.client("ci", Role::ci, wrong_results_of(0), 20)));
  }
  REQUIRE(h.core.nodes().at("n01").summary.state == NodeState::quarantined);
  const Body refused = h.client("lab1", Role::lab, RecheckNode{"n01"}, 50);
  REQUIRE(std::holds_alternative<ErrorReply>(refused));
  CHECK(std::get<ErrorReply>(refused).message.find("a rerun cannot clear that; run kiln diag n01 --level") !=
        std::string::npos);
}

TEST_CASE("a recheck is for CI, lab, ops and admin keys, of a node that is quarantined") {
  Harness h(patient_knobs());
  h.agent("p1", "n01", hello("n01", "a"), 0);
  const Body developer = h.client("dev", Role::developer, RecheckNode{"n01"}, 10);
  REQUIRE(std::holds_alternative<ErrorReply>(developer));
  CHECK(std::get<ErrorReply>(developer).code == "unauthorized");
  const Body up = h.client("lab1", Role::lab, RecheckNode{"n01"}, 20);
  REQUIRE(std::holds_alternative<ErrorReply>(up));
  CHECK(std::get<ErrorReply>(up).message.find("is not quarantined") != std::string::npos);
}

#include <doctest/doctest.h>

#include "coordinator/core/coordinator_core.h"
#include "common/text/utf8.h"
#include "tests/support/core_harness.h"

using namespace kiln;
using namespace kiln::coordinator;
using namespace kiln::protocol;
using namespace kiln::coordinator::testing;

namespace {


SubmitJob smoke(std::uint32_t chips = 1, std::string rev = "", std::uint32_t max_attempts = 2) {
  SubmitJob s;
  s.workload = "smoke";
  s.chips = chips;
  s.hardware_revision = std::move(rev);
  s.priority_class = PriorityClass::experiment;
  s.max_attempts = max_attempts;
  return s;
}

}  // namespace

TEST_CASE("an agent registers, gets a job that fits, and its result is stored and acknowledged") {
  Harness h;
  h.agent("p1", "n01", hello("n01", "a"), 0);
  auto welcomes = h.agent_bodies<Welcome>("p1");
  REQUIRE(welcomes.size() == 1);
  CHECK(welcomes[0].protocol_version == 1);
  CHECK(h.core.nodes().at("n01").summary.state == NodeState::up);

  h.client("dev", Role::developer, smoke(4, "a"), 10);
  REQUIRE(std::holds_alternative<JobAccepted>(h.last_client_reply()));
  const auto id = std::get<JobAccepted>(h.last_client_reply()).job_id;
  auto starts = h.agent_bodies<JobStart>("p1");
  REQUIRE(starts.size() == 1);
  CHECK(starts[0].job_id == id);
  CHECK(starts[0].chip_indices == std::vector<std::uint32_t>{0, 1, 2, 3});  // one NUMA node
  CHECK(h.core.nodes().at("n01").summary.chips_used == 4);

  // The job was saved before the client was told it was accepted.
  CHECK(h.saved_jobs.front().summary.job_id == id);

  h.agent("p1", "n01", JobStarted{id, 1}, 20);
  CHECK(h.core.jobs().at(id).summary.state == JobState::running);
  JobFinished fin;
  fin.job_id = id;
  fin.outcome = JobOutcome::succeeded;
  fin.result = R"({"ok":true})";
  h.agent("p1", "n01", fin, 30);
  CHECK(h.core.jobs().at(id).summary.state == JobState::succeeded);
  CHECK(h.core.jobs().at(id).result == R"({"ok":true})");
  CHECK(h.agent_bodies<JobFinishedAck>("p1").size() == 1);
  CHECK(h.core.nodes().at("n01").summary.chips_used == 0);
}

TEST_CASE("a job waits for a node of its revision") {
  // n02 (revision b) is known from the store but its agent has not said hello yet.
  Snapshot stored;
  NodeRecord n02;
  n02.summary.node_id = "n02";
  n02.summary.hardware_revision = "b";
  n02.summary.chips_total = 8;
  stored.nodes.push_back(n02);
  Harness h({}, stored);
  h.agent("p1", "n01", hello("n01", "a"), 0);
  h.submit("dev", Role::developer, smoke(1, "b"), 10);
  CHECK(h.agent_bodies<JobStart>("p1").empty());
  h.agent("p2", "n02", hello("n02", "b"), 20);
  CHECK(h.agent_bodies<JobStart>("p2").size() == 1);
}

TEST_CASE("a job or lease that no node known could ever take is refused at submit, naming what the fleet has") {
  Harness h;
  // Before any node has registered, nothing is known to compare with: the request waits.
  h.submit("dev", Role::developer, smoke(1, "c"), 0);
  h.agent("p1", "n01", hello("n01", "a"), 10);
  h.agent("p2", "n02", hello("n02", "a"), 10);
  h.agent("p3", "n03", hello("n03", "b"), 10);
  const auto refused = [&](Body body) {
    Body reply = h.client("dev", Role::developer, std::move(body), 20);
    REQUIRE(std::holds_alternative<ErrorReply>(reply));
    CHECK(std::get<ErrorReply>(reply).code == "invalid_argument");
    return std::get<ErrorReply>(reply).message;
  };
  CHECK(refused(smoke(1, "c")) ==
        "this job could never start: no node has hardware revision 'c'; the fleet has revisions a (2 nodes), b (1 node)");
  SubmitJob pinned = smoke(2, "b");
  pinned.node_id = "n01";
  CHECK(refused(pinned) == "this job could never start: node n01 has hardware revision a, not b; drop --node or --rev");
  CHECK(refused(RequestLease{0, 2, "b", 3600000, PriorityClass::experiment}) ==
        "this lease could never be granted: 2 whole nodes of one revision asked for, but the fleet has 1 node of "
        "revision b; the fleet has revisions a (2 nodes), b (1 node)");
  // Three nodes in all, but no three of one revision.
  CHECK(refused(RequestLease{0, 3, "", 3600000, PriorityClass::experiment}) ==
        "this lease could never be granted: 3 whole nodes of one revision asked for, but the fleet has 2 nodes of any "
        "one revision; the fleet has revisions a (2 nodes), b (1 node)");
  // What fits the fleet is taken, even when it has to wait: nodes that are down may come back.
  h.submit("dev", Role::developer, smoke(8, "b"), 30);
  const Body lease = h.client("dev", Role::developer, RequestLease{0, 2, "a", 3600000, PriorityClass::experiment}, 30);
  CHECK_FALSE(std::holds_alternative<ErrorReply>(lease));
}

TEST_CASE("a job whose workload no agent declares is refused at submit, listing what they declare") {
  Harness h;
  h.agent("p1", "n01", hello("n01", "a"), 10);
  Hello other = hello("n02", "b");
  other.workloads = {"bert-large", "smoke"};
  h.agent("p2", "n02", other, 10);
  SubmitJob unknown = smoke(1);
  unknown.workload = "llama-70b";
  const Body reply = h.client("dev", Role::developer, unknown, 20);
  REQUIRE(std::holds_alternative<ErrorReply>(reply));
  CHECK(std::get<ErrorReply>(reply).code == "invalid_argument");
  CHECK(std::get<ErrorReply>(reply).message ==
        "this job could never start: no agent declares workload 'llama-70b'; the agents declare bert-large, model, "
        "sleep, smoke");
  // One node declaring it is enough, whatever its revision; diagnostics are built in.
  SubmitJob declared = smoke(1);
  declared.workload = "bert-large";
  CHECK_FALSE(std::holds_alternative<ErrorReply>(h.client("dev", Role::developer, declared, 30)));

  // After a restart the nodes' workloads are unknown until their agents say hello again: nothing
  // is refused for a workload meanwhile.
  Harness restarted({}, h.store(), 40);
  CHECK_FALSE(std::holds_alternative<ErrorReply>(restarted.client("dev", Role::developer, unknown, 40)));
  restarted.agent("p3", "n01", hello("n01", "a"), 50);
  restarted.agent("p4", "n02", other, 50);
  CHECK(std::holds_alternative<ErrorReply>(restarted.client("dev", Role::developer, unknown, 60)));
}

TEST_CASE("a silent node is lost and its jobs fail over; with no attempts left the job is lost") {
  Harness h;
  h.agent("p1", "n01", hello("n01", "a"), 0);
  h.client("dev", Role::developer, smoke(1, "", 1), 10);
  const auto id = std::get<JobAccepted>(h.last_client_reply()).job_id;
  REQUIRE(h.core.jobs().at(id).summary.node_id == "n01");
  h.core.on_tick(3000);
  h.drain();
  CHECK(h.core.nodes().at("n01").summary.state == NodeState::up);
  auto deadline = h.core.next_deadline();
  REQUIRE(deadline.has_value());
  CHECK(*deadline == 4001);
  h.core.on_tick(4001);
  h.drain();
  CHECK(h.core.nodes().at("n01").summary.state == NodeState::lost);
  CHECK(h.core.jobs().at(id).summary.state == JobState::lost);
}

TEST_CASE("after the coordinator's loop stalled, no node is lost for its silence meanwhile") {
  CoordinatorKnobs knobs;
  knobs.restart_grace_ms = 20000;
  Harness h(knobs);
  h.agent("p1", "n01", hello("n01", "a"), 0);
  h.client("dev", Role::developer, smoke(1, "", 1), 10);
  const auto id = std::get<JobAccepted>(h.last_client_reply()).job_id;
  const JobState dispatched = h.core.jobs().at(id).summary.state;
  // A pause shorter than the liveness timeout (4 s): a fresh liveness window from the resume.
  h.core.on_resumed(3500, 3000);
  h.core.on_tick(5000);
  h.drain();
  CHECK(h.core.nodes().at("n01").summary.state == NodeState::up);
  CHECK(*h.core.next_deadline() == 7501);
  // The loop did not run from 1000 to 9000 (twice the liveness timeout): the agent gave up on the
  // coordinator and may be in reconnect backoff, so it has the restart grace.
  h.core.on_resumed(9000, 8000);
  h.core.on_tick(13001);
  h.drain();
  CHECK(h.core.nodes().at("n01").summary.state == NodeState::up);
  CHECK(h.core.jobs().at(id).summary.state == dispatched);
  CHECK(*h.core.next_deadline() == 29001);
  // Silent through all of it, it is lost as ever.
  h.core.on_tick(29001);
  h.drain();
  CHECK(h.core.nodes().at("n01").summary.state == NodeState::lost);
}

TEST_CASE("a lost attempt is requeued to another node while attempts remain") {
  Harness h;
  h.agent("p1", "n01", hello("n01", "a"), 0);
  h.client("dev", Role::developer, smoke(8, "a", 2), 10);
  const auto id = std::get<JobAccepted>(h.last_client_reply()).job_id;
  h.agent("p2", "n02", hello("n02", "a"), 3000);
  h.core.on_tick(4500);
  h.drain();
  const auto& job = h.core.jobs().at(id);
  CHECK(job.summary.node_id == "n02");
  CHECK(job.summary.attempt == 2);
  CHECK(job.summary.state == JobState::assigned);
  // A late result from the first attempt changes nothing but is still acknowledged.
  JobFinished late;
  late.job_id = id;
  late.attempt = 1;
  late.outcome = JobOutcome::failed;
  h.agent("p2", "n02", Heartbeat{}, 4600);
  h.core.on_agent_message("p1", Caller{"n01", Role::agent}, make_envelope(late, 99), 4700);
  h.drain();
  CHECK(h.core.jobs().at(id).summary.state == JobState::assigned);
}

TEST_CASE("re-registration reconciles: unknown jobs are cancelled, vanished ones failed over") {
  Harness h;
  h.agent("p1", "n01", hello("n01", "a"), 0);
  h.client("dev", Role::developer, smoke(1, "", 1), 10);
  const auto id = std::get<JobAccepted>(h.last_client_reply()).job_id;
  // The agent restarted: new connection, it runs an unknown job 77 and not ours.
  h.agent("p1b", "n01", hello("n01", "a", {77}), 500);
  auto welcome = h.agent_bodies<Welcome>("p1b");
  REQUIRE(welcome.size() == 1);
  CHECK(welcome[0].cancel_jobs == std::vector<std::uint64_t>{77});
  CHECK(h.core.jobs().at(id).summary.state == JobState::lost);
  // The old connection has no session any more.
  h.agent("p1", "n01", Heartbeat{}, 600);
  auto errors = h.agent_bodies<ErrorReply>("p1");
  REQUIRE_FALSE(errors.empty());
  CHECK(errors.back().code == "not_registered");
}

TEST_CASE("a coordinator restarted from its store keeps jobs and waits for agents to return") {
  Snapshot snapshot;
  {
    Harness h;
    h.agent("p1", "n01", hello("n01", "a"), 0);
    h.client("dev", Role::developer, smoke(2), 10);
    h.client("dev", Role::developer, smoke(8, "a"), 20);  // does not fit beside the first: queued
    std::map<std::uint64_t, JobRecord> latest;
    for (auto& j : h.saved_jobs) latest[j.summary.job_id] = j;
    for (auto& [id, j] : latest) snapshot.jobs.push_back(j);
    snapshot.nodes.push_back(h.core.nodes().at("n01"));
  }
  Harness h(CoordinatorKnobs{}, snapshot, 100000);
  CHECK(h.core.jobs().size() == 2);
  CHECK(h.core.jobs().at(1).summary.state == JobState::assigned);
  CHECK(h.core.jobs().at(2).summary.state == JobState::queued);
  h.agent("p9", "n01", hello("n01", "a", {1}), 100500);
  CHECK(h.core.jobs().at(1).summary.state == JobState::running);
  // New ids continue after the recovered ones.
  h.client("dev", Role::developer, smoke(1), 100600);
  CHECK(std::get<JobAccepted>(h.last_client_reply()).job_id == 3);
}

TEST_CASE("requests are authorized by role") {
  Harness h;
  h.agent("p1", "n01", hello("n01", "a"), 0);
  SUBCASE("a developer may not drain a node") {
    h.client("dev", Role::developer, DrainNode{"n01", true, "x"}, 1);
    REQUIRE(std::holds_alternative<ErrorReply>(h.last_client_reply()));
    CHECK(std::get<ErrorReply>(h.last_client_reply()).code == "unauthorized");
    h.client("ops1", Role::ops, DrainNode{"n01", true, "suspect"}, 2);
    CHECK(std::holds_alternative<Ok>(h.last_client_reply()));
    CHECK(h.core.nodes().at("n01").summary.state == NodeState::draining);
  }
  SUBCASE("a developer may not submit CI work, CI may") {
    auto s = smoke();
    s.priority_class = PriorityClass::presubmit;
    h.client("dev", Role::developer, s, 1);
    CHECK(std::get<ErrorReply>(h.last_client_reply()).code == "unauthorized");
    h.client("ci", Role::ci, s, 2);
    CHECK(std::holds_alternative<JobAccepted>(h.last_client_reply()));
  }
  SUBCASE("only the submitter or ops cancels a job") {
    h.client("alice", Role::developer, smoke(), 1);
    const auto id = std::get<JobAccepted>(h.last_client_reply()).job_id;
    h.client("bob", Role::developer, CancelJob{id}, 2);
    CHECK(std::get<ErrorReply>(h.last_client_reply()).code == "unauthorized");
    h.client("alice", Role::developer, CancelJob{id}, 3);
    CHECK(std::holds_alternative<Ok>(h.last_client_reply()));
    CHECK(h.agent_bodies<JobCancel>("p1").size() == 1);
  }
  SUBCASE("an agent key registers only as its own node") {
    h.agent("p7", "n07", hello("n01", "a"), 1);
    auto errors = h.agent_bodies<ErrorReply>("p7");
    REQUIRE(errors.size() == 1);
    CHECK(errors[0].code == "unauthorized");
  }
}

TEST_CASE("a failing health report quarantines a node until diagnostics pass on it") {
  Harness h;
  h.agent("p1", "n01", hello("n01", "a"), 0);
  HealthReport report;
  report.verdict = HealthStatus::fail;
  report.checks.push_back(HealthCheck{"ecc", 3, HealthStatus::fail, "ecc_uncorrected", "memory", "12 uncorrected",
                                      "drain and run level 3 diagnostics"});
  h.agent("p1", "n01", report, 10);
  const auto& node = h.core.nodes().at("n01");
  CHECK(node.summary.state == NodeState::quarantined);
  CHECK(node.summary.quarantine_owner == "lab");
  CHECK(node.summary.quarantine_reason.find("ecc chip 3 fail: ecc_uncorrected") != std::string::npos);

  // Regular work waits; a developer may not run diagnostics; a lab engineer may.
  h.client("dev", Role::developer, smoke(1), 20);
  CHECK(h.agent_bodies<JobStart>("p1").empty());
  SubmitJob diag;
  diag.workload = std::string(kDiagWorkload);
  diag.args = {"--level", "2"};
  diag.node_id = "n01";
  h.client("dev", Role::developer, diag, 30);
  CHECK(std::get<ErrorReply>(h.last_client_reply()).code == "unauthorized");
  h.client("lab1", Role::lab, diag, 40);
  const auto diag_id = std::get<JobAccepted>(h.last_client_reply()).job_id;
  auto starts = h.agent_bodies<JobStart>("p1");
  REQUIRE(starts.size() == 1);
  CHECK(starts[0].job_id == diag_id);
  CHECK(starts[0].chip_indices.size() == 8);

  // A level 1 pass is not enough to return; level 2 is.
  JobFinished fin;
  fin.job_id = diag_id;
  fin.outcome = JobOutcome::succeeded;
  fin.result = R"({"level": 2, "verdict": "pass", "checks": []})";
  h.agent("p1", "n01", fin, 50);
  CHECK(h.core.nodes().at("n01").summary.state == NodeState::up);
  // The waiting job now runs.
  CHECK(h.agent_bodies<JobStart>("p1").size() == 2);
}

TEST_CASE("a node with diagnostics queued drains first: it takes no new regular work") {
  Harness h;
  h.agent("p1", "n01", hello("n01", "a"), 0);
  h.client("dev", Role::developer, smoke(4), 1);
  const auto busy = std::get<JobAccepted>(h.last_client_reply()).job_id;
  SubmitJob diag;
  diag.workload = std::string(kDiagWorkload);
  diag.node_id = "n01";
  h.client("lab1", Role::lab, diag, 2);
  h.client("dev", Role::developer, smoke(1), 3);
  CHECK(h.agent_bodies<JobStart>("p1").size() == 1);  // only the first job
  JobFinished fin;
  fin.job_id = busy;
  fin.outcome = JobOutcome::succeeded;
  h.agent("p1", "n01", fin, 4);
  auto starts = h.agent_bodies<JobStart>("p1");
  REQUIRE(starts.size() == 2);
  CHECK(starts[1].workload == "kiln.diag");
}

namespace {

// n01 registers and an operator installs on it: the install job's id.
std::uint64_t install_on_n01(Harness& h) {
  h.agent("p1", "n01", hello("n01", "a"), 0);
  SubmitJob install;
  install.workload = std::string(kInstallWorkload);
  install.node_id = "n01";
  h.client("ops1", Role::ops, install, 1);
  return std::get<JobAccepted>(h.last_client_reply()).job_id;
}

}  // namespace

TEST_CASE("an install that leaves the node unfit for work quarantines it") {
  Harness h;
  JobFinished fin;
  fin.job_id = install_on_n01(h);
  fin.outcome = JobOutcome::failed;
  fin.exit_code = 2;
  fin.result = R"({"outcome": "rollback_failed", "fit_for_work": false, "reason": "chip 2 did not roll back"})";
  h.agent("p1", "n01", fin, 2);
  const auto& node = h.core.nodes().at("n01");
  CHECK(node.summary.state == NodeState::quarantined);
  CHECK(node.summary.quarantine_owner == "ops");
  CHECK(node.summary.quarantine_reason.find("chip 2 did not roll back") != std::string::npos);
}

TEST_CASE("an install report with members of the wrong type is no report; long multi-byte reasons stay valid UTF-8") {
  Harness h;
  JobFinished fin;
  fin.job_id = install_on_n01(h);
  fin.outcome = JobOutcome::succeeded;
  fin.result = R"({"fit_for_work": "yes", "reason": 7})";  // a node's report, not to be trusted
  h.agent("p1", "n01", fin, 2);
  const auto& node = h.core.nodes().at("n01");
  CHECK(node.summary.state == NodeState::quarantined);
  CHECK(node.summary.quarantine_reason.find("no install report") != std::string::npos);

  h.agent("p2", "n02", hello("n02", "a"), 3);
  HealthReport report;
  report.verdict = HealthStatus::fail;
  std::string wide;
  while (wide.size() < protocol::kMessageText.max_len) wide += "\xC3\xA9";  // two bytes a character
  report.checks.push_back(HealthCheck{"ecc", 1, HealthStatus::fail, "ecc_uncorrected", "memory", wide, "drain"});
  h.agent("p2", "n02", report, 4);
  const auto& reported = h.core.nodes().at("n02").summary;
  CHECK(reported.state == NodeState::quarantined);
  CHECK(reported.quarantine_reason.size() <= protocol::kMessageText.max_len);
  CHECK(text::is_valid_utf8(reported.quarantine_reason));
  CHECK(text::is_valid_utf8(reported.health_detail));
}

TEST_CASE("CI jobs that failed on a node before its quarantine are rerun on a healthy node of its revision") {
  Harness h;
  h.agent("p1", "n01", hello("n01", "a"), 0);
  auto presubmit = smoke(1, "a");
  presubmit.priority_class = PriorityClass::presubmit;
  h.client("ci", Role::ci, presubmit, 1);
  const auto id = std::get<JobAccepted>(h.last_client_reply()).job_id;
  REQUIRE(h.core.jobs().at(id).summary.node_id == "n01");
  JobFinished fin;
  fin.job_id = id;
  fin.outcome = JobOutcome::failed;
  fin.exit_code = 1;
  h.agent("p1", "n01", fin, 2);
  // An experiment that failed there is the developer's business, not rerun.
  h.client("dev", Role::developer, smoke(1, "a"), 3);
  const auto experiment = std::get<JobAccepted>(h.last_client_reply()).job_id;
  JobFinished fin2 = fin;
  fin2.job_id = experiment;
  h.agent("p1", "n01", fin2, 4);

  h.agent("p2", "n02", hello("n02", "a"), 5);
  h.agent("p1", "n01", failing_probe(), 6);
  REQUIRE(h.core.nodes().at("n01").summary.state == NodeState::quarantined);
  const auto& original = h.core.jobs().at(id);
  REQUIRE(original.rerun_job_id != 0);
  const auto& rerun = h.core.jobs().at(original.rerun_job_id);
  CHECK(rerun.rerun_of == id);
  CHECK(rerun.summary.node_id == "n02");
  CHECK(rerun.summary.hardware_revision == "a");
  CHECK(rerun.summary.detail.find("rerun of job") != std::string::npos);
  CHECK(h.core.jobs().at(experiment).rerun_job_id == 0);
}

TEST_CASE("a node quarantined twice within the flap window returns only after level 3 diagnostics") {
  Harness h;
  h.agent("p1", "n01", hello("n01", "a"), 0);
  SubmitJob diag;
  diag.workload = std::string(kDiagWorkload);
  diag.node_id = "n01";

  h.agent("p1", "n01", failing_probe(), 10);
  h.client("lab1", Role::lab, diag, 20);
  h.agent("p1", "n01", diag_result(std::get<JobAccepted>(h.last_client_reply()).job_id, 2), 30);
  REQUIRE(h.core.nodes().at("n01").summary.state == NodeState::up);

  h.agent("p1", "n01", failing_probe(), 40);
  const auto& node = h.core.nodes().at("n01");
  REQUIRE(node.summary.state == NodeState::quarantined);
  CHECK(node.summary.quarantine_reason.find("flapping") != std::string::npos);
  h.client("lab1", Role::lab, diag, 50);
  h.agent("p1", "n01", diag_result(std::get<JobAccepted>(h.last_client_reply()).job_id, 2), 60);
  CHECK(h.core.nodes().at("n01").summary.state == NodeState::quarantined);
  h.client("lab1", Role::lab, diag, 70);
  h.agent("p1", "n01", diag_result(std::get<JobAccepted>(h.last_client_reply()).job_id, 3), 80);
  CHECK(h.core.nodes().at("n01").summary.state == NodeState::up);
}

TEST_CASE("a release window booked ahead holds its node; only work that ends before it backfills") {
  Harness h;
  h.agent("p1", "n01", hello("n01", "a"), 0);
  RequestLease window;
  window.chips = 0;
  window.nodes = 1;
  window.hardware_revision = "a";
  window.duration_ms = 8 * 3600 * 1000;
  window.priority_class = PriorityClass::release;
  window.start_at_ms = 3600 * 1000;  // one hour from now
  h.client("ci", Role::ci, window, 0);
  REQUIRE(std::holds_alternative<LeasePending>(h.last_client_reply()));

  auto long_job = smoke(8, "a");
  long_job.timeout_ms = 2 * 3600 * 1000;  // would still run when the window opens
  h.client("dev", Role::developer, long_job, 1);
  const auto blocked = std::get<JobAccepted>(h.last_client_reply()).job_id;
  auto short_job = smoke(8, "a");
  short_job.timeout_ms = 10 * 60 * 1000;  // ends well before it
  h.client("dev", Role::developer, short_job, 2);
  const auto backfilled = std::get<JobAccepted>(h.last_client_reply()).job_id;
  CHECK(h.core.jobs().at(blocked).summary.state == JobState::queued);
  CHECK(h.core.jobs().at(backfilled).summary.state == JobState::assigned);

  window.start_at_ms = 1;  // in the past
  h.client("ci", Role::ci, window, 10);
  CHECK(std::get<ErrorReply>(h.last_client_reply()).code == "invalid_argument");
}

TEST_CASE("a CI job failing on a node that is quarantined while it runs is rerun, as one that failed before is") {
  Harness h;
  h.agent("p1", "n01", hello("n01", "a"), 0);
  auto presubmit = smoke(1, "a");
  presubmit.priority_class = PriorityClass::presubmit;
  const auto id = h.submit("ci", Role::ci, presubmit, 1);
  REQUIRE(h.job(id).summary.node_id == "n01");
  h.agent("p1", "n01", JobStarted{id, 1}, 1);
  h.agent("p2", "n02", hello("n02", "a"), 2);
  JobFinished fin;
  fin.job_id = id;
  fin.attempt = 1;
  fin.outcome = JobOutcome::failed;
  fin.exit_code = 1;
  SUBCASE("the job fails first, then the node is quarantined") {
    h.agent("p1", "n01", fin, 3);
    h.agent("p1", "n01", failing_probe(), 4);
  }
  SUBCASE("the node is quarantined first, then the job fails") {
    h.agent("p1", "n01", failing_probe(), 3);
    REQUIRE(h.job(id).summary.state == JobState::running);
    h.agent("p1", "n01", fin, 4);
  }
  REQUIRE(h.core.nodes().at("n01").summary.state == NodeState::quarantined);
  CHECK(h.job(id).summary.state == JobState::failed);
  REQUIRE(h.job(id).rerun_job_id != 0);
  const auto& rerun = h.job(h.job(id).rerun_job_id);
  CHECK(rerun.rerun_of == id);
  CHECK(rerun.summary.node_id == "n02");
  // Rerun once: the rerun failing too on a quarantined node is not rerun again.
  std::size_t reruns = 0;
  for (const auto& [job_id, job] : h.core.jobs()) reruns += job.rerun_of == id ? 1 : 0;
  CHECK(reruns == 1);
}

TEST_CASE("a failing probe measured before the diagnostics that released a node neither quarantines it nor makes "
          "it flap") {
  Harness h;
  h.agent("p1", "n01", hello("n01", "a"), 0);
  HealthReport measured_early = failing_probe();
  measured_early.measured_at_ms = 1000;
  h.agent("p1", "n01", measured_early, 1000);
  REQUIRE(h.core.nodes().at("n01").summary.state == NodeState::quarantined);
  SubmitJob diag;
  diag.workload = std::string(kDiagWorkload);
  diag.node_id = "n01";
  const auto diag_job = h.submit("lab1", Role::lab, diag, 2000);  // starts at 2000, after the repair
  HealthReport stale = failing_probe();
  stale.measured_at_ms = 1500;  // during the fault, before the diagnostics began
  SUBCASE("the stale report arrives after the diagnostics passed") {
    h.agent("p1", "n01", diag_result(diag_job, 2), 3000);
    h.agent("p1", "n01", stale, 3100);
  }
  SUBCASE("the stale report arrives before the diagnostics passed") {
    h.agent("p1", "n01", stale, 2900);
    h.agent("p1", "n01", diag_result(diag_job, 2), 3000);
  }
  CHECK(h.core.nodes().at("n01").summary.state == NodeState::up);
  CHECK(h.core.nodes().at("n01").recent_quarantines == 1);
  // A failure measured after the diagnostics began is the node's again.
  HealthReport fresh = failing_probe();
  fresh.measured_at_ms = 4000;
  h.agent("p1", "n01", fresh, 4000);
  CHECK(h.core.nodes().at("n01").summary.state == NodeState::quarantined);
}

TEST_CASE("a failing probe measured before the repair stays stale after a coordinator restart") {
  Snapshot stored;
  {
    Harness h;
    h.agent("p1", "n01", hello("n01", "a"), 0);
    HealthReport measured_early = failing_probe();
    measured_early.measured_at_ms = 1000;
    h.agent("p1", "n01", measured_early, 1000);
    SubmitJob diag;
    diag.workload = std::string(kDiagWorkload);
    diag.node_id = "n01";
    const auto diag_job = h.submit("lab1", Role::lab, diag, 2000);
    h.agent("p1", "n01", diag_result(diag_job, 2), 3000);
    REQUIRE(h.core.nodes().at("n01").summary.state == NodeState::up);
    stored = h.store();
  }
  Harness restarted({}, stored, 5000);
  restarted.agent("p2", "n01", hello("n01", "a"), 5100);
  HealthReport stale = failing_probe();
  stale.measured_at_ms = 1500;  // sent before the restart, delivered after it
  restarted.agent("p2", "n01", stale, 5200);
  CHECK(restarted.core.nodes().at("n01").summary.state == NodeState::up);
  CHECK(restarted.core.nodes().at("n01").recent_quarantines == 1);
}

TEST_CASE("only chips of a node's latest hello are dispatched, also after it re-registers with fewer while busy") {
  Harness h;
  h.agent("p1", "n01", hello("n01", "a"), 0);
  const auto running = h.submit("dev", Role::developer, smoke(2, "a"), 10);
  REQUIRE(h.job(running).summary.chip_indices == std::vector<std::uint32_t>{0, 1});
  // The agent restarts with chips 4 to 7 gone from its inventory, still running the job.
  Hello fewer = hello("n01", "a", {running});
  fewer.chips.resize(4);
  h.agent("p2", "n01", fewer, 20);
  CHECK(h.job(running).summary.state == JobState::running);
  CHECK(h.core.nodes().at("n01").summary.chips_total == 4);
  const auto second = h.submit("dev", Role::developer, smoke(4, "a"), 30);
  // The node now has 4 chips: an 8-chip job could never start, and is refused.
  const Body too_big = h.client("dev", Role::developer, smoke(8, "a"), 31);
  REQUIRE(std::holds_alternative<ErrorReply>(too_big));
  CHECK(std::get<ErrorReply>(too_big).message ==
        "this job could never start: 8 chips on one node asked for, but the largest node of revision a has 4 chips");
  JobFinished fin;
  fin.job_id = running;
  fin.attempt = 1;
  fin.outcome = JobOutcome::succeeded;
  h.agent("p2", "n01", fin, 40);
  CHECK(h.job(second).summary.state == JobState::assigned);
  for (const auto& start : h.agent_bodies<JobStart>("p2")) {
    for (std::uint32_t chip : start.chip_indices) CHECK(chip < 4);
  }
}

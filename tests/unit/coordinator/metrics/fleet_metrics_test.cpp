// The coordinator's /metrics from the core driven as the server drives it: the saves and audit
// lines it carries out feed FleetMetrics, and the gauges are read from the core when rendered.
#include <doctest/doctest.h>

#include "coordinator/metrics/fleet_metrics.h"
#include "tests/support/core_harness.h"
#include "tests/support/text.h"

using namespace kiln;
using namespace kiln::coordinator;
using namespace kiln::protocol;
using namespace kiln::coordinator::testing;
using kiln::testing::contains;

namespace {

// The harness as the server: every save and audit line carried out reaches the metrics, at the
// time the input that caused it was given.
struct Observed : Harness {
  explicit Observed(CoordinatorKnobs knobs = knobs_with_fast_preemption(), Snapshot snapshot = {}, Now start = 0,
                    std::map<std::string, TimeMs> quarantined = {})
      : Harness(knobs, std::move(snapshot), start), metrics(core.jobs(), core.leases(), std::move(quarantined)) {}

  FleetMetrics metrics;
  TimeMs now = 0;

  Status save_job(const JobRecord& job) override {
    metrics.job_saved(job, now);
    return Harness::save_job(job);
  }
  Status save_lease(const LeaseRecord& lease) override {
    metrics.lease_saved(lease, now);
    return Harness::save_lease(lease);
  }
  Status append_audit(const AuditEntry& entry) override {
    metrics.audited(entry);
    return Harness::append_audit(entry);
  }

  void at(TimeMs t) { now = t; }
  void from_agent(const std::string& node, Body body, TimeMs t) {
    at(t);
    agent("p-" + node, node, std::move(body), t);
  }
  std::uint64_t submitted(const std::string& key, Role role, SubmitJob job, TimeMs t) {
    at(t);
    return submit(key, role, std::move(job), t);
  }
  std::string text() const { return metrics.render(core); }
};

}  // namespace

TEST_CASE("a job's class and outcome are counted once it ends; the gauges follow the fleet") {
  Observed o;
  o.from_agent("n01", hello("n01", "a"), 0);
  o.from_agent("n02", hello("n02", "b"), 0);
  std::string text = o.text();
  CHECK(contains(text, "# TYPE kiln_agents_connected gauge\nkiln_agents_connected 2\n"));
  CHECK(contains(text, "kiln_nodes{state=\"ready\"} 2\n"));
  CHECK(contains(text, "kiln_chips{hw_revision=\"a\"} 8\nkiln_chips{hw_revision=\"b\"} 8\n"));
  CHECK(contains(text, "kiln_jobs_finished_total{class=\"presubmit\",outcome=\"succeeded\"} 0\n"));

  SubmitJob job = sleep_job(2, PriorityClass::presubmit);
  job.hardware_revision = "a";
  const auto id = o.submitted("ci", Role::ci, job, 1000);
  o.from_agent("n01", JobStarted{id, 1}, 1100);
  text = o.text();
  CHECK(contains(text, "kiln_nodes{state=\"ready\"} 1\nkiln_nodes{state=\"busy\"} 1\n"));
  CHECK(contains(text, "kiln_chips_leased{class=\"presubmit\",hw_revision=\"a\"} 2\n"));
  CHECK(contains(text, "kiln_chips_leased{class=\"presubmit\",hw_revision=\"b\"} 0\n"));
  CHECK(contains(text, "kiln_queue_wait_seconds_count{class=\"presubmit\"} 1\n"));
  CHECK(contains(text, "kiln_queue_wait_seconds_bucket{class=\"presubmit\",le=\"1\"} 1\n"));

  o.from_agent("n01", finished(id, 1, JobOutcome::succeeded), 5000);
  text = o.text();
  CHECK(contains(text, "kiln_jobs_finished_total{class=\"presubmit\",outcome=\"succeeded\"} 1\n"));
  CHECK(contains(text, "kiln_jobs_finished_total{class=\"presubmit\",outcome=\"failed\"} 0\n"));
  CHECK(contains(text, "kiln_chips_leased{class=\"presubmit\",hw_revision=\"a\"} 0\n"));
  // The same result again changes nothing.
  o.from_agent("n01", finished(id, 1, JobOutcome::succeeded), 5100);
  CHECK(contains(o.text(), "kiln_jobs_finished_total{class=\"presubmit\",outcome=\"succeeded\"} 1\n"));
}

TEST_CASE("a queued job's wait runs from its submission to its dispatch, by class") {
  Observed o;
  o.from_agent("n01", hello("n01", "a"), 0);
  const auto first = o.submitted("ci", Role::ci, sleep_job(8, PriorityClass::nightly), 1000);
  const auto second = o.submitted("ci", Role::ci, sleep_job(8, PriorityClass::nightly), 2000);
  CHECK(contains(o.text(), "kiln_jobs_queued{class=\"nightly\"} 1\n"));
  o.from_agent("n01", JobStarted{first, 1}, 2100);
  o.from_agent("n01", finished(first, 1, JobOutcome::failed), 92000);
  REQUIRE(o.job(second).summary.state == JobState::assigned);
  const std::string text = o.text();
  // 0 s for the first, 90 s for the second.
  for (const char* line : {"kiln_jobs_queued{class=\"nightly\"} 0\n",
                           "kiln_jobs_finished_total{class=\"nightly\",outcome=\"failed\"} 1\n",
                           "kiln_queue_wait_seconds_bucket{class=\"nightly\",le=\"60\"} 1\n",
                           "kiln_queue_wait_seconds_bucket{class=\"nightly\",le=\"120\"} 2\n",
                           "kiln_queue_wait_seconds_sum{class=\"nightly\"} 90\n"}) {
    CHECK_MESSAGE(contains(text, line), line);
  }
}

TEST_CASE("a preempted job counts for its class with the chip-seconds its attempt had run") {
  Observed o;
  o.from_agent("n01", hello("n01", "a"), 0);
  const auto experiment = o.submitted("dev", Role::developer, sleep_job(8, PriorityClass::experiment), 100);
  o.from_agent("n01", JobStarted{experiment, 1}, 200);
  const auto presubmit = o.submitted("ci", Role::ci, sleep_job(1, PriorityClass::presubmit), 1000);
  CHECK(contains(o.text(), "kiln_preemptions_total{class=\"experiment\"} 0\n"));
  // The workload checkpoints and lets go at 5.1 s: 8 chips had run it for 5 s.
  o.from_agent("n01", finished(experiment, 1, JobOutcome::succeeded, R"({"status": "preempted"})"), 5100);
  REQUIRE(o.job(experiment).preemptions == 1);
  const std::string text = o.text();
  CHECK(contains(text, "kiln_preemptions_total{class=\"experiment\"} 1\n"));
  CHECK(contains(text, "kiln_preemption_lost_chip_seconds_total{class=\"experiment\"} 40\n"));
  CHECK(contains(text, "kiln_preemptions_total{class=\"presubmit\"} 0\n"));
  CHECK(contains(text, "kiln_jobs_queued{class=\"experiment\"} 1\n"));
  // Its wait in the queue again runs from the requeue, not from its submission.
  o.from_agent("n01", finished(presubmit, 1, JobOutcome::succeeded), 65100);
  REQUIRE(o.job(experiment).summary.state == JobState::assigned);
  CHECK(contains(o.text(), "kiln_queue_wait_seconds_sum{class=\"experiment\"} 60\n"));
}

TEST_CASE("a developer lease preempted by CI counts with the chip-seconds it had held") {
  Observed o;
  o.from_agent("n01", hello("n01", "a"), 0);
  o.at(10);
  const LeaseSummary lease = std::get<LeaseGranted>(o.client("dev", Role::developer, lease_request(8), 10)).lease;
  CHECK(contains(o.text(), "kiln_queue_wait_seconds_count{class=\"experiment\"} 1\n"));
  CHECK(contains(o.text(), "kiln_chips_leased{class=\"experiment\",hw_revision=\"a\"} 8\n"));
  o.submitted("ci", Role::ci, sleep_job(2, PriorityClass::presubmit), 1000);
  REQUIRE(o.core.leases().at(0).state == LeaseState::preempting);
  o.at(1000 + kGraceMs);
  o.tick(1000 + kGraceMs);
  REQUIRE(o.core.leases().at(0).lease_id == lease.lease_id);
  REQUIRE(o.core.leases().at(0).state == LeaseState::pending);
  const std::string text = o.text();
  CHECK(contains(text, "kiln_preemptions_total{class=\"experiment\"} 1\n"));
  CHECK(contains(text, "kiln_preemption_lost_chip_seconds_total{class=\"experiment\"} 487.92\n"));
}

TEST_CASE("a quarantined node shows since when and why, also after a restart") {
  Observed o;
  o.from_agent("n01", hello("n01", "a"), 0);
  o.from_agent("n01", failing_probe(), 3000);
  REQUIRE(o.core.nodes().at("n01").summary.state == NodeState::quarantined);
  std::string text = o.text();
  CHECK(contains(text, "kiln_nodes{state=\"quarantined\"} 1\n"));
  CHECK(contains(text, "kiln_node_quarantined_since_timestamp_seconds{node=\"n01\",reason=\""));
  CHECK(contains(text, "link chip 0 fail: link_down"));
  CHECK(contains(text, "\"} 3\n"));

  // Restarted later, the time comes from the audit log.
  Observed restarted(knobs_with_fast_preemption(), o.store(), 50000, quarantine_times(o.audit));
  text = restarted.text();
  CHECK(contains(text, "kiln_node_quarantined_since_timestamp_seconds{node=\"n01\""));
  CHECK(contains(text, "\"} 3\n"));
  CHECK(contains(text, "kiln_agents_connected 0\n"));
  CHECK(contains(text, "kiln_chips{hw_revision=\"a\"} 8\n"));  // recovered, not lost yet
}

TEST_CASE("after a restart, ended jobs are not counted again and active ones are followed") {
  Observed before;
  before.from_agent("n01", hello("n01", "a"), 0);
  const auto done = before.submitted("ci", Role::ci, sleep_job(8, PriorityClass::nightly), 100);
  const auto waiting = before.submitted("ci", Role::ci, sleep_job(8, PriorityClass::nightly), 200);
  before.from_agent("n01", finished(done, 1, JobOutcome::succeeded), 1000);
  REQUIRE(before.job(waiting).summary.state == JobState::assigned);

  Observed after(knobs_with_fast_preemption(), before.store(), 2000);
  after.from_agent("n01", hello("n01", "a", {waiting}), 2100);
  after.from_agent("n01", finished(waiting, 1, JobOutcome::succeeded), 3000);
  const std::string text = after.text();
  CHECK(contains(text, "kiln_jobs_finished_total{class=\"nightly\",outcome=\"succeeded\"} 1\n"));
}

TEST_CASE("quarantine times are the newest quarantined line of each node") {
  std::vector<AuditEntry> lines = {{1, 1000, "coordinator", "coordinator", "quarantined", "node n01", "owner lab: x"},
                                   {2, 2000, "coordinator", "coordinator", "drained", "node n02", ""},
                                   {3, 3000, "ops", "ops", "quarantined", "node n01", "owner ops: y"},
                                   {4, 4000, "coordinator", "coordinator", "quarantined", "lease L1", ""}};
  CHECK(quarantine_times(lines) == std::map<std::string, TimeMs>{{"n01", 3000}});
}

TEST_CASE("a client's request is timed from the loop taking it to its first answer, by type") {
  Observed o;
  o.metrics.client_request_taken("peer-1", 7, "submit_job", 1'000'000);
  o.metrics.client_request_taken("peer-2", 7, "list_jobs", 1'000'100);
  // The same id from another peer is another request; a later message of the same answer, or one
  // that answers nothing asked, is not timed.
  o.metrics.client_answer_sent("peer-2", 7, 1'000'400);
  o.metrics.client_answer_sent("peer-1", 7, 1'003'000);
  o.metrics.client_answer_sent("peer-1", 7, 1'900'000);
  o.metrics.client_answer_sent("peer-3", 1, 1'900'000);
  const std::string text = o.text();
  for (const char* line : {"# TYPE kiln_client_request_seconds histogram\n",
                           "kiln_client_request_seconds_bucket{type=\"list_jobs\",le=\"0.0005\"} 1\n",
                           "kiln_client_request_seconds_count{type=\"list_jobs\"} 1\n",
                           "kiln_client_request_seconds_bucket{type=\"submit_job\",le=\"0.0025\"} 0\n",
                           "kiln_client_request_seconds_bucket{type=\"submit_job\",le=\"0.005\"} 1\n",
                           "kiln_client_request_seconds_sum{type=\"submit_job\"} 0.003\n",
                           "kiln_client_request_seconds_count{type=\"submit_job\"} 1\n"}) {
    CHECK_MESSAGE(contains(text, line), line);
  }
}

TEST_CASE("each group commit of the store is timed, and the family is there before the first") {
  Observed o;
  CHECK(contains(o.text(), "# TYPE kiln_store_commit_seconds histogram\n"));
  CHECK(contains(o.text(), "kiln_store_commit_seconds_count 0\n"));
  o.metrics.store_committed(100);
  o.metrics.store_committed(3'000);
  const std::string text = o.text();
  for (const char* line : {"kiln_store_commit_seconds_bucket{le=\"0.0001\"} 1\n",
                           "kiln_store_commit_seconds_bucket{le=\"0.0025\"} 1\n",
                           "kiln_store_commit_seconds_bucket{le=\"0.005\"} 2\n",
                           "kiln_store_commit_seconds_bucket{le=\"+Inf\"} 2\n", "kiln_store_commit_seconds_sum 0.0031\n",
                           "kiln_store_commit_seconds_count 2\n"}) {
    CHECK_MESSAGE(contains(text, line), line);
  }
}

TEST_CASE("a request never answered is forgotten after a minute, and does not time a later one") {
  Observed o;
  o.metrics.client_request_taken("peer-1", 1, "cancel_job", 0);
  // A minute and more later, the next request taken forgets it: an answer to it is not timed.
  o.metrics.client_request_taken("peer-2", 1, "list_jobs", kForgetUnansweredUs + 1);
  o.metrics.client_answer_sent("peer-1", 1, kForgetUnansweredUs + 2);
  o.metrics.client_answer_sent("peer-2", 1, kForgetUnansweredUs + 3);
  const std::string text = o.text();
  CHECK_FALSE(contains(text, "type=\"cancel_job\""));
  CHECK(contains(text, "kiln_client_request_seconds_count{type=\"list_jobs\"} 1\n"));
}

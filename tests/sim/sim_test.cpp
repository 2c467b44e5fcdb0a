#include <doctest/doctest.h>

#include <algorithm>
#include <string>

#include "sim/cluster/cluster_sim.h"

using namespace kiln;
using namespace kiln::sim::cluster;
using protocol::JobState;

namespace {

// A small quiet cluster for focused scenarios: no random faults, no random submissions,
// default knobs; the scenario schedules what happens.
SimOptions scenario_options(std::size_t nodes = 2) {
  SimOptions o;
  o.seed = 42;
  o.shape.nodes = nodes;
  o.shape.revisions.assign(nodes, "a");
  o.workload.clients = 2;  // ci-0, dev-1
  o.workload.submits_per_minute = 0;
  o.workload.job_failure_probability = 0;
  o.quiet_tail_max_ms = 10 * kMinuteMs;
  o.record_log = true;
  return o;
}

protocol::SubmitJob job(DurationMs duration_ms, std::uint32_t max_attempts, std::uint32_t chips = 4) {
  protocol::SubmitJob s;
  s.workload = "smoke";
  s.chips = chips;
  s.priority_class = protocol::PriorityClass::presubmit;
  s.max_attempts = max_attempts;
  s.timeout_ms = 600000;
  s.args = {"sim.duration_ms=" + std::to_string(duration_ms)};
  return s;
}

coordinator::JobRecord stored_job(const Simulation& sim, std::uint64_t id) {
  for (const auto& j : sim.store().jobs) {
    if (j.summary.job_id == id) return j;
  }
  FAIL("job " << id << " is not in the store");
  return {};
}

std::string where(const Simulation& sim) {
  std::string text = sim.violation() ? sim.violation()->describe() : "no violation";
  const auto& log = sim.log();
  const std::size_t from = log.size() > 40 ? log.size() - 40 : 0;
  for (std::size_t i = from; i < log.size(); ++i) text += "\n" + log[i];
  return text;
}

}  // namespace

TEST_CASE("a short sweep of seeds holds every invariant") {
  // The long sweep is scripts/sim-sweep; this one keeps ctest fast.
  for (std::uint64_t seed = 1; seed <= 100; ++seed) {
    const RunSummary summary = run_seed(seed, 2 * kMinuteMs);
    INFO(summary.describe());
    CHECK_FALSE(summary.violation.has_value());
    CHECK(summary.steps > 0);
  }
}

TEST_CASE("two runs of one seed produce the same log, line for line") {
  std::vector<std::string> first;
  std::vector<std::string> second;
  const RunSummary a = run_seed(7, 2 * kMinuteMs, true, &first);
  const RunSummary b = run_seed(7, 2 * kMinuteMs, true, &second);
  REQUIRE(first.size() > 100);
  CHECK(first == second);
  CHECK(a.log_digest == b.log_digest);
  CHECK(a.steps == b.steps);
  // Recording the log does not change the run.
  CHECK(run_seed(7, 2 * kMinuteMs).log_digest == a.log_digest);
  CHECK(run_seed(8, 2 * kMinuteMs).log_digest != a.log_digest);
}

TEST_CASE("the seed decides the cluster shape, knobs and fault rates") {
  const SimOptions a = options_from_seed(3);
  const SimOptions b = options_from_seed(3);
  CHECK(a.shape.nodes == b.shape.nodes);
  CHECK(a.shape.revisions == b.shape.revisions);
  CHECK(a.faults.network.loss_probability == b.faults.network.loss_probability);
  bool shapes_differ = false;
  for (std::uint64_t seed = 4; seed < 20; ++seed) shapes_differ |= options_from_seed(seed).shape.nodes != a.shape.nodes;
  CHECK(shapes_differ);
}

TEST_CASE("a violated invariant reports the seed, the step, the time and the invariant") {
  SimOptions o = scenario_options();
  o.quiet_tail_max_ms = 5000;  // far shorter than the job
  Simulation sim(o);
  sim.submit(1000, 0, job(5 * kMinuteMs, 1));
  sim.run_until(2000);
  sim.run_quiet_tail();
  REQUIRE(sim.violation().has_value());
  const Violation& v = *sim.violation();
  CHECK(v.seed == 42);
  CHECK(v.step > 0);
  CHECK(v.time_ms >= 7000);
  CHECK(v.invariant.find("job 1 is still running") != std::string::npos);
  CHECK(v.describe().find("--seed=42") != std::string::npos);
}

TEST_CASE("the coordinator restarts mid-job from its store and the job finishes on its first attempt") {
  Simulation sim(scenario_options());
  sim.submit(1000, 0, job(20000, 1));
  sim.crash_coordinator(6000, 3000);
  sim.run_until(7000);
  CHECK(sim.coordinator() == nullptr);
  sim.run_until(60000);
  sim.run_quiet_tail();
  REQUIRE_MESSAGE(!sim.violation(), where(sim));
  REQUIRE(sim.accepted_jobs() == std::vector<std::uint64_t>{1});
  const auto j = stored_job(sim, 1);
  CHECK(j.summary.state == JobState::succeeded);
  CHECK(j.summary.attempt == 1);
  CHECK(sim.summary().coordinator_crashes == 1);
  CHECK(sim.acknowledged_results() == 1);
}

TEST_CASE("an agent crashes mid-job: the job is retried elsewhere while it has attempts left") {
  Simulation sim(scenario_options());
  sim.submit(1000, 0, job(20000, 2, 8));
  sim.run_until(3000);
  const std::string first_node = stored_job(sim, 1).summary.node_id;
  REQUIRE_FALSE(first_node.empty());
  const std::size_t node = first_node == sim.node_id(0) ? 0 : 1;
  sim.crash_agent(5000, node, 2000);  // back before its liveness timeout: its hello reports no job
  sim.run_until(90000);
  sim.run_quiet_tail();
  REQUIRE_MESSAGE(!sim.violation(), where(sim));
  const auto j = stored_job(sim, 1);
  CHECK(j.summary.state == JobState::succeeded);
  CHECK(j.summary.attempt == 2);
}

TEST_CASE("an agent crashes mid-job with no attempts left: the job ends lost, once the node is silent") {
  Simulation sim(scenario_options());
  sim.submit(1000, 0, job(20000, 1, 8));
  sim.run_until(3000);
  const std::size_t node = stored_job(sim, 1).summary.node_id == sim.node_id(0) ? 0 : 1;
  sim.crash_agent(5000, node, 30000);  // down far past the liveness timeout
  sim.run_until(12000);
  CHECK(stored_job(sim, 1).summary.state == JobState::lost);
  sim.run_quiet_tail();
  REQUIRE_MESSAGE(!sim.violation(), where(sim));
  CHECK(stored_job(sim, 1).summary.state == JobState::lost);
  CHECK(stored_job(sim, 1).summary.attempt == 1);
}

TEST_CASE("a partitioned node loses its job to another node, and is cleaned up when it heals") {
  Simulation sim(scenario_options());
  sim.submit(1000, 0, job(30000, 2, 8));
  sim.run_until(3000);
  const std::size_t node = stored_job(sim, 1).summary.node_id == sim.node_id(0) ? 0 : 1;
  sim.partition(5000, node, 15000);
  sim.run_until(15000);
  const auto during = stored_job(sim, 1);
  CHECK(during.summary.attempt == 2);
  CHECK(during.summary.node_id == sim.node_id(1 - node));
  sim.run_until(25000);
  REQUIRE(sim.coordinator() != nullptr);
  CHECK(sim.coordinator()->nodes().at(sim.node_id(node)).summary.state == protocol::NodeState::up);
  sim.run_quiet_tail();
  REQUIRE_MESSAGE(!sim.violation(), where(sim));
  CHECK(stored_job(sim, 1).summary.state == JobState::succeeded);
  CHECK(sim.summary().partitions == 1);
}

TEST_CASE("duplicated job_finished messages are acknowledged and change nothing") {
  SimOptions o = scenario_options();
  o.faults.network.always_duplicate_types = {"job_finished"};
  Simulation sim(o);
  for (int i = 0; i < 3; ++i) sim.submit(1000 + i * 100, 0, job(5000 + i * 1000, 1, 2));
  sim.run_until(30000);
  sim.run_quiet_tail();
  REQUIRE_MESSAGE(!sim.violation(), where(sim));
  CHECK(sim.summary().messages_duplicated >= 3);
  for (std::uint64_t id = 1; id <= 3; ++id) {
    CHECK(stored_job(sim, id).summary.state == JobState::succeeded);
    CHECK(stored_job(sim, id).summary.attempt == 1);
  }
  CHECK(sim.acknowledged_results() == 3);
}

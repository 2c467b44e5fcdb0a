// Rollouts in the pure core: nodes of an environment converge on its bundle's driver and firmware
// through kiln.install jobs, one canary first, then waves; a failure quarantines its node and stops the
// rollout, also across a coordinator restart.
#include <doctest/doctest.h>

#include <algorithm>
#include <memory>

#include "coordinator/core/coordinator_core.h"
#include "tests/support/core_harness.h"

using namespace kiln;
using namespace kiln::coordinator;
using namespace kiln::protocol;
using namespace kiln::coordinator::testing;

namespace {

const std::string kBundle(64, 'b');
const std::string kFirmware(64, 'f');
const std::string kDriver(64, 'd');

DesiredFleet staging(std::vector<std::string> nodes, std::string blocked = "") {
  DesiredEnvironment env;
  env.name = "staging";
  env.bundle_id = kBundle;
  env.firmware = DesiredPackage{"2.0", kFirmware, 4096};
  env.nodes = std::move(nodes);
  env.blocked = std::move(blocked);
  return DesiredFleet{"/srv/environments", std::string(40, 'c'), {env}};
}

// Nodes stay alive through the test without heartbeats.
CoordinatorKnobs quiet_knobs() {
  CoordinatorKnobs knobs;
  knobs.heartbeat_interval_ms = 60000;
  return knobs;
}

// The install jobs a rollout asked for, in order.
std::vector<JobRecord> installs(const Harness& h) {
  std::vector<JobRecord> out;
  for (const auto& [id, job] : h.core.jobs()) {
    if (job.summary.submitted_by == kRolloutSubmitter) out.push_back(job);
  }
  return out;
}

// Ends an install job as the agent reports it: the driver or firmware of the job's --kind.
void finish_install(Harness& h, const std::string& peer, const JobRecord& job, bool installed, Now now) {
  JobFinished fin;
  fin.job_id = job.summary.job_id;
  fin.attempt = job.summary.attempt;
  fin.outcome = installed ? JobOutcome::succeeded : JobOutcome::failed;
  const bool driver = job.summary.args.at(1) == "driver";
  fin.exit_code = installed ? 0 : driver ? 2 : 1;
  if (driver) {
    fin.result = installed ? R"({"kind": "driver", "version": "r2", "outcome": "installed", "fit_for_work": true})"
                           : R"json({"kind": "driver", "version": "r2", "outcome": "quarantined", "fit_for_work": false,
                                "reason": "the driver installer for r2 failed (exit code 3)"})json";
  } else {
    fin.result = installed ? R"({"kind": "firmware", "version": "2.0", "outcome": "installed", "fit_for_work": true})"
                           : R"({"kind": "firmware", "version": "2.0", "outcome": "rolled_back", "fit_for_work": true,
                                "reason": "the new firmware failed its check; every chip runs 1.0 again"})";
  }
  h.agent(peer, job.summary.node_id, fin, now);
}

// Two nodes on firmware 1.0 and no driver version; staging pins driver r2 and firmware 2.0.
void pin_driver_on_two_nodes(Harness& h) {
  h.agent("p1", "n01", hello("n01", "a"), 0);
  h.agent("p2", "n02", hello("n02", "a"), 0);
  DesiredFleet fleet = staging({"n01", "n02"});
  fleet.environments[0].driver = DesiredPackage{"r2", kDriver, 2048};
  h.core.on_desired_environments(fleet, 10);
  h.drain();
}

EnvironmentConvergence listed(Harness& h, Now now) {
  const Body reply = h.client("dev", Role::developer, ListEnvironments{}, now);
  REQUIRE(std::holds_alternative<EnvironmentList>(reply));
  const auto& list = std::get<EnvironmentList>(reply);
  REQUIRE(list.environments.size() == 1);
  return list.environments[0];
}

// Staging desired on n01 and n02; the canary's install on n01 fails at 2 s.
void fail_canary_on_two_nodes(Harness& h) {
  h.agent("p1", "n01", hello("n01", "a"), 0);
  h.agent("p2", "n02", hello("n02", "a"), 0);
  h.core.on_desired_environments(staging({"n01", "n02"}), 10);
  h.drain();
  REQUIRE(installs(h).size() == 1);
  finish_install(h, "p1", installs(h)[0], false, 2000);
}

// A coordinator restarted from h's store at 20 s: n01 and n02 say hello again, staging is desired
// again, and a tick at 25 s lets the rollout decide.
std::unique_ptr<Harness> restart_on_staging(const Harness& h, CoordinatorKnobs knobs) {
  auto restarted = std::make_unique<Harness>(knobs, h.store(), 20000);
  restarted->agent("p1", "n01", hello("n01", "a"), 20001);
  restarted->agent("p2", "n02", hello("n02", "a"), 20001);
  restarted->core.on_desired_environments(staging({"n01", "n02"}), 20002);
  restarted->drain();
  restarted->tick(25000);
  return restarted;
}

std::string state_of(const EnvironmentConvergence& env, const std::string& node) {
  for (const auto& n : env.nodes) {
    if (n.node_id == node) return n.state;
  }
  return "absent";
}

std::string detail_of(const EnvironmentConvergence& env, const std::string& node) {
  for (const auto& n : env.nodes) {
    if (n.node_id == node) return n.detail;
  }
  return "absent";
}

}  // namespace

TEST_CASE("an environment converges: the canary first, then the rest in waves, each install by digest") {
  CoordinatorKnobs knobs = quiet_knobs();
  knobs.rollout_wave_size = 2;
  Harness h(knobs);
  for (int i = 1; i <= 4; ++i) h.agent("p" + std::to_string(i), "n0" + std::to_string(i), hello("n0" + std::to_string(i), "a"), 0);
  h.core.on_desired_environments(staging({"n01", "n02", "n03", "n04"}), 10);
  h.drain();

  // One install, on the first node: the canary.
  auto jobs = installs(h);
  REQUIRE(jobs.size() == 1);
  CHECK(jobs[0].requested_node_id == "n01");
  CHECK(jobs[0].summary.workload == kInstallWorkload);
  CHECK(jobs[0].summary.bundle_id == kBundle);
  CHECK(jobs[0].summary.args == std::vector<std::string>{"--kind", "firmware", "--version", "2.0", "--sha256",
                                                          kFirmware, "{artifact:firmware}"});
  REQUIRE(jobs[0].artifacts.size() == 1);
  CHECK(jobs[0].artifacts[0].sha256 == kFirmware);
  CHECK(jobs[0].artifacts[0].size_bytes == 4096);
  auto env = listed(h, 11);
  CHECK(env.rollout == "canary");
  CHECK(state_of(env, "n01") == "converging");
  CHECK(state_of(env, "n02") == "drifted");

  // Nothing more while the canary runs, however often the core looks.
  h.tick(5000);
  h.tick(9000);
  CHECK(installs(h).size() == 1);

  finish_install(h, "p1", installs(h)[0], true, 10000);
  CHECK(h.core.nodes().at("n01").summary.chips[0].firmware_version == "2.0");
  h.tick(12000);
  jobs = installs(h);
  REQUIRE(jobs.size() == 3);  // a wave of two
  CHECK(jobs[1].requested_node_id == "n02");
  CHECK(jobs[2].requested_node_id == "n03");
  env = listed(h, 12001);
  CHECK(env.rollout == "waves");
  CHECK(state_of(env, "n01") == "in_sync");

  finish_install(h, "p2", jobs[1], true, 13000);
  h.tick(15000);
  REQUIRE(installs(h).size() == 4);  // n04 takes n02's place in the wave
  CHECK(installs(h)[3].requested_node_id == "n04");
  finish_install(h, "p3", installs(h)[2], true, 16000);
  finish_install(h, "p4", installs(h)[3], true, 17000);
  h.tick(19000);
  CHECK(installs(h).size() == 4);
  env = listed(h, 19001);
  CHECK(env.rollout == "converged");
  for (const auto& node : env.nodes) CHECK(node.state == "in_sync");
}

TEST_CASE("a canary that fails to converge is quarantined with the reason, and the rollout stops there") {
  Harness h(quiet_knobs());
  fail_canary_on_two_nodes(h);

  const auto& n01 = h.core.nodes().at("n01").summary;
  CHECK(n01.state == NodeState::quarantined);
  CHECK(n01.quarantine_reason.find("did not converge on bundle bbbbbbbbbbbb") != std::string::npos);
  CHECK(n01.quarantine_reason.find("every chip runs 1.0 again") != std::string::npos);
  h.tick(5000);
  h.tick(10000);
  CHECK(installs(h).size() == 1);
  auto env = listed(h, 10001);
  CHECK(env.rollout == "halted");
  CHECK(env.detail.find("node n01") != std::string::npos);
  CHECK(state_of(env, "n01") == "failed");
  CHECK(state_of(env, "n02") == "drifted");
  // The install report's reason, not merely how the install process exited (`kiln envs`).
  CHECK(detail_of(env, "n01") == "install job 1 failed: the new firmware failed its check; every chip runs 1.0 again");
  CHECK(env.detail.find("every chip runs 1.0 again") != std::string::npos);

  // A restarted coordinator reads the same from its store: still halted, nothing installed.
  auto restarted_at = restart_on_staging(h, quiet_knobs());
  Harness& restarted = *restarted_at;
  CHECK(installs(restarted).size() == 1);
  CHECK(listed(restarted, 25001).rollout == "halted");

  // Promoting another bundle (a rollback or a fix) starts a new rollout.
  DesiredFleet fixed = staging({"n01", "n02"});
  fixed.environments[0].bundle_id = std::string(64, 'd');
  fixed.environments[0].firmware.sha256 = std::string(64, 'e');
  restarted.core.on_desired_environments(fixed, 26000);
  restarted.drain();
  const auto after = installs(restarted);
  REQUIRE(after.size() == 2);
  CHECK(after[1].requested_node_id == "n02");  // n01 is quarantined: it converges once released
  CHECK(state_of(listed(restarted, 26001), "n01") == "unavailable");
}

TEST_CASE("a failed install stops its rollout however many jobs end after it, and across a restart") {
  CoordinatorKnobs knobs = quiet_knobs();
  knobs.ended_jobs_in_memory = 1;
  Harness h(knobs);
  fail_canary_on_two_nodes(h);
  // Many jobs end after it: the install is the newest of its node, so it is held all the same.
  for (TimeMs now = 3000; now < 3010; ++now) {
    const Body accepted = h.client("dev", Role::developer, sleep_job(8, PriorityClass::experiment), now);
    REQUIRE(std::holds_alternative<JobAccepted>(accepted));
    h.client("dev", Role::developer, CancelJob{std::get<JobAccepted>(accepted).job_id}, now);
  }
  std::size_t other_ended_held = 0;
  for (const auto& [id, job] : h.core.jobs()) {
    if (job.summary.submitted_by != kRolloutSubmitter && is_terminal(job.summary.state)) ++other_ended_held;
  }
  CHECK(other_ended_held == 1);
  h.tick(10000);
  CHECK(installs(h).size() == 1);
  CHECK(listed(h, 10001).rollout == "halted");

  auto restarted = restart_on_staging(h, knobs);
  CHECK(installs(*restarted).size() == 1);
  CHECK(listed(*restarted, 25001).rollout == "halted");
}

TEST_CASE("nodes already on the bundle's firmware are in sync; a blocked rollout installs nothing and says why") {
  Harness h(quiet_knobs());
  h.agent("p1", "n01", hello("n01", "a"), 0);
  DesiredFleet fleet = staging({"n01", "n09"}, "firmware package sha256:ffff is not in the coordinator's artifact "
                                               "store; upload it with `kiln artifact upload FILE`");
  fleet.environments[0].firmware.version = "1.0";  // what hello() reports
  h.core.on_desired_environments(fleet, 10);
  h.drain();
  CHECK(installs(h).empty());
  auto env = listed(h, 11);
  CHECK(env.rollout == "blocked");
  CHECK(env.detail.find("kiln artifact upload") != std::string::npos);
  CHECK(state_of(env, "n01") == "in_sync");
  CHECK(state_of(env, "n09") == "unknown");

  fleet.environments[0].firmware.version = "2.0";
  h.core.on_desired_environments(fleet, 20);
  h.drain();
  CHECK(installs(h).empty());
  CHECK(state_of(listed(h, 21), "n01") == "drifted");
}

TEST_CASE("an environment that selects its nodes by labels converges the nodes whose agents declare them") {
  Harness h(quiet_knobs());
  Hello prod1 = hello("n01", "a");
  prod1.labels = {"pool=prod", "rack=r1"};
  Hello prod2 = hello("n02", "a");
  prod2.labels = {"pool=prod"};
  Hello dev = hello("n03", "a");
  dev.labels = {"pool=dev", "rack=r1"};
  h.agent("p1", "n01", prod1, 0);
  h.agent("p2", "n02", prod2, 0);
  h.agent("p3", "n03", dev, 0);
  CHECK(h.core.nodes().at("n01").summary.labels == std::vector<std::string>{"pool=prod", "rack=r1"});

  DesiredFleet fleet = staging({});
  fleet.environments[0].node_labels = {"pool=prod"};
  h.core.on_desired_environments(fleet, 10);
  h.drain();
  auto env = listed(h, 11);
  REQUIRE(env.nodes.size() == 2);  // n03 is not in the pool
  CHECK(env.nodes[0].node_id == "n01");
  CHECK(env.nodes[1].node_id == "n02");
  CHECK(env.rollout == "canary");
  REQUIRE(installs(h).size() == 1);
  CHECK(installs(h)[0].requested_node_id == "n01");

  // Every label must match; none selected is said plainly, and nothing is installed.
  fleet.environments[0].node_labels = {"pool=prod", "rack=r9"};
  h.core.on_desired_environments(fleet, 20);
  h.drain();
  env = listed(h, 21);
  CHECK(env.nodes.empty());
  CHECK(env.rollout == "idle");
  CHECK(env.detail.find("no registered node has the labels pool=prod, rack=r9") != std::string::npos);
}

TEST_CASE("a node whose driver differs installs the driver first, then the firmware; the canary waits for both") {
  Harness h(quiet_knobs());
  pin_driver_on_two_nodes(h);

  auto jobs = installs(h);
  REQUIRE(jobs.size() == 1);
  CHECK(jobs[0].requested_node_id == "n01");
  CHECK(jobs[0].summary.args ==
        std::vector<std::string>{"--kind", "driver", "--version", "r2", "--sha256", kDriver, "{artifact:driver}"});
  REQUIRE(jobs[0].artifacts.size() == 1);
  CHECK(jobs[0].artifacts[0].name == "driver");
  CHECK(jobs[0].artifacts[0].size_bytes == 2048);
  auto env = listed(h, 11);
  CHECK(env.nodes[1].state == "drifted");
  CHECK(env.nodes[1].detail == "driver unknown, desired r2");

  // The driver installed: the canary still runs the old firmware, so no other node starts.
  finish_install(h, "p1", jobs[0], true, 2000);
  CHECK(h.core.nodes().at("n01").summary.driver_version == "r2");
  h.tick(4000);
  jobs = installs(h);
  REQUIRE(jobs.size() == 2);
  CHECK(jobs[1].requested_node_id == "n01");
  CHECK(jobs[1].summary.args[1] == "firmware");
  CHECK(listed(h, 4001).rollout == "canary");
  h.tick(6000);
  CHECK(installs(h).size() == 2);

  finish_install(h, "p1", jobs[1], true, 7000);
  h.tick(9000);
  jobs = installs(h);
  REQUIRE(jobs.size() == 3);
  CHECK(jobs[2].requested_node_id == "n02");
  CHECK(jobs[2].summary.args[1] == "driver");
  env = listed(h, 9001);
  CHECK(env.rollout == "waves");
  CHECK(state_of(env, "n01") == "in_sync");
}

TEST_CASE("a failed driver install quarantines the node and stops the rollout") {
  Harness h(quiet_knobs());
  pin_driver_on_two_nodes(h);
  REQUIRE(installs(h).size() == 1);
  finish_install(h, "p1", installs(h)[0], false, 2000);

  CHECK(h.core.nodes().at("n01").summary.state == NodeState::quarantined);
  h.tick(5000);
  h.tick(10000);
  CHECK(installs(h).size() == 1);  // neither the canary's firmware nor another node
  auto env = listed(h, 10001);
  CHECK(env.rollout == "halted");
  CHECK(state_of(env, "n01") == "failed");
  CHECK(detail_of(env, "n01") == "install job 1 failed: the driver installer for r2 failed (exit code 3)");
  CHECK(state_of(env, "n02") == "drifted");
}

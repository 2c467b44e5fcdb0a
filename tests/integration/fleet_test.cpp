// The real binaries on loopback: kiln-coordinator, kiln-agent with the simulated chip, and
// the kiln client.
#include <doctest/doctest.h>

#include <signal.h>

#include <thread>

#include "common/protocol/messages.h"
#include "tests/integration/fleet_fixture.h"
#include "tests/integration/fleet_queries.h"

using namespace kiln;
using namespace kiln::protocol;
using namespace kiln::testing;
using namespace std::chrono_literals;

namespace {

SubmitJob sleep_job(const std::string& seconds, std::uint32_t max_attempts) {
  SubmitJob s;
  s.workload = "sleep";
  s.args = {seconds};
  s.chips = 1;
  s.max_attempts = max_attempts;
  return s;
}

}  // namespace

TEST_CASE("agents register and heartbeat; a smoke job runs and its result is stored") {
  Fleet fleet("register");
  auto client = kiln::testing::start_nodes(fleet, {{"n01", "a"}, {"n02", "b"}});
  auto n02 = node(*client, "n02");
  CHECK(n02->hardware_revision == "b");
  CHECK(n02->chips_total == 8);
  CHECK(n02->chips.at(0).serial.size() > 4);

  // Heartbeats keep the node fresh well past the liveness timeout.
  std::this_thread::sleep_for(1500ms);
  auto n01 = node(*client, "n01");
  CHECK(n01->state == NodeState::up);
  CHECK(n01->last_seen_ms_ago < 500);

  SubmitJob smoke;
  smoke.workload = "smoke";
  smoke.chips = 4;
  smoke.hardware_revision = "b";
  const auto id = submit(*client, smoke);
  REQUIRE(Fleet::eventually([&] { return job_state_is(*client, id, JobState::succeeded); }, 15s));
  auto detail = job(*client, id);
  CHECK(detail->job.node_id == "n02");
  CHECK(detail->job.chip_indices.size() == 4);
  CHECK(detail->result.find("\"passed\":true") != std::string::npos);
  CHECK(detail->output_tail.find("matmul") != std::string::npos);

  // The kiln command shows the same, and its exit code follows the job.
  std::string out;
  CHECK(fleet.kiln("dev", {"result", std::to_string(id)}, &out) == 0);
  CHECK(out.find("succeeded") != std::string::npos);
  CHECK(fleet.kiln("dev", {"nodes"}, &out) == 0);
  CHECK(out.find("n01") != std::string::npos);
  CHECK(fleet.kiln("dev", {"submit", "--workload", "sleep", "--wait", "--timeout", "1s", "--", "5"}, &out) == 1);
  CHECK(out.find("timed_out") != std::string::npos);
}

TEST_CASE("an agent killed with SIGKILL mid-job: the node is lost and the job reported lost") {
  Fleet fleet("sigkill");
  fleet.add_key("dev", "developer");
  fleet.add_agent({"n01", "a"});
  fleet.start_coordinator();
  fleet.start_agent("n01");
  auto client = fleet.client("dev");
  REQUIRE(Fleet::eventually([&] { return node_state_is(*client, "n01", NodeState::up); }, 10s));
  const auto id = submit(*client, sleep_job("30", 1));
  REQUIRE(Fleet::eventually([&] { return job_state_is(*client, id, JobState::running); }, 10s));
  fleet.stop_agent("n01", SIGKILL);
  REQUIRE(Fleet::eventually([&] { return job_state_is(*client, id, JobState::lost); }, 10s));
  CHECK(node_state_is(*client, "n01", NodeState::lost));
  CHECK(job(*client, id)->job.detail.find("silent") != std::string::npos);
}

TEST_CASE("a job whose node is lost is failed over to another node when attempts remain") {
  Fleet fleet("failover");
  fleet.add_key("dev", "developer");
  fleet.add_agent({"n01", "a"});
  fleet.add_agent({"n02", "a"});
  fleet.start_coordinator();
  fleet.start_agent("n01");
  auto client = fleet.client("dev");
  REQUIRE(Fleet::eventually([&] { return node_state_is(*client, "n01", NodeState::up); }, 10s));
  const auto id = submit(*client, sleep_job("1", 2));
  REQUIRE(Fleet::eventually([&] { return job_state_is(*client, id, JobState::running); }, 10s));
  // n01 dies with the job running; the job waits for a node, then runs on the one that comes up.
  // (Killing n01 only after n02 is up raced the 1 s job on a loaded machine.)
  fleet.stop_agent("n01", SIGKILL);
  REQUIRE(Fleet::eventually([&] { return node_state_is(*client, "n01", NodeState::lost); }, 10s));
  fleet.start_agent("n02");
  REQUIRE(Fleet::eventually([&] { return job_state_is(*client, id, JobState::succeeded); }, 15s));
  auto detail = job(*client, id);
  CHECK(detail->job.node_id == "n02");
  CHECK(detail->job.attempt == 2);
}

TEST_CASE("the coordinator killed and restarted recovers its state; agents re-register and reconcile") {
  Fleet fleet("restart");
  const JobsInFlight jobs = finished_and_running_jobs(*start_one_node(fleet));
  const std::uint64_t done_id = jobs.done_id;
  const std::uint64_t running_id = jobs.running_id;
  fleet.stop_coordinator(SIGKILL);
  fleet.start_coordinator();
  auto client = fleet.client("dev");
  // Acknowledged results survive; the agent comes back and still owns its running job,
  // which then finishes normally.
  REQUIRE(Fleet::eventually([&] { return job_state_is(*client, done_id, JobState::succeeded); }, 10s));
  REQUIRE(Fleet::eventually([&] { return node_state_is(*client, "n01", NodeState::up); }, 10s));
  REQUIRE(Fleet::eventually([&] { return job_state_is(*client, running_id, JobState::succeeded); }, 15s));
  CHECK(job(*client, running_id)->job.attempt == 1);
  CHECK(fleet.log_of("coordinator").find("recovered 1 nodes, 2 jobs") != std::string::npos);
}

TEST_CASE("results older than the jobs held in memory are read back from the store, also after a restart") {
  Fleet fleet("retention");
  fleet.add_coordinator_knobs("max_jobs_listed = 2\nended_jobs_in_memory = 2\n");
  auto client = start_one_node(fleet);
  SubmitJob smoke;
  smoke.workload = "smoke";
  std::vector<std::uint64_t> ids;
  for (int i = 0; i < 4; ++i) {
    ids.push_back(submit(*client, smoke));
    REQUIRE(Fleet::eventually([&] { return job_state_is(*client, ids.back(), JobState::succeeded); }, 15s));
  }
  const auto check_oldest = [&] {
    std::string out;
    CHECK(fleet.kiln("dev", {"result", std::to_string(ids[0])}, &out) == 0);
    CHECK(out.find("succeeded") != std::string::npos);
    CHECK(out.find("matmul") != std::string::npos);
    CHECK(fleet.kiln("dev", {"cancel", std::to_string(ids[0])}, &out) != 0);
    CHECK(out.find("already ended (succeeded)") != std::string::npos);
  };
  check_oldest();
  // A restart reads the live jobs only: the two newest ended ones.
  fleet.stop_coordinator(SIGTERM);
  fleet.start_coordinator();
  REQUIRE(Fleet::eventually([&] { return node_state_is(*client, "n01", NodeState::up); }, 10s));
  CHECK(fleet.log_of("coordinator").find("recovered 1 nodes, 2 jobs") != std::string::npos);
  check_oldest();
}

TEST_CASE("keys and roles: an unknown key is refused, a developer may not drain a node") {
  Fleet fleet("auth");
  fleet.add_key("dev", "developer");
  fleet.add_key("ops1", "ops");
  fleet.add_unknown_key("stranger");
  fleet.add_agent({"n01", "a"});
  fleet.start_coordinator();
  fleet.start_agent("n01");
  auto client = fleet.client("dev");
  REQUIRE(Fleet::eventually([&] { return node_state_is(*client, "n01", NodeState::up); }, 10s));

  std::string out;
  // Each admitted key is known by its own name and role, however many keys the file lists.
  CHECK(fleet.kiln("dev", {"whoami"}, &out) == 0);
  CHECK(out.find("dev (role developer)") != std::string::npos);
  CHECK(fleet.kiln("ops1", {"whoami"}, &out) == 0);
  CHECK(out.find("ops1 (role ops)") != std::string::npos);
  CHECK(fleet.kiln("stranger", {"whoami"}, &out) == 3);
  CHECK(out.find("refused this key") != std::string::npos);
  CHECK(fleet.log_of("coordinator").find("unknown key") != std::string::npos);

  CHECK(fleet.kiln("dev", {"drain", "n01", "--reason", "test"}, &out) == 3);
  CHECK(out.find("may not drain") != std::string::npos);
  CHECK(node_state_is(*client, "n01", NodeState::up));
  CHECK(fleet.kiln("ops1", {"drain", "n01", "--reason", "suspect ECC"}, &out) == 0);
  CHECK(node_state_is(*client, "n01", NodeState::draining));

  // An agent key cannot be used as a client, nor a client key as an agent.
  CHECK(fleet.kiln("n01", {"whoami"}, &out) == 3);
}

TEST_CASE("a job waiting for chips says what it waits for, who holds them, and how long so far") {
  Fleet fleet("progress");
  auto client = kiln::testing::start_nodes(fleet, {{"n01", "a"}});
  SubmitJob holder = sleep_job("6", 1);
  holder.chips = 8;
  const auto held = submit(*client, holder);
  REQUIRE(Fleet::eventually([&] { return job_state_is(*client, held, JobState::running); }, 15s));
  // Not on a terminal: plain lines on stderr, one per change, each with the time so far.
  std::string out;
  std::string err;
  REQUIRE(fleet.kiln_split("dev", {"submit", "--workload", "sleep", "--chips", "8", "--wait", "--", "0"}, &out, &err,
                           60s) == 0);
  INFO(err);
  CHECK(err.find("queued: no node of ") != std::string::npos);
  CHECK(err.find("held by job " + std::to_string(held) + " (experiment, sleep on n01)") != std::string::npos);
  CHECK(err.find(" so far)\n") != std::string::npos);
  CHECK(err.find("\r") == std::string::npos);
}

TEST_CASE("a coordinator frozen for twice the liveness timeout with jobs running fails nothing over") {
  Fleet fleet("stall");
  auto client = kiln::testing::start_nodes(fleet, {{"n01", "a"}, {"n02", "a"}});
  SubmitJob whole_node = sleep_job("4", 2);
  whole_node.chips = 8;
  const auto first = submit(*client, whole_node);
  const auto second = submit(*client, whole_node);
  REQUIRE(Fleet::eventually([&] {
    return job_state_is(*client, first, JobState::running) && job_state_is(*client, second, JobState::running);
  }, 15s));
  // Liveness is 3 beats of 200 ms: frozen for 1.5 s, every agent gives up on the coordinator and
  // says hello again, and none of them is lost for it.
  fleet.signal_coordinator(SIGSTOP);
  std::this_thread::sleep_for(1500ms);
  fleet.signal_coordinator(SIGCONT);
  REQUIRE(Fleet::eventually([&] {
    return job_state_is(*client, first, JobState::succeeded) && job_state_is(*client, second, JobState::succeeded);
  }, 30s));
  CHECK(kiln::testing::job(*client, first)->job.attempt == 1);
  CHECK(kiln::testing::job(*client, second)->job.attempt == 1);
  for (const char* name : {"n01", "n02"}) CHECK(node(*client, name)->state == NodeState::up);
  const std::string log = fleet.log_of("coordinator");
  CHECK(log.find("did not run for") != std::string::npos);
  INFO(log);
  CHECK(log.find(" lost: silent for ") == std::string::npos);
  // The hellos went on the connections the agents had: a stall costs the coordinator no new
  // CURVE handshakes.
  for (const char* name : {"n01", "n02"}) {
    const std::string agent_log = fleet.log_of(name);
    INFO(agent_log);
    CHECK(agent_log.find("saying hello again on the open connection") != std::string::npos);
    CHECK(agent_log.find("connecting to the coordinator at") == agent_log.rfind("connecting to the coordinator at"));
  }
}

// The agent's hardening end to end with the real binaries: what a killed agent left (even a
// process that left its group with setsid()) is killed before its next incarnation registers,
// a chip hung in the driver does not keep the node from serving on the others, and one owner
// per chip whoever asked.
#include <doctest/doctest.h>
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <thread>

#include "common/protocol/messages.h"
#include "tests/integration/fleet_fixture.h"
#include "tests/integration/fleet_queries.h"
#include "tests/support/temp_dir.h"
#include "tests/support/text.h"

using namespace kiln;
using namespace kiln::protocol;
using namespace kiln::testing;
using namespace std::chrono_literals;

namespace {

// Alive and not a zombie (this container's init may not reap orphans).
bool process_alive(const std::string& pid) {
  const std::string stat = read_file("/proc/" + pid + "/stat");
  const std::size_t paren = stat.rfind(')');
  return !stat.empty() && paren != std::string::npos && stat.substr(paren + 2, 1) != "Z";
}

using kiln::testing::contains;

// Fields 5 and 6 of /proc/PID/stat: the process group and the session.
std::pair<long, long> group_and_session(const std::string& pid) {
  const std::string stat = read_file("/proc/" + pid + "/stat");
  std::istringstream fields(stat.substr(stat.rfind(')') + 2));
  std::string state;
  long parent = 0, group = 0, session = 0;
  fields >> state >> parent >> group >> session;
  return {group, session};
}

// The first line of a pid file the workload wrote, once it exists.
std::string pid_in(const std::filesystem::path& file) {
  const std::string text = read_file(file.string());
  return text.substr(0, text.find('\n'));
}

}  // namespace

TEST_CASE("an agent killed with SIGKILL: its next start kills the old attempt's grandchild before registering") {
  Fleet fleet("leftovers");
  auto dev = start_one_node(fleet);

  // The workload's own child sleeps in the workload's process group; the parent-death signal
  // reaches only the workload.
  const auto pid_file = fleet.dir() / "grandchild.pid";
  SubmitJob job;
  job.workload = "shell";
  job.args = {"-c", "sleep 600 & echo $! > " + pid_file.string() + ".new; mv " + pid_file.string() + ".new " +
                        pid_file.string() + "; wait"};
  const auto id = submit(*dev, job);
  REQUIRE(Fleet::eventually([&] { return std::filesystem::exists(pid_file); }, 15s));
  std::string grandchild = read_file(pid_file.string());
  grandchild = grandchild.substr(0, grandchild.find('\n'));
  REQUIRE(process_alive(grandchild));

  fleet.stop_agent("n01", SIGKILL);
  std::this_thread::sleep_for(300ms);
  CHECK_MESSAGE(process_alive(grandchild), "the old attempt's grandchild outlives the agent until it restarts");
  std::filesystem::remove(pid_file);

  const std::size_t first_run_log = fleet.log_of("n01").size();
  fleet.start_agent("n01");
  REQUIRE(Fleet::eventually([&] { return contains(fleet.log_of("n01").substr(first_run_log), "registered with"); },
                            20s));
  CHECK(!process_alive(grandchild));
  const std::string log = fleet.log_of("n01").substr(first_run_log);
  const std::size_t killed = log.find("left by a previous run of the agent");
  REQUIRE_MESSAGE(killed != std::string::npos, log);
  CHECK(killed < log.find("connecting to the coordinator"));
  CHECK(killed < log.find("registered with"));

  // The job's next attempt runs on the restarted agent, alone.
  REQUIRE(Fleet::eventually([&] { return std::filesystem::exists(pid_file); }, 20s));
  REQUIRE(dev->request(CancelJob{id}).has_value());
  REQUIRE(Fleet::eventually([&] { return job_ended(*dev, id); }, 15s));
}

TEST_CASE("an agent killed with SIGKILL: a grandchild that left its group with setsid() is dead before the next "
          "attempt starts") {
  Fleet fleet("escapee");
  auto dev = start_one_node(fleet);
  if (!contains(fleet.log_of("n01"), "job containment: a cgroup v2 directory per child")) {
    MESSAGE("skipped: cgroup v2 is not writable here, so the agent contains jobs by process group only and a "
            "setsid() escapes it; the agent said: "
            << fleet.log_of("n01"));
    return;
  }

  // Each attempt writes its own pid and that of a grandchild in a session of its own.
  const auto pid_file = [&](const std::string& who, int attempt) {
    return fleet.dir() / (who + "-" + std::to_string(attempt) + ".pid");
  };
  const std::string dir = fleet.dir().string();
  SubmitJob job;
  job.workload = "shell";
  job.args = {"-c", "echo $$ > " + dir + "/workload-$KILN_ATTEMPT.pid; setsid sleep 600 & echo $! > " + dir +
                        "/escapee.new; mv " + dir + "/escapee.new " + dir + "/escapee-$KILN_ATTEMPT.pid; wait"};
  const auto id = submit(*dev, job);
  REQUIRE(Fleet::eventually([&] { return std::filesystem::exists(pid_file("escapee", 1)); }, 15s));
  const std::string workload = pid_in(pid_file("workload", 1));
  const std::string escapee = pid_in(pid_file("escapee", 1));
  REQUIRE(Fleet::eventually([&] { return group_and_session(escapee).second == std::stol(escapee); }, 5s));
  CHECK(group_and_session(escapee).first != group_and_session(workload).first);

  fleet.stop_agent("n01", SIGKILL);
  std::this_thread::sleep_for(300ms);
  CHECK_MESSAGE(process_alive(escapee), "the escaped grandchild outlives the agent until it restarts");

  fleet.start_agent("n01");
  REQUIRE(Fleet::eventually([&] { return std::filesystem::exists(pid_file("workload", 2)); }, 30s));
  CHECK_MESSAGE(!process_alive(escapee), "the first attempt's setsid() grandchild runs beside the second attempt");
  CHECK(!process_alive(workload));
  CHECK(contains(fleet.log_of("n01"), "left by a previous run of the agent"));

  // Stopping a job kills its whole cgroup, the second attempt's escapee included.
  REQUIRE(Fleet::eventually([&] { return std::filesystem::exists(pid_file("escapee", 2)); }, 15s));
  const std::string second_escapee = pid_in(pid_file("escapee", 2));
  REQUIRE(dev->request(CancelJob{id}).has_value());
  REQUIRE(Fleet::eventually([&] { return job_ended(*dev, id); }, 15s));
  CHECK(Fleet::eventually([&] { return !process_alive(second_escapee); }, 5s));
}

TEST_CASE("a chip hung in the driver is reported unhealthy; the agent registers and the other chips serve") {
  Fleet fleet("hungchip");
  fleet.add_key("dev", "developer");
  // Every driver call touching chip 3 blocks forever, from the agent's first start.
  const auto faults = fleet.dir() / "faults.toml";
  std::ofstream(faults) << "[[fault]]\nchip = 3\nkind = \"hang\"\n";
  fleet.add_agent({"n01", "a"}, "fault_file=" + faults.string());
  fleet.start_coordinator();
  fleet.start_agent("n01");
  auto dev = fleet.client("dev");
  REQUIRE(Fleet::eventually([&] { return node_state_is(*dev, "n01", NodeState::up); }, 20s));
  const auto n = node(*dev, "n01");
  REQUIRE(n->chips.size() == 8);
  for (const ChipInfo& chip : n->chips) {
    CAPTURE(chip.index);
    CHECK(chip.healthy == (chip.index != 3));
  }
  CHECK(n->chips[3].serial == "unknown");
  CHECK(contains(fleet.log_of("n01"), "chip 3 is reported unhealthy, so it takes no work until the agent restarts: "
                                      "chip 3 did not answer within 3000 ms"));

  // The probes leave the hung chip alone, so the node stays up, and work goes to the others.
  SubmitJob smoke;
  smoke.workload = "smoke";
  smoke.chips = 4;
  const auto id = submit(*dev, smoke);
  REQUIRE(Fleet::eventually([&] { return job_ended(*dev, id); }, 30s));
  const auto done = job(*dev, id);
  CHECK_MESSAGE(done->job.state == JobState::succeeded, done->job.detail);
  for (std::uint32_t chip : done->job.chip_indices) CHECK(chip != 3);
  CHECK(node_state_is(*dev, "n01", NodeState::up));
}

TEST_CASE("a node whose every chip is unhealthy is quarantined with the reason, and takes no work") {
  Fleet fleet("nohealthychip");
  fleet.add_key("dev", "developer");
  // Its only chip hangs in the driver from the agent's first start; the revision is configured.
  const auto faults = fleet.dir() / "faults.toml";
  std::ofstream(faults) << "[[fault]]\nchip = 0\nkind = \"hang\"\n";
  fleet.add_agent({"n01", "a"}, "chip_count=1;fault_file=" + faults.string());
  const std::string config = read_file(fleet.agent_config("n01").string());
  std::ofstream(fleet.agent_config("n01")) << "hardware_revision = \"a\"\n" << config;
  fleet.start_coordinator();
  fleet.start_agent("n01");
  auto dev = fleet.client("dev");
  // Its first probe says no chip is healthy: not up with a chip nobody can use, but quarantined.
  REQUIRE_MESSAGE(Fleet::eventually([&] { return node_state_is(*dev, "n01", NodeState::quarantined); }, 60s),
                  fleet.log_of("n01"));
  const auto n = node(*dev, "n01");
  CHECK_FALSE(n->chips.at(0).healthy);
  CHECK(n->health == HealthStatus::fail);
  CHECK(n->health_detail.find("chips_healthy fail: no_healthy_chip") != std::string::npos);

  SubmitJob smoke;
  smoke.workload = "smoke";
  const auto id = submit(*dev, smoke);
  std::this_thread::sleep_for(2s);
  CHECK(job_state_is(*dev, id, JobState::queued));
}

TEST_CASE("one owner per chip: local diagnostics run one at a time and a job dispatched meanwhile is refused") {
  Fleet fleet("chipowners");
  fleet.add_key("dev", "developer");
  // Level 2 self-tests take 3 s each instead of returning at once.
  fleet.add_agent({"n01", "a"}, "self_test_time_scale=0.05");
  fleet.start_coordinator();
  fleet.start_agent("n01");
  auto dev = fleet.client("dev");
  REQUIRE(Fleet::eventually([&] { return node_state_is(*dev, "n01", NodeState::up); }, 15s));

  std::vector<std::unique_ptr<ChildProcess>> diags;
  for (int i = 0; i < 3; ++i) {
    diags.push_back(std::make_unique<ChildProcess>(
        std::vector<std::string>{std::string(KILN_BIN_DIR) + "/kiln-agent", "--config",
                                 fleet.agent_config("n01").string(), "diag", "--level", "2"},
        fleet.dir() / ("diag-" + std::to_string(i) + ".log")));
  }
  // Two of them are answered at once; the third holds the chips for its self-tests.
  REQUIRE(Fleet::eventually(
      [&] {
        int ended = 0;
        for (auto& diag : diags) ended += diag->running() ? 0 : 1;
        return ended == 2;
      },
      5s));
  SubmitJob smoke;
  smoke.workload = "smoke";
  const auto refused = submit(*dev, smoke);
  REQUIRE(Fleet::eventually([&] { return job_ended(*dev, refused); }, 15s));
  const auto detail = job(*dev, refused);
  CHECK(detail->job.state == JobState::failed);
  CHECK_MESSAGE(contains(detail->job.detail, "held by level 2 diagnostics asked on this host's local socket"),
                detail->job.detail);

  int ran = 0;
  int turned_away = 0;
  for (int i = 0; i < 3; ++i) {
    const int status = diags[i]->wait(60s);
    REQUIRE(WIFEXITED(status));
    const std::string output = read_file((fleet.dir() / ("diag-" + std::to_string(i) + ".log")).string());
    if (WEXITSTATUS(status) == 2) {
      ++turned_away;
      CHECK(contains(output, "cannot run level 2 diagnostics now: chips 0,1,2,3,4,5,6,7 are held by level 2 "
                             "diagnostics asked on this host's local socket"));
    } else {
      ++ran;
      CHECK_MESSAGE(WEXITSTATUS(status) == 0, output);
    }
  }
  CHECK(ran == 1);
  CHECK(turned_away == 2);

  // Released once the diagnostics ended: the next job runs.
  const auto after = submit(*dev, smoke);
  REQUIRE(Fleet::eventually([&] { return job_ended(*dev, after); }, 30s));
  CHECK(job(*dev, after)->job.state == JobState::succeeded);
}

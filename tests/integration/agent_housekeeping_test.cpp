// The agent's housekeeping with the real binaries: `kiln-agent status` on the local socket says
// what the agent is doing, and the job directory retention removes finished jobs' directories
// (too old at start-up, oldest first over the size limit) but never a running job's.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "common/protocol/messages.h"
#include "tests/integration/fleet_fixture.h"
#include "tests/integration/fleet_queries.h"
#include "tests/integration/run_command.h"

using namespace kiln;
using namespace kiln::protocol;
using namespace kiln::testing;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

namespace {

Ran agent_status(Fleet& fleet, const std::string& node_id, const std::string& flags = "") {
  return run(bin("kiln-agent") + " --config " + fleet.agent_config(node_id).string() + " status" + flags);
}

void write_bytes(const fs::path& file, std::size_t bytes) {
  fs::create_directories(file.parent_path());
  std::ofstream(file) << std::string(bytes, 'x');
}

}  // namespace

TEST_CASE("kiln-agent status shows the coordinator connection, each chip's owner and the running jobs") {
  Fleet fleet("status");
  auto dev = start_one_node(fleet);

  SubmitJob sleeper;
  sleeper.workload = "sleep";
  sleeper.args = {"600"};
  sleeper.chips = 2;
  const std::uint64_t id = submit(*dev, sleeper);
  nlohmann::json status;
  REQUIRE(Fleet::eventually(
      [&] {
        const Ran ran = agent_status(fleet, "n01", " --json");
        if (ran.status != 0) return false;
        status = nlohmann::json::parse(ran.output, nullptr, false);
        return status.is_object() && status["jobs"].size() == 1;
      },
      15s));
  CHECK(status["node_id"] == "n01");
  CHECK(status["coordinator"]["endpoint"] == fleet.agent_endpoint());
  CHECK(status["coordinator"]["session"] == "registered");
  CHECK(status["coordinator"]["last_heard_ms_ago"].is_number());
  const nlohmann::json& job = status["jobs"][0];
  CHECK(job["job_id"] == id);
  CHECK(job["attempt"] == 1);
  CHECK(job["workload"] == "sleep");
  CHECK(job["elapsed_ms"].get<std::int64_t>() >= 0);
  REQUIRE(job["chips"].size() == 2);
  REQUIRE(status["chips"].size() == 8);
  int held = 0;
  for (const nlohmann::json& chip : status["chips"]) {
    const bool its = chip["index"] == job["chips"][0] || chip["index"] == job["chips"][1];
    if (its) {
      ++held;
      CHECK(chip["owner"] == "job");
      CHECK(chip["held_by"] == "job " + std::to_string(id) + " attempt 1 (sleep)");
    } else {
      CHECK((chip["owner"] == "idle" || chip["owner"] == "probe"));
    }
  }
  CHECK(held == 2);
  CHECK(status["installs"].empty());
  CHECK(status["probe"].contains("last_verdict"));

  const Ran text = agent_status(fleet, "n01");
  CHECK(text.status == 0);
  CHECK(contains(text.output, "node n01\ncoordinator  " + fleet.agent_endpoint() + " (registered, last heard "));
  CHECK(contains(text.output, "chip  owner        held by\n"));
  CHECK(contains(text.output, "job          job " + std::to_string(id) + " attempt 1 (sleep)\n"));
  CHECK(contains(text.output, "jobs running: 1\n  job " + std::to_string(id) + " attempt 1  sleep  chips "));
  CHECK(contains(text.output, "installs running: 0\n"));

  fleet.stop_agent("n01", SIGTERM);
  const Ran none = agent_status(fleet, "n01");
  CHECK(none.status == 1);
  CHECK(contains(none.output, "no agent is running on this host"));
}

TEST_CASE("job directories: too old ones go at start-up, the oldest finished go over the size limit, a running "
          "job's stays") {
  Fleet fleet("retention");
  fleet.add_key("dev", "developer");
  fleet.add_agent({"n01", "a"}, "",
                  "job_dirs_max_bytes = 1048576\njob_dir_cleanup_interval_ms = 1000\njob_dir_max_age_ms = 3600000\n");
  const fs::path work = fleet.dir() / "work-n01";
  write_bytes(work / "job-900-1" / "output", 1000);
  fs::last_write_time(work / "job-900-1" / "output", fs::file_time_type::clock::now() - 2h);
  fs::last_write_time(work / "job-900-1", fs::file_time_type::clock::now() - 2h);
  write_bytes(work / "job-901-1" / "output", 1000);
  write_bytes(work / "probe" / "output", 1000);

  fleet.start_coordinator();
  fleet.start_agent("n01");
  auto dev = fleet.client("dev");
  REQUIRE(Fleet::eventually([&] { return node_state_is(*dev, "n01", NodeState::up); }, 15s));
  CHECK(contains(fleet.log_of("n01"), "job directories: removed 1 finished ones"));
  CHECK_FALSE(fs::exists(work / "job-900-1"));
  CHECK(fs::exists(work / "job-901-1"));
  CHECK(fs::exists(work / "probe"));

  // A running job writes 2 MiB into its own directory: over the limit by itself.
  SubmitJob writer;
  writer.workload = "shell";
  writer.args = {"-c", "head -c 2097152 /dev/zero > \"$KILN_WORK_DIR/big\"; sleep 600"};
  const std::uint64_t id = submit(*dev, writer);
  const fs::path running_dir = work / ("job-" + std::to_string(id) + "-1");
  REQUIRE(Fleet::eventually([&] { return contains(fleet.log_of("n01"), "running jobs alone take"); }, 30s));
  CHECK(fs::exists(running_dir / "big"));
  CHECK_FALSE(fs::exists(work / "job-901-1"));  // the oldest finished one made room first

  // Once it ends, its directory is a finished one like the others, and over the limit.
  REQUIRE(dev->request(CancelJob{id}).has_value());
  CHECK(Fleet::eventually([&] { return !fs::exists(running_dir); }, 30s));
  CHECK(fs::exists(work / "probe"));
}

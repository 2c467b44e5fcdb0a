// scripts/demo --serve leaves a fleet running to try the commands on, with a client config per
// role, and scripts/demo --stop stops all of it.
#include <doctest/doctest.h>

#include <fstream>
#include <sstream>
#include <vector>

#include "tests/integration/run_command.h"
#include "tests/support/temp_dir.h"
#include "tests/support/text.h"

using kiln::testing::contains;
using kiln::testing::run;
using kiln::testing::TempDir;

namespace {

std::vector<pid_t> pids_in(const std::string& file) {
  std::vector<pid_t> pids;
  std::ifstream in(file);
  for (pid_t pid = 0; in >> pid;) pids.push_back(pid);
  return pids;
}

using kiln::testing::read_file;

// Alive and not a zombie: a stopped daemon may wait for a reaper that never comes in a container.
bool running(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string pid_field, name, state;
  if (!(stat >> pid_field >> name >> state)) return false;
  return state != "Z";
}

}  // namespace

TEST_CASE("scripts/demo --serve leaves the fleet up with a config per role, and --stop stops it all") {
  TempDir temp("demo-serve");
  const std::string dir = (temp / "fleet").string();
  const std::string demo = std::string("KILN_DEMO_NO_BUILD=1 KILN_BUILD_DIR=") + KILN_BIN_DIR + "/.. " +
                           KILN_SOURCE_DIR + "/scripts/demo";
  const auto served = run(demo + " --serve " + dir);
  INFO(served.output);
  REQUIRE(served.status == 0);
  CHECK(contains(served.output, "a coordinator, a qualifier and 4 simulated agents are running on loopback, served from " + dir));
  CHECK(contains(served.output, "stop it:    scripts/demo --stop " + dir));
  const auto pids = pids_in(dir + "/pids");
  CHECK(pids.size() == 6);
  for (const char* role : {"developer", "ci", "ops", "lab", "admin"}) {
    CHECK(contains(served.output, dir + "/client-" + role + ".toml"));
  }

  // Another process, later: the ops config sees all four nodes up.
  const auto nodes = run("KILN_CONFIG=" + dir + "/client-ops.toml " + KILN_BIN_DIR + "/kiln nodes");
  CHECK(nodes.status == 0);
  for (const char* node : {"n01", "n02", "n03", "n04"}) CHECK(contains(nodes.output, std::string(node) + " "));
  const auto whoami = run(std::string(KILN_BIN_DIR) + "/kiln --config " + dir + "/client-lab.toml whoami");
  CHECK(contains(whoami.output, "lab (role lab)"));
  CHECK(run(demo + " --serve " + dir).status == 2);  // one fleet per directory

  const auto stopped = run(demo + " --stop " + dir);
  CHECK(stopped.status == 0);
  CHECK(contains(stopped.output, "stopped the fleet of " + dir));
  for (const pid_t pid : pids) CHECK_FALSE(running(pid));
  CHECK(run(demo + " --stop " + dir).status == 1);

  // Served again from the same directory: it starts, with the keys it had.
  const std::string coordinator_key = read_file(dir + "/coordinator.pub");
  const auto again = run(demo + " --serve " + dir);
  INFO(again.output);
  REQUIRE(again.status == 0);
  CHECK(read_file(dir + "/coordinator.pub") == coordinator_key);
  const auto ops_again = run(std::string(KILN_BIN_DIR) + "/kiln --config " + dir + "/client-ops.toml whoami");
  CHECK(contains(ops_again.output, "ops (role ops)"));
  const auto pids_again = pids_in(dir + "/pids");
  CHECK(pids_again.size() == 6);
  CHECK(run(demo + " --stop " + dir).status == 0);
  for (const pid_t pid : pids_again) CHECK_FALSE(running(pid));
}

// scripts/demo --serve leaves a fleet running to try the commands on, with a client config per
// role, and scripts/demo --stop stops all of it.
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "tests/integration/run_command.h"
#include "common/http/client.h"
#include "tests/support/temp_dir.h"
#include "tests/support/text.h"

using kiln::testing::contains;
using kiln::testing::run;
using kiln::testing::TempDir;
namespace fs = std::filesystem;

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

// scripts/demo of this checkout, on the binaries built for the tests.
std::string demo_command() {
  return std::string("KILN_DEMO_NO_BUILD=1 KILN_BUILD_DIR=") + KILN_BIN_DIR + "/.. " + KILN_SOURCE_DIR + "/scripts/demo";
}

// The HOST:PORT of the http://HOST:PORT URL that `marker` follows in `text`; empty when none does.
std::string address_before(const std::string& text, const std::string& marker) {
  const auto at = text.find(marker);
  if (at == std::string::npos) return "";
  const auto start = text.rfind("http://", at);
  if (start == std::string::npos) return "";
  return text.substr(start + 7, at - start - 7);
}

}  // namespace

TEST_CASE("scripts/demo --serve leaves the fleet up with a config per role, and --stop stops it all") {
  TempDir temp("demo-serve");
  const std::string dir = (temp / "fleet").string();
  const std::string demo = demo_command();
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
  // Where it says /metrics is, a Prometheus scrape finds the pool and CI's health.
  const std::string coordinator_metrics = address_before(served.output, "/metrics (coordinator)");
  const std::string qualifier_metrics = address_before(served.output, "/metrics\n              (qualifier");
  REQUIRE(!coordinator_metrics.empty());
  REQUIRE(!qualifier_metrics.empty());
  CHECK(contains(kiln::http::get(coordinator_metrics, "/metrics").body, "kiln_agents_connected 4"));
  CHECK(contains(kiln::http::get(qualifier_metrics, "/metrics").body, "kiln_runs_total"));

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

namespace {

// The walkthrough of docs/operations.md ("Trying kiln"): its console block, the "$ " commands
// and what it shows after them.
struct Walkthrough {
  std::vector<std::string> commands;
  std::vector<std::string> shown;  // the lines after each command, one string per command
};

Walkthrough operations_walkthrough() {
  std::istringstream doc(read_file(std::string(KILN_SOURCE_DIR) + "/docs/operations.md"));
  Walkthrough walkthrough;
  std::string line;
  bool in_section = false, in_block = false;
  while (std::getline(doc, line)) {
    if (line.rfind("## ", 0) == 0) in_section = line.find("Trying kiln") != std::string::npos;
    if (!in_section) continue;
    if (line.rfind("```", 0) == 0) {
      if (in_block) break;
      in_block = line == "```console";
      continue;
    }
    if (!in_block) continue;
    if (line.rfind("$ ", 0) == 0) {
      walkthrough.commands.push_back(line.substr(2));
      walkthrough.shown.emplace_back();
    } else if (!walkthrough.shown.empty() && line != "    ...") {
      walkthrough.shown.back() += line + "\n";
    }
  }
  return walkthrough;
}

std::string replaced(std::string text, const std::string& from, const std::string& to) {
  for (std::size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size())) {
    text.replace(at, from.size(), to);
  }
  return text;
}

}  // namespace

TEST_CASE("the walkthrough of docs/operations.md runs as written against scripts/demo --serve") {
  const Walkthrough walkthrough = operations_walkthrough();
  REQUIRE(walkthrough.commands.size() >= 10);
  REQUIRE(walkthrough.commands.front() == "scripts/demo --serve");
  const std::string doc_dir = "/tmp/kiln-serve-1000";  // the directory the doc shows

  TempDir temp("demo-walkthrough");
  const std::string dir = (temp / "fleet").string();
  const std::string demo = demo_command();
  const auto served = run(demo + " --serve " + dir);
  INFO(served.output);
  REQUIRE(served.status == 0);
  std::istringstream first_shown(walkthrough.shown.front());
  for (std::string line; std::getline(first_shown, line);) {
    CHECK_MESSAGE(contains(served.output, replaced(line, doc_dir, dir)), line);
  }

  // One shell runs the rest in order, as a person types them: what one line exports, the next
  // has. A command that follows a lease until it ends is stopped after a while, as Ctrl-C would.
  std::string script = "export PATH=" + std::string(KILN_BIN_DIR) + ":$PATH\ncd " + KILN_SOURCE_DIR + "\n";
  std::vector<bool> follows;
  for (std::size_t i = 1; i < walkthrough.commands.size(); ++i) {
    std::string command = replaced(walkthrough.commands[i], doc_dir, dir);
    command = replaced(command, "scripts/demo --stop", demo + " --stop " + dir);
    const bool follower = contains(command, " lease --chips") || contains(command, " lease watch");
    follows.push_back(follower);
    script += "echo '@@ step'\n" + std::string(follower ? "timeout 10 " : "") + command + "\necho \"@@ rc=$?\"\n";
  }
  const fs::path script_file = temp / "walkthrough.sh";
  std::ofstream(script_file) << script;
  const auto ran = run("bash " + script_file.string());
  INFO(ran.output);

  std::vector<std::string> outputs;
  std::vector<int> codes;
  std::istringstream out(ran.output);
  for (std::string line; std::getline(out, line);) {
    if (line == "@@ step") {
      outputs.emplace_back();
    } else if (line.rfind("@@ rc=", 0) == 0) {
      codes.push_back(std::stoi(line.substr(6)));
    } else if (!outputs.empty()) {
      outputs.back() += line + "\n";
    }
  }
  REQUIRE(codes.size() == walkthrough.commands.size() - 1);
  for (std::size_t i = 0; i < codes.size(); ++i) {
    const std::string& command = walkthrough.commands[i + 1];
    CAPTURE(command);
    CAPTURE(outputs[i]);
    if (follows[i]) {
      CHECK((codes[i] == 0 || codes[i] == 124));  // 124: still following when stopped
      CHECK(contains(outputs[i], "L1"));
    } else if (contains(command, "nightly")) {
      CHECK(codes[i] <= 1);  // a verdict: passed or a regression found, never a usage or config error
      CHECK(contains(outputs[i], "nightly"));
    } else {
      CHECK(codes[i] == 0);
    }
    std::istringstream shown(walkthrough.shown[i + 1]);
    for (std::string line; std::getline(shown, line);) {
      CHECK_MESSAGE(contains(outputs[i], replaced(line, doc_dir, dir)), line);
    }
  }
  const auto output_of = [&](const std::string& command) {
    const auto step = std::find(walkthrough.commands.begin(), walkthrough.commands.end(), command);
    REQUIRE(step != walkthrough.commands.end());
    return outputs[static_cast<std::size_t>(step - walkthrough.commands.begin()) - 1];
  };
  CHECK(contains(output_of("kiln nodes"), "n04 "));
  // The audit log has the walkthrough's own steps, with the keys that took them.
  const std::string audit = output_of("kiln audit --since 1h");
  CHECK(contains(audit, "lease_requested"));
  CHECK(contains(audit, "drained"));
  CHECK(contains(audit, "undrained"));
  CHECK(run(demo + " --stop " + dir).status == 1);  // the walkthrough stopped it already
}

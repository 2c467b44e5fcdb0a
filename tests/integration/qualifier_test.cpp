// The qualifier as a service, with the real binaries: a run outlives the client that asked for
// it, a qualifier killed with SIGKILL mid-run and started again finishes the run measuring
// nothing twice, and two qualifiers never drive the same run.
#include <doctest/doctest.h>

#include <signal.h>
#include <sys/wait.h>

#include <map>
#include <set>
#include <thread>

#include <nlohmann/json.hpp>

#include "tests/integration/qualification_fleet.h"
#include "tests/integration/run_command.h"

using namespace kiln::testing;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

namespace {

// How many jobs measured each config hash: ran to a result, that is succeeded, or failed with
// exit code 1 (the workload ran and its outputs were wrong). A job that failed to start or was
// lost measured nothing, and the run submits its config again: that is no second measurement.
std::map<std::string, int> measured_per_config(Fleet& fleet) {
  std::string out;
  REQUIRE(fleet.kiln("ci", {"jobs", "--limit", "1000", "--json"}, &out) == 0);
  std::map<std::string, int> measured;
  for (const auto& job : nlohmann::json::parse(out)) {
    const std::string hash = job.at("config_hash");
    const bool ran = job.at("state") == "succeeded" || (job.at("state") == "failed" && job.at("exit_code") == 1);
    if (!hash.empty() && ran) ++measured[hash];
  }
  return measured;
}

// Every job of a config hash, a line each (id, state, exit code, node, detail): what a failure
// of the once-per-config check needs to be understood.
std::string jobs_of_config(Fleet& fleet, const std::string& hash) {
  std::string out;
  REQUIRE(fleet.kiln("ci", {"jobs", "--limit", "1000", "--json"}, &out) == 0);
  std::string lines = hash + ":\n";
  for (const auto& job : nlohmann::json::parse(out)) {
    if (job.at("config_hash") != hash) continue;
    lines += job.at("job_id").dump() + " " + job.at("state").get<std::string>() + " exit " +
             job.at("exit_code").dump() + " on " + job.at("node_id").get<std::string>() + ": " +
             job.at("detail").get<std::string>() + "\n";
  }
  return lines;
}

// The culprit of each ticket, with its team.
std::map<std::string, std::string> ticketed(Fleet& fleet) {
  std::string out;
  REQUIRE(fleet.kiln("ci", {"tickets", "--json"}, &out) == 0);
  std::map<std::string, std::string> team_of;
  for (const auto& ticket : nlohmann::json::parse(out)) team_of[ticket.at("culprit").get<std::string>()] = ticket.at("team");
  return team_of;
}

// Two nodes, a qualifier whose set holds only the one-node models, the bundles prepared; returns
// the candidate bundle.
std::string start_with_one_node_models(Fleet& fleet) {
  start_two_nodes(fleet, {{"model_set", "\"one-node.toml\""}});
  const std::string set(kModelSet);
  write(fleet.dir() / "one-node.toml", set.substr(0, set.find("[[model]]\nname = \"mlp-fp8-wide\"")));
  fleet.start_qualifier("qualifier");
  return prepare_bundles(fleet);
}

const std::map<std::string, std::string> kCulprits = {{"k3", "compiler-team"}, {"k5", "kernels-team"}};

}  // namespace

TEST_CASE("killing the client that asked for a nightly changes nothing: the run ends with its verdict and tickets") {
  Fleet fleet("qualifier-client");
  start_two_nodes(fleet);
  fleet.start_qualifier("qualifier");
  const std::string candidate = prepare_bundles(fleet);
  auto client = fleet.start_kiln("ci", {"nightly", "--bundle", candidate, "--wait", "--run-id", "nightly-1"},
                                 fleet.dir() / "client.log");
  std::string out;
  // Killed once the run is under way: its report is recorded and jobs are running.
  // `kiln run` says what the run waits for: its jobs in flight as the coordinator sees them; the
  // waiting client says so too, as plain lines (its stderr is no terminal).
  REQUIRE(Fleet::eventually([&] { return fleet.kiln("ci", {"run", "nightly-1"}, &out) == 0 &&
                                         contains(out, "(still running) run nightly-1: ") &&
                                         contains(out, " for measure mlp-") && !measured_per_config(fleet).empty() &&
                                         contains(read(fleet.dir() / "client.log"), " model runs decided; "); },
                            120s));
  client->signal(SIGKILL);
  client->wait(10s);
  const std::string waited = read(fleet.dir() / "client.log");
  CHECK(contains(waited, "run nightly-1 requested; waiting for its verdict"));
  CHECK(contains(waited, " so far)\n"));

  // Asking again follows the same run to its verdict.
  const int verdict = fleet.kiln("ci", {"nightly", "--bundle", candidate, "--wait", "--run-id", "nightly-1", "--junit",
                                        (fleet.dir() / "nightly.xml").string()},
                                 &out, 480s);
  INFO(out);
  CHECK(verdict == 1);
  CHECK(contains(read(fleet.dir() / "nightly.xml"), "<failure"));
  CHECK(ticketed(fleet) == kCulprits);
  for (const auto& [hash, count] : measured_per_config(fleet)) CHECK_MESSAGE(count == 1, hash);
  // The same request with other options is refused, naming the run.
  CHECK(fleet.kiln("ci", {"nightly", "--bundle", candidate, "--run-id", "nightly-1", "--repeats", "20"}, &out) == 2);
  CHECK(contains(out, "run nightly-1 was asked for before with other options"));
}

TEST_CASE("a qualifier killed with SIGKILL mid-run and started again finishes the run, each config measured once") {
  Fleet fleet("qualifier-kill");
  // One-node models only: a whole-node lease its killed driver held is not taken up (see
  // docs/qualification.md, Limits).
  const std::string candidate = start_with_one_node_models(fleet);
  std::string out;
  REQUIRE(fleet.kiln("ci", {"nightly", "--bundle", candidate, "--run-id", "nightly-2"}, &out) == 0);
  CHECK(contains(out, "run nightly-2 requested; follow it with `kiln run nightly-2`"));
  REQUIRE(Fleet::eventually([&] { return measured_per_config(fleet).size() >= 2; }, 120s));
  fleet.stop_qualifier("qualifier", SIGKILL);
  const std::size_t before = measured_per_config(fleet).size();

  // Started again, it takes the run up once the dead one's claim expires, and its jobs with it.
  fleet.start_qualifier("qualifier");
  const int verdict = fleet.kiln("ci", {"nightly", "--bundle", candidate, "--wait", "--run-id", "nightly-2"}, &out, 480s);
  INFO(out);
  CHECK(verdict == 1);
  const std::string log = fleet.log_of("qualifier");
  CHECK(contains(log, "submitted by this run before: taken up"));
  const auto measured = measured_per_config(fleet);
  CHECK(measured.size() > before);
  for (const auto& [hash, count] : measured) CHECK_MESSAGE(count == 1, hash);
  CHECK(ticketed(fleet) == kCulprits);
  REQUIRE(fleet.kiln("ci", {"run", "nightly-2", "--json"}, &out) == 1);
  CHECK(nlohmann::json::parse(out).at("finished") == true);
}

TEST_CASE("two qualifiers never drive the same run") {
  Fleet fleet("qualifier-two");
  start_two_nodes(fleet, {{"claim_ms", "5000"}}, {"q1", "q2"});
  fleet.start_qualifier("q1");
  fleet.start_qualifier("q2");
  const std::string presubmit = prepare_bundles(fleet, "k2");
  const std::vector<std::string> runs = {"smoke-1", "smoke-2", "smoke-3", "smoke-4"};
  std::string out;
  for (const auto& run_id : runs) REQUIRE(fleet.kiln("ci", {"smoke", "--bundle", presubmit, "--run-id", run_id}, &out) == 0);
  for (const auto& run_id : runs) {
    CAPTURE(run_id);
    CHECK(fleet.kiln("ci", {"smoke", "--bundle", presubmit, "--run-id", run_id, "--wait"}, &out, 240s) == 0);
  }
  const std::string q1 = fleet.log_of("q1");
  const std::string q2 = fleet.log_of("q2");
  for (const auto& run_id : runs) {
    CAPTURE(run_id);
    const bool by_q1 = contains(q1, "drives run " + run_id + "\n");
    const bool by_q2 = contains(q2, "drives run " + run_id + "\n");
    CHECK(by_q1 != by_q2);
  }
  for (const auto& [hash, count] : measured_per_config(fleet)) CHECK_MESSAGE(count == 1, hash);
}

TEST_CASE("kiln nightly --wait follows its run across a coordinator restart, and so does the qualifier") {
  Fleet fleet("qualifier-restart");
  const std::string candidate = start_with_one_node_models(fleet);
  auto client = fleet.start_kiln("ci", {"nightly", "--bundle", candidate, "--wait", "--run-id", "nightly-3", "--junit",
                                        (fleet.dir() / "nightly.xml").string()},
                                 fleet.dir() / "client.log");
  std::string out;
  REQUIRE(Fleet::eventually([&] { return measured_per_config(fleet).size() >= 2; }, 120s));
  fleet.stop_coordinator(SIGKILL);
  std::this_thread::sleep_for(3s);  // the client's polls find no coordinator meanwhile
  fleet.start_coordinator();

  // The client reconnects with backoff, says so, and ends with the run's verdict.
  const int status = client->wait(480s);
  const std::string said = read(fleet.dir() / "client.log");
  INFO(said);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 1);
  CHECK(contains(said, "is not answering"));
  CHECK(contains(said, "reconnecting in"));
  CHECK(contains(read(fleet.dir() / "nightly.xml"), "<failure"));
  for (const auto& [hash, count] : measured_per_config(fleet)) CHECK_MESSAGE(count == 1, jobs_of_config(fleet, hash));
  CHECK(ticketed(fleet) == kCulprits);
}

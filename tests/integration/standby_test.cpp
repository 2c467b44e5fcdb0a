// Two coordinators on one PostgreSQL store: the active one killed with SIGKILL while jobs, a
// lease and a qualification run are in flight, and the standby takes over (docs/operations.md,
// "A standby coordinator"). Skipped, saying so, only where PostgreSQL is not installed.
#include <doctest/doctest.h>

#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "tests/integration/fleet_queries.h"
#include "tests/integration/qualification_fleet.h"
#include "tests/integration/run_command.h"
#include "tests/support/postgres_server.h"

using namespace kiln;
using namespace kiln::protocol;
using namespace kiln::testing;
using namespace std::chrono_literals;

namespace {

// `kiln ARGS` with a client.toml that lists only the standby's endpoint.
Ran kiln_at_standby_only(Fleet& fleet, const std::string& args) {
  const auto path = fleet.dir() / "client-standby-only.toml";
  std::ofstream(path) << fmt::format(
      "coordinator = \"{}\"\ncoordinator_public_key_file = \"coordinator.pub\"\nsecret_key_file = \"ops1.key\"\n"
      "timeout_ms = 2000\n",
      fleet.standby_client_endpoint());
  return run(bin("kiln") + " --config " + path.string() + " " + args);
}

int measured_configs(Fleet& fleet) {
  std::string out;
  if (fleet.kiln("ci", {"jobs", "--limit", "1000", "--json"}, &out) != 0) return 0;
  int measured = 0;
  for (const auto& job : nlohmann::json::parse(out)) {
    measured += !job.at("config_hash").get<std::string>().empty() && job.at("state") == "succeeded";
  }
  return measured;
}

int lines_with(const std::string& text, const std::string& word) {
  int count = 0;
  for (std::size_t at = text.find(word); at != std::string::npos; at = text.find(word, at + 1)) ++count;
  return count;
}

}  // namespace

TEST_CASE("a standby coordinator takes over from a killed active one: jobs, a lease and a nightly go on, nothing "
          "acknowledged is lost") {
  PostgresServer* server = PostgresServer::shared();
  if (!server) {
    MESSAGE("skipped: PostgreSQL is not installed here (scripts/setup installs it)");
    return;
  }
  Fleet fleet("standby");
  fleet.use_postgres(server->url(server->create_database()));
  fleet.add_standby();
  fleet.add_key("ops1", "ops");
  fleet.add_key("dev", "developer");
  // n03 (revision b) holds the developer's lease and job, apart from the nightly's nodes.
  fleet.add_agent({"n03", "b"});
  start_two_nodes(fleet, {{"model_set", "\"one-node.toml\""}});
  const std::string set(kModelSet);
  write(fleet.dir() / "one-node.toml", set.substr(0, set.find("[[model]]\nname = \"mlp-fp8-wide\"")));
  fleet.start_agent("n03");
  fleet.start_standby();
  fleet.start_qualifier("qualifier");
  const std::string candidate = prepare_bundles(fleet);

  // The standby refuses everything, naming the active coordinator, and does nothing.
  REQUIRE(Fleet::eventually([&] { return contains(fleet.log_of("standby"), "standing by"); }, 20s));
  const Ran refused = kiln_at_standby_only(fleet, "nodes");
  CHECK(refused.status == 4);
  CHECK(contains(refused.output, "is a standby and did nothing; the active one is kiln-coordinator on"));

  std::string out;
  REQUIRE(fleet.kiln("dev", {"lease", "--chips", "1", "--rev", "b", "--duration", "30m", "--no-wait"}, &out) == 0);
  const std::string lease = first_word_after(out, "lease ");
  auto client = fleet.client("dev");
  SubmitJob sleeper;
  sleeper.workload = "sleep";
  sleeper.args = {"6"};
  sleeper.chips = 1;
  sleeper.max_attempts = 1;
  sleeper.hardware_revision = "b";
  const std::uint64_t sleeping = submit(*client, sleeper);
  REQUIRE(Fleet::eventually([&] { return job_state_is(*client, sleeping, JobState::running); }, 15s));
  auto nightly = fleet.start_kiln("ci", {"nightly", "--bundle", candidate, "--wait", "--run-id", "nightly-standby"},
                                  fleet.dir() / "nightly.log");
  // The run is under way: one of its configs has been measured. If none is, what the run, the
  // qualifier and the coordinator said.
  INFO("the nightly's output:\n" << read_file(fleet.dir() / "nightly.log") << "\nthe qualifier's log:\n"
                                  << fleet.log_of("qualifier") << "\nthe coordinator's log:\n"
                                  << fleet.log_of("coordinator"));
  REQUIRE(Fleet::eventually([&] { return measured_configs(fleet) >= 1; }, 120s));

  fleet.stop_coordinator(SIGKILL);
  const auto killed = std::chrono::steady_clock::now();
  REQUIRE(Fleet::eventually([&] { return kiln_at_standby_only(fleet, "nodes").status == 0; }, 30s));
  const auto serving_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - killed).count();
  MESSAGE("the standby answered " << serving_ms << " ms after the active coordinator was killed");
  CHECK(contains(fleet.log_of("standby"), "taking over"));

  // The job acknowledged as running was not failed over: its agent came back to the new active
  // coordinator and it finished on its first attempt.
  auto after = fleet.client("dev");
  const bool finished = Fleet::eventually([&] { return job_state_is(*after, sleeping, JobState::succeeded); }, 30s);
  INFO("the standby's log:\n" << fleet.log_of("standby") << "\nn03's log:\n" << fleet.log_of("n03"));
  REQUIRE(finished);
  CHECK(job(*after, sleeping)->job.attempt == 1);
  REQUIRE(fleet.kiln("dev", {"leases"}, &out) == 0);
  CHECK(contains(out, lease));

  // The nightly's client followed the run to the standby and ended with its verdict.
  const int status = nightly->wait(480s);
  const std::string said = read(fleet.dir() / "nightly.log");
  INFO(said);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 1);
  CHECK(contains(said, "nightly-standby"));

  // Both takeovers are in the audit log, which the standby kept appending to.
  REQUIRE(fleet.kiln("ops1", {"audit", "--limit", "1000"}, &out) == 0);
  CHECK(lines_with(out, "coordinator_active") == 2);
  CHECK(contains(out, "lease_requested"));
}

// The real kiln-coordinator on PostgreSQL: a server the test starts itself (tests/support/
// postgres_server.h), an agent and the client on loopback. Skipped, saying so, only where
// PostgreSQL is not installed.
#include <doctest/doctest.h>

#include <signal.h>

#include "common/keys.h"
#include "common/protocol/messages.h"
#include "tests/integration/fleet_fixture.h"
#include "tests/integration/fleet_queries.h"
#include "tests/integration/run_command.h"
#include "tests/support/postgres_server.h"
#include "tests/support/temp_dir.h"

using namespace kiln;
using namespace kiln::protocol;
using namespace kiln::testing;
using namespace std::chrono_literals;

TEST_CASE("on PostgreSQL the coordinator killed and restarted keeps its jobs and nodes, and check-store reads them") {
  PostgresServer* server = PostgresServer::shared();
  if (!server) {
    MESSAGE("skipped: PostgreSQL is not installed here (scripts/setup installs it)");
    return;
  }
  Fleet fleet("postgres-restart");
  const std::string database = server->create_database();
  fleet.use_postgres(server->url(database));
  fleet.add_key("ops1", "ops");
  const JobsInFlight jobs = finished_and_running_jobs(*start_one_node(fleet));
  const std::uint64_t done_id = jobs.done_id;
  const std::uint64_t running_id = jobs.running_id;
  REQUIRE(fleet.kiln("ops1", {"drain", "n01", "--reason", "fan noise"}) == 0);
  CHECK(contains(fleet.log_of("coordinator"), "keeping what it acknowledges in the PostgreSQL database " + database));
  fleet.stop_coordinator(SIGKILL);

  // What it acknowledged is in the database, read without writing to it.
  const std::string config = (fleet.dir() / "coordinator.toml").string();
  const Ran checked = run(bin("kiln-coordinator") + " --config " + config + " check-store");
  CHECK(checked.status == 0);
  CHECK(contains(checked.output, "kiln database, schema version 7; 1 nodes, 2 jobs"));
  CHECK(contains(checked.output, "OK: kiln's own checks found nothing wrong"));
  CHECK(server->query(database, "SELECT state FROM kiln.jobs WHERE job_id = " + std::to_string(done_id) + ";") ==
        "succeeded\n");

  fleet.start_coordinator();
  auto client = fleet.client("dev");
  // Acknowledged results survive; the agent comes back and still owns its running job, which
  // then finishes normally; the node is still drained, and the audit log still says by whom.
  REQUIRE(Fleet::eventually([&] { return job_state_is(*client, done_id, JobState::succeeded); }, 10s));
  REQUIRE(Fleet::eventually([&] { return node_state_is(*client, "n01", NodeState::draining); }, 10s));
  REQUIRE(Fleet::eventually([&] { return job_state_is(*client, running_id, JobState::succeeded); }, 15s));
  CHECK(job(*client, running_id)->job.attempt == 1);
  CHECK(contains(fleet.log_of("coordinator"), "recovered 1 nodes, 2 jobs"));
  std::string audit;
  REQUIRE(fleet.kiln("ops1", {"audit"}, &audit) == 0);
  CHECK(contains(audit, "fan noise"));
}

TEST_CASE("a PostgreSQL server the coordinator cannot reach stops it at start, naming the server and what to check") {
  TempDir dir("kiln-postgres-unreachable");
  auto keys = generate_keypair();
  REQUIRE(keys.has_value());
  REQUIRE(write_keypair(dir.file("coordinator"), *keys).has_value());
  // The store opens before the coordinator binds its endpoints: nothing listens.
  const std::string config =
      dir.write("coordinator.toml", "[coordinator]\nsecret_key_file = \"coordinator.key\"\n\n[store]\nbackend = "
                                    "\"postgresql\"\nurl = \"host=" + dir.path().string() + " dbname=kiln user=kiln\"\n");
  const Ran started = run(bin("kiln-coordinator") + " --config " + config);
  CHECK(started.status == 1);
  CHECK(contains(started.output, "cannot connect to the PostgreSQL database kiln on " + dir.path().string() +
                                     ":5432 as kiln"));
  CHECK(contains(started.output, "check that the server is running"));
  const Ran checked = run(bin("kiln-coordinator") + " --config " + config + " check-store");
  CHECK(checked.status == 1);
  CHECK(contains(checked.output, "cannot connect to the PostgreSQL database kiln"));
}

TEST_CASE("migrate-store copies a SQLite fleet into PostgreSQL, and the coordinator goes on from there") {
  PostgresServer* server = PostgresServer::shared();
  if (!server) {
    MESSAGE("skipped: PostgreSQL is not installed here (scripts/setup installs it)");
    return;
  }
  Fleet fleet("postgres-migrate");
  fleet.add_key("ops1", "ops");
  const JobsInFlight jobs = finished_and_running_jobs(*start_one_node(fleet));
  REQUIRE(Fleet::eventually([&] { return job_state_is(*fleet.client("dev"), jobs.running_id, JobState::succeeded); },
                            15s));
  REQUIRE(fleet.kiln("ops1", {"drain", "n01", "--reason", "moving to PostgreSQL"}) == 0);
  fleet.stop_coordinator(SIGTERM);

  const std::string database = server->create_database();
  const std::string config = (fleet.dir() / "coordinator.toml").string();
  const std::string migrate = bin("kiln-coordinator") + " --config " + config + " migrate-store --to '" +
                              server->url(database) + "'";
  const Ran migrated = run(migrate);
  INFO(migrated.output);
  REQUIRE(migrated.status == 0);
  CHECK(contains(migrated.output, "copied 1 nodes, 2 jobs, 0 records, 0 leases"));
  CHECK(contains(migrated.output, "every count matches"));
  // A second copy would mix two fleets: the target must be empty.
  const Ran again = run(migrate);
  CHECK(again.status == 1);
  CHECK(contains(again.output, "the target store already holds kiln data (1 nodes, 2 jobs"));

  fleet.use_postgres(server->url(database));
  fleet.start_coordinator();
  auto client = fleet.client("dev");
  REQUIRE(Fleet::eventually([&] { return job_state_is(*client, jobs.done_id, JobState::succeeded); }, 10s));
  REQUIRE(Fleet::eventually([&] { return node_state_is(*client, "n01", NodeState::draining); }, 10s));
  std::string audit;
  REQUIRE(fleet.kiln("ops1", {"audit"}, &audit) == 0);
  CHECK(contains(audit, "moving to PostgreSQL"));
}

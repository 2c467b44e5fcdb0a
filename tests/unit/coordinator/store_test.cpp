#include <doctest/doctest.h>

#include <sqlite3.h>
#include <unistd.h>

#include <filesystem>

#include "coordinator/store/store.h"

using namespace kiln;
using namespace kiln::coordinator;

TEST_CASE("the SQLite store keeps nodes and jobs across reopening") {
  auto dir = std::filesystem::temp_directory_path() / ("kiln-store-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "kiln.db").string();
  {
    auto store = open_sqlite_store(path);
    REQUIRE(store.has_value());
    NodeRecord node;
    node.summary.node_id = "n01";
    node.summary.hardware_revision = "a";
    node.draining = true;
    REQUIRE((*store)->save_node(node).has_value());
    JobRecord job;
    job.summary.job_id = 5;
    job.summary.workload = "smoke";
    job.summary.args = {"--steps", "10"};
    job.timeout_ms = 60000;
    job.result = R"({"tokens_per_s": 1234.5})";
    REQUIRE((*store)->save_job(job).has_value());
    job.summary.state = protocol::JobState::succeeded;
    REQUIRE((*store)->save_job(job).has_value());
  }
  auto store = open_sqlite_store(path);
  REQUIRE(store.has_value());
  auto snapshot = (*store)->load();
  REQUIRE(snapshot.has_value());
  REQUIRE(snapshot->nodes.size() == 1);
  CHECK(snapshot->nodes[0].draining);
  REQUIRE(snapshot->jobs.size() == 1);
  CHECK(snapshot->jobs[0].summary.state == protocol::JobState::succeeded);
  CHECK(snapshot->jobs[0].summary.args == std::vector<std::string>{"--steps", "10"});
  CHECK(snapshot->jobs[0].result == R"({"tokens_per_s": 1234.5})");
  std::filesystem::remove_all(dir);
}

TEST_CASE("the SQLite store keeps developer leases across reopening") {
  auto dir = std::filesystem::temp_directory_path() / ("kiln-store-leases-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "kiln.db").string();
  {
    auto store = open_sqlite_store(path);
    REQUIRE(store.has_value());
    LeaseRecord lease;
    lease.summary.lease_id = 7;
    lease.summary.owner = "alice";
    lease.summary.chips = 4;
    lease.summary.hardware_revision = "b";
    lease.summary.duration_ms = 7200000;
    lease.summary.requested_at_ms = 1000;
    lease.requested_at_ms = 1000;
    lease.start_at_ms = 5000;
    REQUIRE((*store)->save_lease(lease).has_value());
    lease.summary.state = protocol::LeaseState::granted;
    lease.summary.placement = {protocol::LeasePlacement{"n03", {4, 5, 6, 7}}};
    lease.summary.granted_at_ms = 5000;
    lease.summary.expires_at_ms = 7205000;
    lease.summary.event_seq = 1;
    REQUIRE((*store)->save_lease(lease).has_value());
    LeaseRecord ended;
    ended.summary.lease_id = 8;
    ended.summary.owner = "bob";
    ended.summary.chips = 1;
    ended.summary.state = protocol::LeaseState::ended;
    ended.summary.detail = "released by bob";
    REQUIRE((*store)->save_lease(ended).has_value());
  }
  auto store = open_sqlite_store(path);
  REQUIRE(store.has_value());
  auto snapshot = (*store)->load();
  REQUIRE(snapshot.has_value());
  REQUIRE(snapshot->leases.size() == 2);
  const LeaseRecord& lease = snapshot->leases[0];
  CHECK(lease.summary.lease_id == 7);
  CHECK(lease.summary.state == protocol::LeaseState::granted);
  CHECK(lease.summary.owner == "alice");
  REQUIRE(lease.summary.placement.size() == 1);
  CHECK(lease.summary.placement[0].node_id == "n03");
  CHECK(lease.summary.placement[0].chip_indices == std::vector<std::uint32_t>{4, 5, 6, 7});
  CHECK(lease.summary.expires_at_ms == 7205000);
  CHECK(lease.requested_at_ms == 1000);
  CHECK(lease.start_at_ms == 5000);
  CHECK(snapshot->leases[1].summary.state == protocol::LeaseState::ended);
  CHECK(snapshot->leases[1].summary.detail == "released by bob");
  std::filesystem::remove_all(dir);
}

namespace {

void set_schema_version(const std::string& path, int version) {
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open(path.c_str(), &db) == SQLITE_OK);
  const std::string sql = "UPDATE meta SET value='" + std::to_string(version) + "' WHERE key='schema_version';";
  CHECK(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr) == SQLITE_OK);
  sqlite3_close(db);
}

}  // namespace

TEST_CASE("a version 1 database (before leases, records and job attribution) is upgraded; a newer one is refused") {
  auto dir = std::filesystem::temp_directory_path() / ("kiln-store-version-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "kiln.db").string();
  {
    auto store = open_sqlite_store(path);
    REQUIRE(store.has_value());
    JobRecord job;
    job.summary.job_id = 3;
    job.summary.workload = "smoke";
    job.timeout_ms = 60000;
    REQUIRE((*store)->save_job(job).has_value());
  }
  // What a version 1 coordinator wrote: jobs without the bundle attribution.
  {
    sqlite3* db = nullptr;
    REQUIRE(sqlite3_open(path.c_str(), &db) == SQLITE_OK);
    CHECK(sqlite3_exec(db, "UPDATE jobs SET doc = json_remove(doc, '$.summary.bundle_id', '$.summary.config_hash');",
                       nullptr, nullptr, nullptr) == SQLITE_OK);
    sqlite3_close(db);
  }
  set_schema_version(path, 1);
  {
    auto store = open_sqlite_store(path);
    REQUIRE(store.has_value());
    auto snapshot = (*store)->load();
    REQUIRE(snapshot.has_value());
    REQUIRE(snapshot->jobs.size() == 1);
    CHECK(snapshot->jobs[0].summary.bundle_id.empty());
    CHECK(snapshot->leases.empty());
    CHECK(snapshot->records.empty());
  }
  set_schema_version(path, 99);
  auto refused = open_sqlite_store(path);
  REQUIRE_FALSE(refused.has_value());
  CHECK(refused.error().message.find("schema version 99") != std::string::npos);
  CHECK(refused.error().message.find("use a matching coordinator") != std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST_CASE("an unwritable database path is refused with a clear error") {
  auto store = open_sqlite_store("/nonexistent-dir/kiln.db");
  REQUIRE_FALSE(store.has_value());
  CHECK(store.error().message.find("check the directory exists") != std::string::npos);
}

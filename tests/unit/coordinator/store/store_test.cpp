#include <doctest/doctest.h>

#include <sqlite3.h>

#include <filesystem>
#include <fstream>
#include <iterator>

#include "coordinator/store/store.h"
#include "tests/support/temp_dir.h"
#include "tests/support/text.h"

using namespace kiln;
using namespace kiln::coordinator;

TEST_CASE("the SQLite store keeps nodes and jobs across reopening") {
  kiln::testing::TempDir dir("kiln-store");
  const std::string path = dir.file("kiln.db");
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
}

TEST_CASE("the SQLite store keeps developer leases across reopening") {
  kiln::testing::TempDir dir("kiln-store-leases");
  const std::string path = dir.file("kiln.db");
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
}

namespace {

void run_sql(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open(path.c_str(), &db) == SQLITE_OK);
  CHECK(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr) == SQLITE_OK);
  sqlite3_close(db);
}

void set_schema_version(const std::string& path, int version) {
  run_sql(path, "UPDATE meta SET value='" + std::to_string(version) + "' WHERE key='schema_version';");
}

void save_smoke_job(Store& store, std::uint64_t job_id) {
  JobRecord job;
  job.summary.job_id = job_id;
  job.summary.workload = "smoke";
  job.timeout_ms = 60000;
  REQUIRE(store.save_job(job).has_value());
}

}  // namespace

TEST_CASE("a version 1 database (before leases, records and job attribution) is upgraded; a newer one is refused") {
  kiln::testing::TempDir dir("kiln-store-version");
  const std::string path = dir.file("kiln.db");
  {
    auto store = open_sqlite_store(path);
    REQUIRE(store.has_value());
    save_smoke_job(**store, 3);
  }
  // What a version 1 coordinator wrote: jobs without the bundle attribution.
  run_sql(path, "UPDATE jobs SET doc = json_remove(doc, '$.summary.bundle_id', '$.summary.config_hash');");
  set_schema_version(path, 1);
  run_sql(path, "PRAGMA application_id=0;");
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
}

TEST_CASE("a version 2 database is upgraded: its nodes read back, never released from quarantine") {
  kiln::testing::TempDir dir("kiln-store-version-2");
  const std::string path = dir.file("kiln.db");
  {
    auto store = open_sqlite_store(path);
    REQUIRE(store.has_value());
    NodeRecord node;
    node.summary.node_id = "n01";
    node.summary.hardware_revision = "a";
    node.released_from_quarantine_wall_ms = 1234;
    REQUIRE((*store)->save_node(node).has_value());
  }
  // What a version 2 coordinator wrote: nodes without the release time.
  run_sql(path, "UPDATE nodes SET doc = json_remove(doc, '$.released_from_quarantine_wall_ms');");
  set_schema_version(path, 2);
  auto store = open_sqlite_store(path);
  REQUIRE_MESSAGE(store.has_value(), store.error().message);
  auto snapshot = (*store)->load();
  REQUIRE_MESSAGE(snapshot.has_value(), snapshot.error().message);
  REQUIRE(snapshot->nodes.size() == 1);
  CHECK(snapshot->nodes[0].summary.node_id == "n01");
  CHECK(snapshot->nodes[0].released_from_quarantine_wall_ms == 0);
}

TEST_CASE("a version 3 database is upgraded: its nodes name no rendezvous address, its jobs are no gang's and name no artifacts") {
  kiln::testing::TempDir dir("kiln-store-version-3");
  const std::string path = dir.file("kiln.db");
  {
    auto store = open_sqlite_store(path);
    REQUIRE(store.has_value());
    NodeRecord node;
    node.summary.node_id = "n01";
    node.summary.hardware_revision = "a";
    node.summary.rendezvous_address = "10.0.0.1";
    REQUIRE((*store)->save_node(node).has_value());
    save_smoke_job(**store, 5);
  }
  // What a version 3 coordinator wrote.
  run_sql(path, "UPDATE nodes SET doc = json_remove(doc, '$.summary.rendezvous_address');");
  run_sql(path, "UPDATE jobs SET doc = json_remove(doc, '$.summary.gang_id', '$.summary.gang_rank', "
                "'$.summary.gang_size', '$.cancel_reason', '$.artifacts');");
  set_schema_version(path, 3);
  auto store = open_sqlite_store(path);
  REQUIRE_MESSAGE(store.has_value(), store.error().message);
  auto snapshot = (*store)->load();
  REQUIRE_MESSAGE(snapshot.has_value(), snapshot.error().message);
  REQUIRE(snapshot->nodes.size() == 1);
  CHECK(snapshot->nodes[0].summary.rendezvous_address.empty());
  REQUIRE(snapshot->jobs.size() == 1);
  CHECK(snapshot->jobs[0].summary.job_id == 5);
  CHECK(snapshot->jobs[0].summary.gang_size == 0);
  CHECK(snapshot->jobs[0].cancel_reason.empty());
  CHECK(snapshot->jobs[0].artifacts.empty());
}

TEST_CASE("an unwritable database path is refused with a clear error") {
  auto store = open_sqlite_store("/nonexistent-dir/kiln.db");
  REQUIRE_FALSE(store.has_value());
  CHECK(store.error().message.find("check the directory exists") != std::string::npos);
}

namespace {

using kiln::testing::read_file;

// Runs SQL on a database as another program would, outside kiln.
int application_id_of(const std::string& path) {
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK);
  sqlite3_stmt* st = nullptr;
  REQUIRE(sqlite3_prepare_v2(db, "PRAGMA application_id;", -1, &st, nullptr) == SQLITE_OK);
  REQUIRE(sqlite3_step(st) == SQLITE_ROW);
  const int id = sqlite3_column_int(st, 0);
  sqlite3_finalize(st);
  sqlite3_close(db);
  return id;
}

using kiln::testing::contains;

// The file is refused, left byte for byte as it was, with a message containing every one of `found`.
// (Reading a WAL-mode file may leave SQLite's -shm index beside it; the file itself is unchanged.)
void check_refused_untouched(const std::string& path, const std::vector<std::string>& found) {
  const std::string before = read_file(path);
  auto store = open_sqlite_store(path);
  REQUIRE_FALSE(store.has_value());
  for (const std::string& part : found) {
    CAPTURE(part);
    CHECK(contains(store.error().message, part));
  }
  auto check = check_sqlite_store(path);
  REQUIRE_FALSE(check.has_value());
  CHECK(check.error().message == store.error().message);
  CHECK(read_file(path) == before);
  CHECK_FALSE(std::filesystem::exists(path + "-journal"));
}

}  // namespace

TEST_CASE("a database file kiln did not create is refused untouched, saying what it holds") {
  kiln::testing::TempDir dir("kiln-store-foreign");

  SUBCASE("an empty file") {
    const std::string path = dir.write("kiln.db", "");
    check_refused_untouched(path, {path, "empty file (0 bytes)", "restore it from your latest backup",
                                   "delete the empty file"});
  }
  SUBCASE("another application's tables") {
    const std::string path = dir.file("kiln.db");
    run_sql(path, "CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT); INSERT INTO customers VALUES (1, 'a');"
                  "CREATE TABLE orders (id INTEGER);");
    check_refused_untouched(path, {path, "kiln did not create", "customers, orders", "does not exist yet"});
  }
  SUBCASE("another application's database with a jobs table of its own") {
    const std::string path = dir.file("kiln.db");
    run_sql(path, "CREATE TABLE jobs (id INTEGER PRIMARY KEY, cron TEXT); INSERT INTO jobs VALUES (1, '@daily');");
    check_refused_untouched(path, {path, "kiln did not create", "the tables jobs"});
  }
  SUBCASE("another application's id in the header") {
    const std::string path = dir.file("kiln.db");
    run_sql(path, "PRAGMA application_id=1234; CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);");
    check_refused_untouched(path, {path, "another application", "0x000004d2"});
  }
  SUBCASE("a file that is not a database") {
    const std::string path = dir.write("kiln.db", std::string(8192, 'x'));
    check_refused_untouched(path, {path, "is not a SQLite database"});
  }
  SUBCASE("a kiln database whose pages are damaged") {
    const std::string path = dir.file("kiln.db");
    {
      auto store = open_sqlite_store(path);
      REQUIRE(store.has_value());
    }
    // Overwrite the schema page after the file header: SQLite reports the image malformed.
    std::string bytes = read_file(path);
    REQUIRE(bytes.size() > 4096);
    for (std::size_t i = 100; i < 4096; ++i) bytes[i] = static_cast<char>(0xA5);
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
    check_refused_untouched(path, {path, "damaged", "malformed", "restore it from your latest backup",
                                   "kiln-coordinator check-store --database " + path});
  }
}

TEST_CASE("a new database carries kiln's application id; one from before application ids is adopted") {
  kiln::testing::TempDir dir("kiln-store-id");
  const std::string path = dir.file("kiln.db");
  {
    auto store = open_sqlite_store(path);
    REQUIRE(store.has_value());
    save_smoke_job(**store, 4);
  }
  CHECK(application_id_of(path) == 0x4B494C4E);
  CHECK_FALSE(std::filesystem::exists(path + ".new"));

  // What a coordinator before application ids left: kiln's own tables, no id.
  run_sql(path, "PRAGMA application_id=0;");
  auto check = check_sqlite_store(path);
  REQUIRE(check.has_value());
  CHECK(contains(check->summary, "from before kiln set an application id"));
  auto store = open_sqlite_store(path);
  REQUIRE(store.has_value());
  auto snapshot = (*store)->load();
  REQUIRE(snapshot.has_value());
  REQUIRE(snapshot->jobs.size() == 1);
  CHECK(snapshot->jobs[0].summary.job_id == 4);
  CHECK(application_id_of(path) == 0x4B494C4E);
}

TEST_CASE("check-store finds damaged records and key columns that disagree with their record") {
  kiln::testing::TempDir dir("kiln-store-check");
  const std::string path = dir.file("kiln.db");
  {
    auto store = open_sqlite_store(path);
    REQUIRE(store.has_value());
    for (std::uint64_t id : {1, 2, 3}) save_smoke_job(**store, id);
    NodeRecord node;
    node.summary.node_id = "n01";
    node.summary.hardware_revision = "a";
    REQUIRE((*store)->save_node(node).has_value());
  }
  auto healthy = check_sqlite_store(path);
  REQUIRE(healthy.has_value());
  CHECK(healthy->problems.empty());
  CHECK(contains(healthy->summary, "1 nodes, 3 jobs"));

  run_sql(path, "UPDATE jobs SET state='succeeded' WHERE job_id=2; UPDATE jobs SET doc='{not json' WHERE job_id=3;");
  const std::string before = read_file(path);
  auto damaged = check_sqlite_store(path);
  REQUIRE(damaged.has_value());
  REQUIRE(damaged->problems.size() == 2);
  CHECK(contains(damaged->problems[0], "job row 2: column state is 'succeeded' but its record says 'queued'"));
  CHECK(contains(damaged->problems[1], "job row 3"));
  CHECK(contains(damaged->problems[1], "not JSON"));
  CHECK(read_file(path) == before);

  auto missing = check_sqlite_store(dir.file("other.db"));
  REQUIRE_FALSE(missing.has_value());
  CHECK(missing.error().code == Errc::not_found);
  CHECK_FALSE(std::filesystem::exists(dir.file("other.db")));
}

namespace {

protocol::AuditEntry audit_line(std::int64_t at_ms, const std::string& action) {
  return protocol::AuditEntry{0, at_ms, "alice", "developer", action, "lease L1 of alice", "8 chips for 1h"};
}

// SQLite's answer to a statement, and its message.
std::pair<int, std::string> try_sql(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open(path.c_str(), &db) == SQLITE_OK);
  char* message = nullptr;
  const int rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &message);
  std::string text = message ? message : "";
  sqlite3_free(message);
  sqlite3_close(db);
  return {rc, text};
}

}  // namespace

TEST_CASE("the audit log is kept across reopening, read by time and in pages, and SQLite refuses to change it") {
  kiln::testing::TempDir dir("kiln-store-audit");
  const std::string path = dir.file("kiln.db");
  {
    auto store = open_sqlite_store(path);
    REQUIRE(store.has_value());
    for (std::int64_t at : {1000, 2000, 3000, 4000}) {
      REQUIRE((*store)->append_audit(audit_line(at, "lease_requested")).has_value());
    }
  }
  auto store = open_sqlite_store(path);
  REQUIRE(store.has_value());
  auto since = (*store)->read_audit(protocol::ListAudit{2000, 0, 100});
  REQUIRE(since.has_value());
  REQUIRE(since->size() == 3);
  CHECK((*since)[0].seq == 2);
  CHECK((*since)[0].at_ms == 2000);
  CHECK((*since)[0].actor == "alice");
  CHECK((*since)[2].seq == 4);
  auto page = (*store)->read_audit(protocol::ListAudit{0, 2, 1});
  REQUIRE(page.has_value());
  REQUIRE(page->size() == 1);
  CHECK((*page)[0].seq == 3);

  // Append-only, also for a hand with the sqlite3 shell.
  const auto changed = try_sql(path, "UPDATE audit SET doc = '{}' WHERE seq = 1;");
  CHECK(changed.first != SQLITE_OK);
  CHECK(contains(changed.second, "append-only"));
  const auto removed = try_sql(path, "DELETE FROM audit;");
  CHECK(removed.first != SQLITE_OK);
  auto all = (*store)->read_audit(protocol::ListAudit{0, 0, 100});
  REQUIRE(all.has_value());
  CHECK(all->size() == 4);

  auto checked = check_sqlite_store(path);
  REQUIRE(checked.has_value());
  CHECK(checked->problems.empty());
  CHECK(contains(checked->summary, "4 audit lines"));
}

TEST_CASE("a version 4 database is upgraded: it gains an empty audit log") {
  kiln::testing::TempDir dir("kiln-store-version-4");
  const std::string path = dir.file("kiln.db");
  {
    auto store = open_sqlite_store(path);
    REQUIRE(store.has_value());
    save_smoke_job(**store, 7);
  }
  // What a version 4 coordinator wrote: no audit table.
  run_sql(path, "DROP TRIGGER audit_no_update; DROP TRIGGER audit_no_delete; DROP TABLE audit;");
  set_schema_version(path, 4);
  auto store = open_sqlite_store(path);
  REQUIRE_MESSAGE(store.has_value(), store.error().message);
  auto snapshot = (*store)->load();
  REQUIRE(snapshot.has_value());
  CHECK(snapshot->jobs.size() == 1);
  REQUIRE((*store)->append_audit(audit_line(5000, "drained")).has_value());
  auto lines = (*store)->read_audit(protocol::ListAudit{0, 0, 10});
  REQUIRE(lines.has_value());
  REQUIRE(lines->size() == 1);
  CHECK((*lines)[0].action == "drained");
}

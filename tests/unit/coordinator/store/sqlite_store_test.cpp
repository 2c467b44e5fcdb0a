// What only the SQLite store has: a file of its own, which it creates whole, marks as kiln's
// and refuses to write to when kiln did not create it. store_test.cpp has what both stores do.
#include <doctest/doctest.h>

#include <sqlite3.h>

#include <filesystem>
#include <fstream>

#include "coordinator/store/store.h"
#include "tests/support/temp_dir.h"
#include "tests/support/text.h"

using namespace kiln;
using namespace kiln::coordinator;

namespace {

// Runs SQL on a database file as another program would.
void run_sqlite(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open(path.c_str(), &db) == SQLITE_OK);
  CHECK(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr) == SQLITE_OK);
  sqlite3_close(db);
}

}  // namespace

TEST_CASE("an unwritable database path is refused with a clear error") {
  auto store = open_sqlite_store("/nonexistent-dir/kiln.db");
  REQUIRE_FALSE(store.has_value());
  CHECK(store.error().message.find("check the directory exists") != std::string::npos);
}

namespace {

using kiln::testing::read_file;

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
    run_sqlite(path, "CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT); INSERT INTO customers VALUES (1, 'a');"
                  "CREATE TABLE orders (id INTEGER);");
    check_refused_untouched(path, {path, "kiln did not create", "customers, orders", "does not exist yet"});
  }
  SUBCASE("another application's database with a jobs table of its own") {
    const std::string path = dir.file("kiln.db");
    run_sqlite(path, "CREATE TABLE jobs (id INTEGER PRIMARY KEY, cron TEXT); INSERT INTO jobs VALUES (1, '@daily');");
    check_refused_untouched(path, {path, "kiln did not create", "the tables jobs"});
  }
  SUBCASE("another application's id in the header") {
    const std::string path = dir.file("kiln.db");
    run_sqlite(path, "PRAGMA application_id=1234; CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);");
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
    JobRecord job;
    job.summary.job_id = 4;
    job.summary.workload = "smoke";
    job.timeout_ms = 60000;
    REQUIRE((*store)->save_job(job).has_value());
  }
  CHECK(application_id_of(path) == 0x4B494C4E);
  CHECK_FALSE(std::filesystem::exists(path + ".new"));

  // What a coordinator before application ids left: kiln's own tables, no id.
  run_sqlite(path, "PRAGMA application_id=0;");
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


// What only the PostgreSQL store has: a server to reach, a password to log in with, a schema
// shared with whatever else the database holds, and coordinators that may start together.
// store_test.cpp has what both stores do.
#include <doctest/doctest.h>

#include <sys/stat.h>

#include <thread>

#include "tests/unit/coordinator/store/store_backends.h"

using namespace kiln;
using namespace kiln::coordinator;
using kiln::testing::contains;
using kiln::testing::why;
using kiln::testing::PostgresBackend;
using kiln::testing::PostgresServer;

TEST_CASE("a PostgreSQL server that cannot be reached is an error naming it and what to check") {
  kiln::testing::TempDir dir("kiln-postgres-none");
  const PostgresLocation nowhere{"host=" + dir.path().string() + " port=5499 dbname=kiln user=kiln", ""};
  auto store = open_postgres_store(nowhere);
  REQUIRE_FALSE(store.has_value());
  CHECK(store.error().code == Errc::unavailable);
  CHECK(contains(store.error().message, "cannot connect to the PostgreSQL database kiln on " + dir.path().string() +
                                            ":5499 as kiln"));
  CHECK(contains(store.error().message, "check that the server is running"));
  CHECK(contains(postgres_server_name(nowhere), "database kiln on " + dir.path().string() + ":5499 as kiln"));
  auto check = check_postgres_store(nowhere);
  REQUIRE_FALSE(check.has_value());
  CHECK(check.error().message == store.error().message);
}

TEST_CASE("a [store] url is a libpq connection string without a password") {
  CHECK_FALSE(postgres_url_problem("host=db.example.com dbname=kiln user=kiln").has_value());
  CHECK_FALSE(postgres_url_problem("postgresql://kiln@db.example.com:5433/kiln").has_value());
  auto bad = postgres_url_problem("host=db dbnme=kiln");
  REQUIRE(bad.has_value());
  CHECK(contains(*bad, "is not a libpq connection string"));
  CHECK(contains(*bad, "dbnme"));
  for (const char* with_password : {"host=db password=hunter2", "postgresql://kiln:hunter2@db/kiln"}) {
    CAPTURE(with_password);
    auto secret = postgres_url_problem(with_password);
    REQUIRE(secret.has_value());
    CHECK(contains(*secret, "put it in password_file"));
    CHECK_FALSE(contains(*secret, "hunter2"));
  }
}

TEST_CASE("a role with a password logs in with password_file; a wrong or exposed one is refused") {
  PostgresBackend backend;
  if (!backend.available()) {
    MESSAGE("skipped: PostgreSQL is not installed here (scripts/setup installs it)");
    return;
  }
  kiln::testing::TempDir dir("kiln-postgres-password");
  const std::string url = backend.server().url(backend.database(), PostgresServer::kPasswordRole);
  const std::string password_file = dir.write("password", "correct horse\n");
  REQUIRE(::chmod(password_file.c_str(), 0600) == 0);
  {
    auto store = open_postgres_store({url, password_file});
    REQUIRE_MESSAGE(store.has_value(), why(store));
    CHECK((*store)->load().has_value());
  }
  const std::string wrong_file = dir.write("wrong", "battery staple\n");
  REQUIRE(::chmod(wrong_file.c_str(), 0600) == 0);
  auto wrong = open_postgres_store({url, wrong_file});
  REQUIRE_FALSE(wrong.has_value());
  CHECK(contains(wrong.error().message, "password authentication failed"));
  CHECK(contains(wrong.error().message, "password_file"));
  CHECK_FALSE(contains(wrong.error().message, "battery"));

  REQUIRE(::chmod(password_file.c_str(), 0644) == 0);
  auto exposed = open_postgres_store({url, password_file});
  REQUIRE_FALSE(exposed.has_value());
  CHECK(contains(exposed.error().message, "chmod 600 " + password_file));
  CHECK(postgres_password_file_problem(password_file).has_value());
  CHECK(contains(*postgres_password_file_problem(dir.file("none")), "No such file"));
}

TEST_CASE("a schema kiln that kiln did not make is refused untouched, saying what it holds") {
  PostgresBackend backend;
  if (!backend.available()) {
    MESSAGE("skipped: PostgreSQL is not installed here (scripts/setup installs it)");
    return;
  }
  kiln::testing::run_sql(backend, "CREATE SCHEMA kiln; CREATE TABLE kiln.jobs (id INTEGER PRIMARY KEY, cron TEXT); "
                                  "INSERT INTO kiln.jobs VALUES (1, '@daily');");
  auto store = backend.open();
  REQUIRE_FALSE(store.has_value());
  CHECK(contains(store.error().message, "holds tables kiln did not create (jobs)"));
  CHECK(contains(store.error().message, "one without a schema kiln"));
  auto check = backend.check();
  REQUIRE_FALSE(check.has_value());
  CHECK(check.error().message == store.error().message);
  CHECK(backend.server().query(backend.database(), "SELECT * FROM kiln.jobs;") == "1|@daily\n");
  // Another application's tables elsewhere in the database are no concern of kiln's.
  PostgresBackend shared;
  kiln::testing::run_sql(shared, "CREATE TABLE public.jobs (id INTEGER PRIMARY KEY);");
  auto beside = shared.open();
  CHECK_MESSAGE(beside.has_value(), why(beside));
}

TEST_CASE("coordinators starting together on a new PostgreSQL database make its schema once") {
  PostgresBackend backend;
  if (!backend.available()) {
    MESSAGE("skipped: PostgreSQL is not installed here (scripts/setup installs it)");
    return;
  }
  constexpr int kStarting = 4;
  std::vector<Result<std::unique_ptr<Store>>> opened;
  for (int i = 0; i < kStarting; ++i) opened.emplace_back(fail(Errc::internal, "not opened"));
  std::vector<std::thread> threads;
  for (int i = 0; i < kStarting; ++i) threads.emplace_back([&, i] { opened[i] = backend.open(); });
  for (std::thread& thread : threads) thread.join();
  for (const auto& store : opened) CHECK_MESSAGE(store.has_value(), why(store));
  CHECK(backend.server().query(backend.database(), "SELECT version FROM kiln.schema_version ORDER BY version;") ==
        "1\n2\n3\n4\n5\n6\n7\n");
}

// The two stores under one interface for the store suite: each case of store_test.cpp runs
// against a fresh SQLite file and a fresh database on the suite's own PostgreSQL server. Each
// backend also does by hand, in its own SQL, what an older coordinator or an outside hand would
// have done to the database.
#pragma once

#include <sqlite3.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "coordinator/store/store.h"
#include "tests/support/postgres_server.h"
#include "tests/support/temp_dir.h"
#include "tests/support/text.h"

namespace kiln::testing {

class SqliteBackend {
 public:
  bool available() const { return true; }
  Result<std::unique_ptr<coordinator::Store>> open() const { return coordinator::open_sqlite_store(path_); }
  Result<coordinator::StoreCheck> check() const { return coordinator::check_sqlite_store(path_); }
  // check-store where there is no kiln database.
  Result<coordinator::StoreCheck> check_elsewhere() const { return coordinator::check_sqlite_store(dir_.file("other.db")); }

  // Runs SQL as another program would: whether it succeeded, and SQLite's message.
  std::pair<bool, std::string> try_sql(const std::string& sql) const {
    sqlite3* db = nullptr;
    REQUIRE(sqlite3_open(path_.c_str(), &db) == SQLITE_OK);
    char* message = nullptr;
    const int rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &message);
    std::string text = message ? message : "";
    sqlite3_free(message);
    sqlite3_close(db);
    return {rc == SQLITE_OK, text};
  }
  std::string table(const std::string& name) const { return name; }
  // Removes fields ("summary.gang_id") from every document of a table.
  std::string remove_fields(const std::string& table, const std::vector<std::string>& fields) const {
    std::string paths;
    for (const std::string& field : fields) paths += ", '$." + field + "'";
    return "UPDATE " + table + " SET doc = json_remove(doc" + paths + ");";
  }
  std::string set_schema_version(int version) const {
    return "UPDATE meta SET value='" + std::to_string(version) + "' WHERE key='schema_version';";
  }
  std::string drop_audit_log() const { return "DROP TRIGGER audit_no_update; DROP TRIGGER audit_no_delete; DROP TABLE audit;"; }
  // What the database holds, to show that check-store changed nothing.
  std::string contents() const { return read_file(path_); }

 private:
  TempDir dir_{"kiln-store"};
  std::string path_ = dir_.file("kiln.db");
};

class PostgresBackend {
 public:
  bool available() const { return server_ != nullptr; }
  Result<std::unique_ptr<coordinator::Store>> open() const { return coordinator::open_postgres_store({url(), ""}); }
  Result<coordinator::StoreCheck> check() const { return coordinator::check_postgres_store({url(), ""}); }
  Result<coordinator::StoreCheck> check_elsewhere() const {
    return coordinator::check_postgres_store({server_->url(server_->create_database()), ""});
  }

  std::pair<bool, std::string> try_sql(const std::string& sql) const { return server_->run_sql(database_, sql); }
  std::string table(const std::string& name) const { return "kiln." + name; }
  std::string remove_fields(const std::string& table, const std::vector<std::string>& fields) const {
    std::string removals;
    for (std::string field : fields) {
      for (char& c : field) c = c == '.' ? ',' : c;
      removals += " #- '{" + field + "}'";
    }
    return "UPDATE " + table + " SET doc = (doc::jsonb" + removals + ")::text;";
  }
  std::string set_schema_version(int version) const {
    const std::string v = std::to_string(version);
    return "DELETE FROM kiln.schema_version WHERE version > " + v + "; INSERT INTO kiln.schema_version (version) "
           "VALUES (" + v + ") ON CONFLICT DO NOTHING;";
  }
  std::string drop_audit_log() const { return "DROP TABLE kiln.audit;"; }
  std::string contents() const {
    std::string all;
    for (const char* table : {"schema_version", "nodes", "jobs", "records", "leases", "audit"}) {
      all += server_->query(database_, std::string("SELECT * FROM kiln.") + table + " ORDER BY 1;");
    }
    return all;
  }

  std::string url() const { return server_->url(database_); }
  PostgresServer& server() const { return *server_; }
  const std::string& database() const { return database_; }

 private:
  PostgresServer* server_ = PostgresServer::shared();
  std::string database_ = server_ ? server_->create_database() : "";
};

// Why a result failed, for a test's message: doctest builds messages of passing checks too.
template <class R>
std::string why(const R& result) {
  return result ? std::string() : result.error().message;
}

// Runs SQL that must succeed.
template <class Backend>
void run_sql(const Backend& backend, const std::string& sql) {
  const auto [ok, message] = backend.try_sql(sql);
  REQUIRE_MESSAGE(ok, sql << ": " << message);
}

}  // namespace kiln::testing

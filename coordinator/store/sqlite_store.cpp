#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <optional>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "coordinator/core/job_retention.h"
#include "coordinator/store/store.h"
#include "coordinator/store/stored_records.h"

namespace kiln::coordinator {
namespace {

using stored::kSchemaVersion;
// Older databases are upgraded in place (version 1 gains the tables and its jobs empty
// attributions, nodes of 1 and 2 a release time of 0: never released, nodes and jobs of 1 to 3
// no address and no gang, 1 to 4 an empty audit log and no labels, 1 to 5 the rollout_node
// and rerun_candidate_ms columns, 1 to 6 the records' seq column, filled from the documents);
// stored_records.h has the versions' history.
// SQLite's application id (a field of the file header) of a database kiln created: "KILN".
// Databases from before it was set have kiln's tables only and a schema version; they get it
// when a coordinator next opens them.
constexpr std::int32_t kApplicationId = 0x4B494C4E;

constexpr const char* kCreateTables[] = {
    "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);",
    "CREATE TABLE IF NOT EXISTS nodes (node_id TEXT PRIMARY KEY, doc TEXT NOT NULL);",
    "CREATE TABLE IF NOT EXISTS jobs (job_id INTEGER PRIMARY KEY, state TEXT NOT NULL, node_id TEXT NOT NULL, "
    "doc TEXT NOT NULL, rollout_node TEXT NOT NULL DEFAULT '', rerun_candidate_ms INTEGER NOT NULL DEFAULT 0);",
    "CREATE TABLE IF NOT EXISTS records (kind TEXT NOT NULL, key TEXT NOT NULL, doc TEXT NOT NULL, "
    "seq INTEGER NOT NULL DEFAULT 0, PRIMARY KEY (kind, key));",
    "CREATE TABLE IF NOT EXISTS leases (lease_id INTEGER PRIMARY KEY, state TEXT NOT NULL, doc TEXT NOT NULL);",
    // Append-only, and SQLite itself refuses to change or remove a line: a mistake in kiln, or a
    // hand with the sqlite3 shell, cannot rewrite who did what.
    "CREATE TABLE IF NOT EXISTS audit (seq INTEGER PRIMARY KEY AUTOINCREMENT, at_ms INTEGER NOT NULL, "
    "doc TEXT NOT NULL);",
    "CREATE INDEX IF NOT EXISTS audit_at ON audit (at_ms);",
    "CREATE TRIGGER IF NOT EXISTS audit_no_update BEFORE UPDATE ON audit "
    "BEGIN SELECT RAISE(ABORT, 'the kiln audit log is append-only'); END;",
    "CREATE TRIGGER IF NOT EXISTS audit_no_delete BEFORE DELETE ON audit "
    "BEGIN SELECT RAISE(ABORT, 'the kiln audit log is append-only'); END;",
};

// After the tables, and after an older database's jobs gained their rollout_node column.
constexpr const char* kCreateIndexes[] = {
    "CREATE INDEX IF NOT EXISTS jobs_by_state ON jobs (state);",
    "CREATE INDEX IF NOT EXISTS jobs_by_rollout_node ON jobs (rollout_node, job_id) WHERE rollout_node <> '';",
    "CREATE INDEX IF NOT EXISTS jobs_by_rerun_candidate ON jobs (rerun_candidate_ms) WHERE rerun_candidate_ms > 0;",
    // Holds the key too: a coordinator starts from the keys and seqs of the records it holds in the store
    // only, without reading their documents.
    "CREATE INDEX IF NOT EXISTS records_by_seq ON records (kind, seq, key);",
};

const std::set<std::string>& kiln_tables() {
  static const std::set<std::string> tables = {"meta", "nodes", "jobs", "records", "leases", "audit"};
  return tables;
}

struct CloseDatabase {
  void operator()(sqlite3* db) const { sqlite3_close(db); }
};
using Database = std::unique_ptr<sqlite3, CloseDatabase>;

class Statement {
 public:
  Statement(sqlite3* db, const char* sql) { sqlite3_prepare_v2(db, sql, -1, &stmt_, nullptr); }
  ~Statement() { sqlite3_finalize(stmt_); }
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;
  sqlite3_stmt* get() const { return stmt_; }
  explicit operator bool() const { return stmt_ != nullptr; }

 private:
  sqlite3_stmt* stmt_ = nullptr;
};

// A statement of the coordinator's hot path, prepared once for the connection's life: each use
// binds, steps, and on leaving the scope resets it and clears its bindings for the next.
class CachedStatement {
 public:
  explicit CachedStatement(const char* sql) : sql_(sql) {}
  ~CachedStatement() { sqlite3_finalize(stmt_); }
  CachedStatement(const CachedStatement&) = delete;
  CachedStatement& operator=(const CachedStatement&) = delete;

  class Use {
   public:
    explicit Use(sqlite3_stmt* stmt) : stmt_(stmt) {}
    ~Use() {
      if (stmt_ == nullptr) return;
      sqlite3_reset(stmt_);
      sqlite3_clear_bindings(stmt_);
    }
    Use(const Use&) = delete;
    Use& operator=(const Use&) = delete;
    sqlite3_stmt* get() const { return stmt_; }
    explicit operator bool() const { return stmt_ != nullptr; }

   private:
    sqlite3_stmt* stmt_;
  };

  // Null (the use is false) when SQLite could not prepare it; sqlite3_errmsg says why.
  Use use(sqlite3* db) {
    if (stmt_ == nullptr) sqlite3_prepare_v3(db, sql_, -1, SQLITE_PREPARE_PERSISTENT, &stmt_, nullptr);
    return Use(stmt_);
  }

 private:
  const char* sql_;
  sqlite3_stmt* stmt_ = nullptr;
};

std::string restore_advice(const std::string& path) {
  return fmt::format("stop the coordinator, keep a copy of the file, restore it from your latest backup, and run "
                     "`kiln-coordinator check-store --database {}` on what you restored",
                     path);
}

const std::string& foreign_remedy() {
  static const std::string remedy =
      "kiln writes only to databases it created: set database in coordinator.toml to kiln's own database, or to a "
      "path that does not exist yet, where the coordinator creates a new one";
  return remedy;
}

// What SQLite's last error on `db` means for the user: a damaged or foreign file says what to do.
std::string sqlite_failure(sqlite3* db, const std::string& path, std::string_view doing) {
  const char* message = sqlite3_errmsg(db);
  switch (sqlite3_errcode(db) & 0xff) {
    case SQLITE_CORRUPT:
      return fmt::format("database {} is damaged ({}, while trying to {}); {}", path, message, doing,
                         restore_advice(path));
    case SQLITE_NOTADB:
      return fmt::format("{} is not a SQLite database ({}); {}", path, message, foreign_remedy());
    default: return fmt::format("database {}: cannot {}: {}", path, doing, message);
  }
}

Status exec(sqlite3* db, const std::string& path, const std::string& sql) {
  char* message = nullptr;
  if (sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &message) != SQLITE_OK) {
    sqlite3_free(message);
    return fail(Errc::io, sqlite_failure(db, path, fmt::format("run `{}`", sql)));
  }
  return {};
}

Status exec_all(sqlite3* db, const std::string& path, std::initializer_list<std::string> statements) {
  for (const std::string& sql : statements) {
    if (auto s = exec(db, path, sql); !s) return s;
  }
  return {};
}

// Sets kiln's application id and creates or completes its tables, in one transaction, so a
// database is kiln's only once it holds all of them. `version_found` is 0 for a new database.
Status write_schema(sqlite3* db, const std::string& path, int version_found) {
  if (auto s = exec_all(db, path, {"BEGIN IMMEDIATE;", fmt::format("PRAGMA application_id={};", kApplicationId)});
      !s) {
    return s;
  }
  for (const char* sql : kCreateTables) {
    if (auto s = exec(db, path, sql); !s) return s;
  }
  if (version_found == 1) {
    // Jobs of version 1 named no bundle; the fields are required in version 2.
    if (auto s = exec(db, path, "UPDATE jobs SET doc = json_set(doc, '$.summary.bundle_id', '', "
                                "'$.summary.config_hash', '');");
        !s) {
      return s;
    }
  }
  if (version_found == 1 || version_found == 2) {
    if (auto s = exec(db, path, "UPDATE nodes SET doc = json_set(doc, '$.released_from_quarantine_wall_ms', 0);"); !s) {
      return s;
    }
  }
  if (version_found >= 1 && version_found <= 3) {
    if (auto s = exec_all(db, path,
                          {"UPDATE nodes SET doc = json_set(doc, '$.summary.rendezvous_address', '');",
                           "UPDATE jobs SET doc = json_set(doc, '$.summary.gang_id', 0, '$.summary.gang_rank', 0, "
                           "'$.summary.gang_size', 0, '$.cancel_reason', '');"});
        !s) {
      return s;
    }
    // Jobs from before artifacts named none.
    if (auto s = exec(db, path, "UPDATE jobs SET doc = json_set(doc, '$.artifacts', json('[]'));"); !s) return s;
  }
  if (version_found >= 1 && version_found <= 4) {
    // Nodes from before labels carry none until their agent's next hello.
    if (auto s = exec(db, path, "UPDATE nodes SET doc = json_set(doc, '$.summary.labels', json('[]'));"); !s) return s;
  }
  if (version_found >= 1 && version_found <= 5) {
    // Each job's rollout node and rerun candidacy, read once from the documents. A jobs table
    // created just now has the columns already.
    Statement has_columns(db, "SELECT 1 FROM pragma_table_info('jobs') WHERE name = 'rollout_node';");
    if (!has_columns) return fail(Errc::io, sqlite_failure(db, path, "read the jobs table's columns"));
    if (sqlite3_step(has_columns.get()) != SQLITE_ROW) {
      if (auto s = exec_all(db, path,
                            {"ALTER TABLE jobs ADD COLUMN rollout_node TEXT NOT NULL DEFAULT '';",
                             "ALTER TABLE jobs ADD COLUMN rerun_candidate_ms INTEGER NOT NULL DEFAULT 0;"});
          !s) {
        return s;
      }
    }
    const auto field = [](std::string_view path) { return fmt::format("json_extract(doc, '$.{}')", path); };
    if (auto s = exec(db, path, stored::fill_job_columns_sql("jobs", field, field)); !s) return s;
  }
  if (version_found >= 1 && version_found <= 6) {
    // Each record's seq, read once from its document. A records table created just now has it.
    Statement has_column(db, "SELECT 1 FROM pragma_table_info('records') WHERE name = 'seq';");
    if (!has_column) return fail(Errc::io, sqlite_failure(db, path, "read the records table's columns"));
    if (sqlite3_step(has_column.get()) != SQLITE_ROW) {
      if (auto s = exec(db, path, "ALTER TABLE records ADD COLUMN seq INTEGER NOT NULL DEFAULT 0;"); !s) return s;
    }
    const auto field = [](std::string_view path) { return fmt::format("json_extract(doc, '$.{}')", path); };
    if (auto s = exec(db, path, stored::fill_record_seq_sql("records", field)); !s) return s;
  }
  for (const char* sql : kCreateIndexes) {
    if (auto s = exec(db, path, sql); !s) return s;
  }
  return exec_all(db, path,
                  {fmt::format("INSERT INTO meta (key, value) VALUES ('schema_version', '{}') "
                               "ON CONFLICT(key) DO UPDATE SET value=excluded.value;",
                               kSchemaVersion),
                   "COMMIT;"});
}

Result<Database> open_database(const std::string& path, int flags) {
  sqlite3* raw = nullptr;
  const int rc = sqlite3_open_v2(path.c_str(), &raw, flags | SQLITE_OPEN_FULLMUTEX, nullptr);
  Database db(raw);
  if (rc != SQLITE_OK) {
    return fail(Errc::io, fmt::format("cannot open database {}: {}; check the directory exists and is writable", path,
                                      raw ? sqlite3_errmsg(raw) : "out of memory"));
  }
  return db;
}

// Whether `path` exists; an existing file that cannot be a database of kiln's is refused here,
// before SQLite reads it.
Result<bool> database_file_exists(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return false;
    return fail(Errc::io, fmt::format("cannot look at database {}: {}; check the path and its directory's "
                                      "permissions",
                                      path, std::strerror(errno)));
  }
  if (!S_ISREG(st.st_mode)) {
    return fail(Errc::config, fmt::format("database {} is not a regular file; set database in coordinator.toml to "
                                          "a file path",
                                          path));
  }
  if (st.st_size == 0) {
    // An empty file is what a failed copy or a full disk leaves: starting afresh there would
    // hide the loss of every job and lease it held.
    return fail(Errc::config, fmt::format("database {} is an empty file (0 bytes), not a kiln database; if it held "
                                          "kiln's data, restore it from your latest backup; to start a new database "
                                          "there, delete the empty file and the coordinator creates one",
                                          path));
  }
  return true;
}

// Creates a new kiln database at `path` complete or not at all: it is built under another
// name and linked into place, so a crash never leaves a half-made database behind.
Status create_database(const std::string& path) {
  const std::string building = path + ".new";
  const auto remove_building = [&building] {
    for (const char* suffix : {"", "-wal", "-shm", "-journal"}) ::unlink((building + suffix).c_str());
  };
  remove_building();
  Status built = [&]() -> Status {
    auto db = open_database(building, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
    if (!db) return tl::unexpected(db.error());
    if (auto s = write_schema(db->get(), building, 0); !s) return s;
    return exec(db->get(), building, "PRAGMA journal_mode=WAL;");
  }();
  const int linked = built ? ::link(building.c_str(), path.c_str()) : -1;
  const int link_errno = errno;
  remove_building();
  if (!built) {
    return fail(Errc::io, fmt::format("cannot create database {} ({}); check the directory exists and is writable",
                                      path, built.error().message));
  }
  // Another coordinator creating it at the same moment is fine: what it made is looked at next.
  if (linked != 0 && link_errno != EEXIST) {
    return fail(Errc::io, fmt::format("cannot create database {}: {}; check the directory exists and is writable",
                                      path, std::strerror(link_errno)));
  }
  return {};
}

// What an existing database file holds, read without writing to it.
struct DatabaseContents {
  std::int32_t application_id = 0;
  std::vector<std::string> tables;
  std::optional<int> schema_version;  // from kiln's meta table, if it has one
};

Result<DatabaseContents> inspect(const std::string& path) {
  auto db = open_database(path, SQLITE_OPEN_READONLY);
  if (!db) return tl::unexpected(db.error());
  DatabaseContents found;
  {
    Statement st(db->get(), "PRAGMA application_id;");
    if (!st || sqlite3_step(st.get()) != SQLITE_ROW) {
      return fail(Errc::config, sqlite_failure(db->get(), path, "read its header"));
    }
    found.application_id = sqlite3_column_int(st.get(), 0);
  }
  {
    Statement st(db->get(), "SELECT name FROM sqlite_master WHERE type='table' AND name NOT LIKE 'sqlite_%' "
                            "ORDER BY name;");
    if (!st) return fail(Errc::config, sqlite_failure(db->get(), path, "list its tables"));
    int rc = SQLITE_ROW;
    while ((rc = sqlite3_step(st.get())) == SQLITE_ROW) {
      found.tables.emplace_back(reinterpret_cast<const char*>(sqlite3_column_text(st.get(), 0)));
    }
    if (rc != SQLITE_DONE) return fail(Errc::config, sqlite_failure(db->get(), path, "list its tables"));
  }
  if (std::find(found.tables.begin(), found.tables.end(), "meta") != found.tables.end()) {
    // Another application's meta table may have other columns: then it holds no version.
    Statement st(db->get(), "SELECT value FROM meta WHERE key='schema_version';");
    if (st && sqlite3_step(st.get()) == SQLITE_ROW) {
      const auto* text = reinterpret_cast<const char*>(sqlite3_column_text(st.get(), 0));
      const std::string_view value = text ? text : "";
      int version = 0;
      const auto [end, error] = std::from_chars(value.data(), value.data() + value.size(), version);
      if (error == std::errc() && end == value.data() + value.size()) found.schema_version = version;
    }
  }
  return found;
}

// The schema version of a database kiln may write to; anything else is refused, saying what
// the file holds.
Result<int> kiln_schema_version(const DatabaseContents& found, const std::string& path) {
  if (found.application_id == kApplicationId) {
    if (!found.schema_version) {
      return fail(Errc::io, fmt::format("{} is a kiln database without its schema version (its meta table is "
                                        "missing or damaged); {}",
                                        path, restore_advice(path)));
    }
    if (*found.schema_version < 1 || *found.schema_version > kSchemaVersion) {
      return fail(Errc::config, fmt::format("{} has schema version {}, this coordinator reads version {}; "
                                            "use a matching coordinator or a new database",
                                            path, *found.schema_version, kSchemaVersion));
    }
    return *found.schema_version;
  }
  if (found.application_id != 0) {
    return fail(Errc::config, fmt::format("{} belongs to another application (its SQLite application id is "
                                          "0x{:08x}, kiln's is 0x{:08x}); {}",
                                          path, static_cast<std::uint32_t>(found.application_id),
                                          static_cast<std::uint32_t>(kApplicationId), foreign_remedy()));
  }
  const bool only_kiln_tables =
      !found.tables.empty() && std::all_of(found.tables.begin(), found.tables.end(),
                                           [](const std::string& table) { return kiln_tables().count(table) > 0; });
  if (only_kiln_tables && found.schema_version && *found.schema_version >= 1 &&
      *found.schema_version <= kSchemaVersion) {
    return *found.schema_version;
  }
  if (found.tables.empty()) {
    return fail(Errc::config, fmt::format("{} is a SQLite database with no tables, not one kiln created; {}", path,
                                          foreign_remedy()));
  }
  return fail(Errc::config, fmt::format("{} is a SQLite database that kiln did not create (it holds the tables {}); {}",
                                        path, fmt::join(found.tables, ", "), foreign_remedy()));
}

// The schema version of the kiln database at `path`, refusing anything else untouched.
Result<int> existing_kiln_database(const std::string& path) {
  auto found = inspect(path);
  if (!found) return tl::unexpected(found.error());
  return kiln_schema_version(*found, path);
}

stored::Place place_of(const std::string& path) { return {path, restore_advice(path)}; }

std::string column_text(sqlite3_stmt* st, int column) {
  const auto* text = reinterpret_cast<const char*>(sqlite3_column_text(st, column));
  return text ? text : "";
}

// Reads kiln's tables for the shared loading and checking (stored_records.h).
stored::RowReader row_reader(sqlite3* db, const std::string& path) {
  return [db, &path](const stored::RowQuery& query, const std::function<Status(const stored::Row&)>& visit) -> Status {
    const std::string_view table = query.table;
    const std::string sql = stored::select_sql(query, table);
    Statement st(db, sql.c_str());
    if (!st) return fail(Errc::io, sqlite_failure(db, path, fmt::format("read the {} table", table)));
    for (std::size_t i = 0; i < query.parameters.size(); ++i) {
      sqlite3_bind_text(st.get(), static_cast<int>(i + 1), query.parameters[i].c_str(), -1, SQLITE_TRANSIENT);
    }
    const int doc_column = sqlite3_column_count(st.get()) - 1;
    int rc = SQLITE_ROW;
    while ((rc = sqlite3_step(st.get())) == SQLITE_ROW) {
      stored::Row row;
      for (int i = 0; i < doc_column; ++i) row.keys.push_back(column_text(st.get(), i));
      if (sqlite3_column_type(st.get(), doc_column) != SQLITE_NULL) row.doc = column_text(st.get(), doc_column);
      if (auto s = visit(row); !s) return s;
    }
    if (rc != SQLITE_DONE) return fail(Errc::io, sqlite_failure(db, path, fmt::format("read the {} table", table)));
    return {};
  };
}

class SqliteStore final : public Store {
 public:
  SqliteStore(Database db, std::string path) : db_(std::move(db)), path_(std::move(path)) {}

  // `version_found`: the schema version the database holds, 0 for a new (in-memory) one.
  Status init(int version_found) {
    // WAL keeps readers off the writer's path; FULL makes each commit durable before the
    // coordinator acknowledges anything that depends on it.
    if (auto s = exec_all(db_.get(), path_,
                          {"PRAGMA journal_mode=WAL;", "PRAGMA synchronous=FULL;", "PRAGMA busy_timeout=5000;"});
        !s) {
      return s;
    }
    std::int32_t application_id = 0;
    {
      Statement st(db_.get(), "PRAGMA application_id;");
      if (!st || sqlite3_step(st.get()) != SQLITE_ROW) return error("read the application id");
      application_id = sqlite3_column_int(st.get(), 0);
    }
    if (application_id == kApplicationId && version_found == kSchemaVersion) return {};
    return write_schema(db_.get(), path_, version_found);
  }

  Status save_node(const NodeRecord& node) override {
    auto st = save_node_.use(db_.get());
    if (!st) return error("prepare a node save");
    const std::string doc = protocol::to_json(node).dump();
    sqlite3_bind_text(st.get(), 1, node.summary.node_id.c_str(), -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st.get(), 2, doc.c_str(), -1, SQLITE_TRANSIENT);
    if (sqlite3_step(st.get()) != SQLITE_DONE) return error("save node " + node.summary.node_id);
    return {};
  }

  Status save_job(const JobRecord& job) override {
    auto st = save_job_.use(db_.get());
    if (!st) return error("prepare a job save");
    const std::string doc = protocol::to_json(job).dump();
    const std::string state(protocol::enum_name(job.summary.state));
    sqlite3_bind_int64(st.get(), 1, static_cast<sqlite3_int64>(job.summary.job_id));
    sqlite3_bind_text(st.get(), 2, state.c_str(), -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st.get(), 3, job.summary.node_id.c_str(), -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st.get(), 4, doc.c_str(), -1, SQLITE_TRANSIENT);
    const std::string rollout_node = stored::rollout_node_column(job);
    sqlite3_bind_text(st.get(), 5, rollout_node.c_str(), -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(st.get(), 6, stored::rerun_candidate_column(job));
    if (sqlite3_step(st.get()) != SQLITE_DONE) return error(fmt::format("save job {}", job.summary.job_id));
    return {};
  }

  Status save_record(const protocol::RecordEntry& record) override {
    auto st = save_record_.use(db_.get());
    if (!st) return error("prepare a record save");
    const std::string kind(protocol::enum_name(record.kind));
    const std::string doc = protocol::to_json(record).dump();
    sqlite3_bind_text(st.get(), 1, kind.c_str(), -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st.get(), 2, record.key.c_str(), -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st.get(), 3, doc.c_str(), -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(st.get(), 4, static_cast<sqlite3_int64>(record.seq));
    if (sqlite3_step(st.get()) != SQLITE_DONE) return error(fmt::format("save {} record {}", kind, record.key));
    return {};
  }

  Status save_lease(const LeaseRecord& lease) override {
    auto st = save_lease_.use(db_.get());
    if (!st) return error("prepare a lease save");
    const std::string doc = protocol::to_json(lease).dump();
    const std::string state(protocol::enum_name(lease.summary.state));
    sqlite3_bind_int64(st.get(), 1, static_cast<sqlite3_int64>(lease.summary.lease_id));
    sqlite3_bind_text(st.get(), 2, state.c_str(), -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st.get(), 3, doc.c_str(), -1, SQLITE_TRANSIENT);
    if (sqlite3_step(st.get()) != SQLITE_DONE) return error(fmt::format("save lease L{}", lease.summary.lease_id));
    if (lease.summary.state != protocol::LeaseState::ended) return {};
    auto prune = prune_ended_leases_.use(db_.get());
    if (!prune) return error("prepare the pruning of ended leases");
    sqlite3_bind_int(prune.get(), 1, stored::kEndedLeasesKept - 1);
    if (sqlite3_step(prune.get()) != SQLITE_DONE) return error("remove the oldest ended leases");
    return {};
  }

  Status begin() override { return step(begin_, "BEGIN IMMEDIATE;"); }
  Status commit() override {
    Status committed = step(commit_, "COMMIT;");
    // A transaction SQLite could not commit stays open: rolled back, nothing of it is kept.
    if (!committed && sqlite3_get_autocommit(db_.get()) == 0) (void)exec(db_.get(), path_, "ROLLBACK;");
    return committed;
  }

  Status append_audit(const protocol::AuditEntry& entry) override {
    auto st = append_audit_.use(db_.get());
    if (!st) return error("prepare an audit line");
    const std::string doc = protocol::to_json(entry).dump();
    sqlite3_bind_int64(st.get(), 1, static_cast<sqlite3_int64>(entry.at_ms));
    sqlite3_bind_text(st.get(), 2, doc.c_str(), -1, SQLITE_TRANSIENT);
    if (sqlite3_step(st.get()) != SQLITE_DONE) return error("append to the audit log: " + entry.action);
    return {};
  }

  Result<std::vector<protocol::AuditEntry>> read_audit(const protocol::ListAudit& query) override {
    Statement st(db_.get(), "SELECT seq, doc FROM audit WHERE at_ms >= ?1 AND seq > ?2 ORDER BY seq LIMIT ?3;");
    if (!st) return tl::unexpected(error("read the audit log").error());
    sqlite3_bind_int64(st.get(), 1, static_cast<sqlite3_int64>(query.since_ms));
    sqlite3_bind_int64(st.get(), 2, static_cast<sqlite3_int64>(query.after_seq));
    sqlite3_bind_int64(st.get(), 3, static_cast<sqlite3_int64>(query.limit));
    std::vector<protocol::AuditEntry> entries;
    int rc = SQLITE_ROW;
    while ((rc = sqlite3_step(st.get())) == SQLITE_ROW) {
      std::optional<std::string> doc;
      if (sqlite3_column_type(st.get(), 1) != SQLITE_NULL) doc = column_text(st.get(), 1);
      auto entry = stored::parse_record<protocol::AuditEntry>(doc, place_of(path_), "audit");
      if (!entry) return tl::unexpected(entry.error());
      entry->seq = static_cast<std::uint64_t>(sqlite3_column_int64(st.get(), 0));
      entries.push_back(std::move(*entry));
    }
    if (rc != SQLITE_DONE) return tl::unexpected(error("read the audit log").error());
    return entries;
  }

  Result<Snapshot> load() override { return stored::load_snapshot(row_reader(db_.get(), path_), place_of(path_)); }
  Result<Snapshot> load_live(std::size_t ended_jobs_in_memory, TimeMs reruns_since_ms) override {
    return stored::load_snapshot(row_reader(db_.get(), path_), place_of(path_),
                                 stored::jobs_held_at_start_where(ended_jobs_in_memory, reruns_since_ms), true);
  }
  Result<std::optional<JobRecord>> load_job(std::uint64_t job_id) override {
    return stored::load_job(row_reader(db_.get(), path_), place_of(path_), job_id);
  }
  Result<std::optional<protocol::RecordEntry>> load_record(protocol::RecordKind kind, const std::string& key) override {
    return stored::load_record(row_reader(db_.get(), path_), place_of(path_), kind, key);
  }
  Result<std::vector<protocol::RecordEntry>> list_records(const protocol::ListRecords& range) override {
    return stored::list_records(row_reader(db_.get(), path_), place_of(path_), range);
  }
  Status each_job(const std::function<Status(const JobRecord&)>& visit) override {
    return stored::each_job(row_reader(db_.get(), path_), place_of(path_), visit);
  }
  Result<StoreCounts> count() override {
    const std::string sql = stored::count_sql([](std::string_view table) { return std::string(table); });
    Statement st(db_.get(), sql.c_str());
    if (!st || sqlite3_step(st.get()) != SQLITE_ROW) return tl::unexpected(error("count the records").error());
    const auto column = [&](int i) { return static_cast<std::size_t>(sqlite3_column_int64(st.get(), i)); };
    return StoreCounts{column(0), column(1), column(2), column(3), column(4)};
  }

 private:
  Status error(std::string_view what) const { return fail(Errc::io, sqlite_failure(db_.get(), path_, what)); }

  // A statement without parameters or rows, as exec() runs it.
  Status step(CachedStatement& statement, std::string_view sql) {
    auto st = statement.use(db_.get());
    if (!st || sqlite3_step(st.get()) != SQLITE_DONE) return error(fmt::format("run `{}`", sql));
    return {};
  }

  Database db_;
  std::string path_;
  // Destroyed before db_: SQLite closes a connection only once its statements are finalized.
  CachedStatement begin_{"BEGIN IMMEDIATE;"};
  CachedStatement commit_{"COMMIT;"};
  CachedStatement save_node_{"INSERT INTO nodes (node_id, doc) VALUES (?1, ?2) "
                             "ON CONFLICT(node_id) DO UPDATE SET doc=excluded.doc;"};
  CachedStatement save_job_{"INSERT INTO jobs (job_id, state, node_id, doc, rollout_node, rerun_candidate_ms) "
                            "VALUES (?1, ?2, ?3, ?4, ?5, ?6) "
                            "ON CONFLICT(job_id) DO UPDATE SET state=excluded.state, node_id=excluded.node_id, "
                            "doc=excluded.doc, rollout_node=excluded.rollout_node, "
                            "rerun_candidate_ms=excluded.rerun_candidate_ms;"};
  CachedStatement save_record_{"INSERT INTO records (kind, key, doc, seq) VALUES (?1, ?2, ?3, ?4) "
                               "ON CONFLICT(kind, key) DO UPDATE SET doc=excluded.doc, seq=excluded.seq;"};
  CachedStatement save_lease_{"INSERT INTO leases (lease_id, state, doc) VALUES (?1, ?2, ?3) "
                              "ON CONFLICT(lease_id) DO UPDATE SET state=excluded.state, doc=excluded.doc;"};
  // Keeps the newest kEndedLeasesKept ended leases: walks ids down from the newest until it has
  // passed that many, rather than reading the whole table for each lease that ends.
  CachedStatement prune_ended_leases_{"DELETE FROM leases WHERE state='ended' AND lease_id < (SELECT lease_id FROM "
                                      "leases WHERE state='ended' ORDER BY lease_id DESC LIMIT 1 OFFSET ?1);"};
  CachedStatement append_audit_{"INSERT INTO audit (at_ms, doc) VALUES (?1, ?2);"};
};

}  // namespace

Result<std::unique_ptr<Store>> open_sqlite_store(const std::string& path) {
  int version_found = 0;
  int flags = SQLITE_OPEN_READWRITE;
  if (path == ":memory:") {
    flags |= SQLITE_OPEN_CREATE;
  } else {
    auto exists = database_file_exists(path);
    if (!exists) return tl::unexpected(exists.error());
    if (!*exists) {
      if (auto s = create_database(path); !s) return tl::unexpected(s.error());
    }
    auto version = existing_kiln_database(path);
    if (!version) return tl::unexpected(version.error());
    version_found = *version;
  }
  auto db = open_database(path, flags);
  if (!db) return tl::unexpected(db.error());
  auto store = std::make_unique<SqliteStore>(std::move(*db), path);
  if (auto s = store->init(version_found); !s) return tl::unexpected(s.error());
  return std::unique_ptr<Store>(std::move(store));
}

Result<StoreCheck> check_sqlite_store(const std::string& path) {
  auto exists = database_file_exists(path);
  if (!exists) return tl::unexpected(exists.error());
  if (!*exists) {
    return fail(Errc::not_found, fmt::format("database {} does not exist; give the database path of "
                                             "coordinator.toml (--config FILE or --database PATH)",
                                             path));
  }
  auto found = inspect(path);
  if (!found) return tl::unexpected(found.error());
  auto version = kiln_schema_version(*found, path);
  if (!version) return tl::unexpected(version.error());
  auto db = open_database(path, SQLITE_OPEN_READONLY);
  if (!db) return tl::unexpected(db.error());

  StoreCheck check;
  {
    Statement st(db->get(), "PRAGMA integrity_check;");
    if (!st) return fail(Errc::io, sqlite_failure(db->get(), path, "run its integrity check"));
    int rc = SQLITE_ROW;
    while ((rc = sqlite3_step(st.get())) == SQLITE_ROW) {
      const std::string line = reinterpret_cast<const char*>(sqlite3_column_text(st.get(), 0));
      if (line != "ok") check.problems.push_back("SQLite integrity check: " + line);
    }
    if (rc != SQLITE_DONE) check.problems.push_back(sqlite_failure(db->get(), path, "run its integrity check"));
  }
  const std::string what =
      fmt::format("{}: kiln database, schema version {}{}", path, *version,
                  found->application_id == kApplicationId
                      ? ""
                      : " (from before kiln set an application id; the coordinator adds it when it next opens the "
                        "database)");
  stored::check_records(row_reader(db->get(), path), place_of(path), what, *version, check);
  return check;
}

}  // namespace kiln::coordinator

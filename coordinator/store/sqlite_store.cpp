#include <sqlite3.h>

#include <fmt/format.h>

#include "common/protocol/json.h"
#include "coordinator/store/store.h"

namespace kiln::coordinator {
namespace {

// Version 2 added the leases and records tables and each job's bundle_id and config_hash. A
// version 1 database is upgraded in place (it gains the tables, its jobs empty attributions); a
// coordinator that reads version 1 refuses a version 2 database, so it cannot drop the
// developers' leases and the qualification records it does not know about.
constexpr int kSchemaVersion = 2;
// Ended leases kept for `kiln leases --all` after a restart; the oldest go first.
constexpr int kEndedLeasesKept = 1000;

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

class SqliteStore final : public Store {
 public:
  SqliteStore(sqlite3* db, std::string path) : db_(db), path_(std::move(path)) {}
  ~SqliteStore() override { sqlite3_close(db_); }

  Status init() {
    // WAL keeps readers off the writer's path; FULL makes each commit durable before the
    // coordinator acknowledges anything that depends on it.
    for (const char* sql : {"PRAGMA journal_mode=WAL;", "PRAGMA synchronous=FULL;", "PRAGMA busy_timeout=5000;",
                            "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);",
                            "CREATE TABLE IF NOT EXISTS nodes (node_id TEXT PRIMARY KEY, doc TEXT NOT NULL);",
                            "CREATE TABLE IF NOT EXISTS jobs (job_id INTEGER PRIMARY KEY, state TEXT NOT NULL, "
                            "node_id TEXT NOT NULL, doc TEXT NOT NULL);",
                            "CREATE TABLE IF NOT EXISTS records (kind TEXT NOT NULL, key TEXT NOT NULL, "
                            "doc TEXT NOT NULL, PRIMARY KEY (kind, key));",
                            "CREATE TABLE IF NOT EXISTS leases (lease_id INTEGER PRIMARY KEY, state TEXT NOT NULL, "
                            "doc TEXT NOT NULL);"}) {
      if (auto s = exec(sql); !s) return s;
    }
    Statement get(db_, "SELECT value FROM meta WHERE key='schema_version';");
    if (!get) return error("read the schema version");
    if (sqlite3_step(get.get()) == SQLITE_ROW) {
      int version = sqlite3_column_int(get.get(), 0);
      if (version == 1) {
        // Jobs of version 1 named no bundle; the fields are required in version 2.
        if (auto s = exec("UPDATE jobs SET doc = json_set(doc, '$.summary.bundle_id', '', "
                          "'$.summary.config_hash', '');");
            !s) {
          return s;
        }
        return exec(fmt::format("UPDATE meta SET value='{}' WHERE key='schema_version';", kSchemaVersion).c_str());
      }
      if (version != kSchemaVersion) {
        return fail(Errc::config, fmt::format("{} has schema version {}, this coordinator reads version {}; "
                                              "use a matching coordinator or a new database",
                                              path_, version, kSchemaVersion));
      }
      return {};
    }
    return exec(fmt::format("INSERT INTO meta (key, value) VALUES ('schema_version', '{}');", kSchemaVersion).c_str());
  }

  Status save_node(const NodeRecord& node) override {
    Statement st(db_, "INSERT INTO nodes (node_id, doc) VALUES (?1, ?2) "
                      "ON CONFLICT(node_id) DO UPDATE SET doc=excluded.doc;");
    if (!st) return error("prepare a node save");
    const std::string doc = protocol::to_json(node).dump();
    sqlite3_bind_text(st.get(), 1, node.summary.node_id.c_str(), -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st.get(), 2, doc.c_str(), -1, SQLITE_TRANSIENT);
    if (sqlite3_step(st.get()) != SQLITE_DONE) return error("save node " + node.summary.node_id);
    return {};
  }

  Status save_job(const JobRecord& job) override {
    Statement st(db_, "INSERT INTO jobs (job_id, state, node_id, doc) VALUES (?1, ?2, ?3, ?4) "
                      "ON CONFLICT(job_id) DO UPDATE SET state=excluded.state, node_id=excluded.node_id, "
                      "doc=excluded.doc;");
    if (!st) return error("prepare a job save");
    const std::string doc = protocol::to_json(job).dump();
    const std::string state(protocol::enum_name(job.summary.state));
    sqlite3_bind_int64(st.get(), 1, static_cast<sqlite3_int64>(job.summary.job_id));
    sqlite3_bind_text(st.get(), 2, state.c_str(), -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st.get(), 3, job.summary.node_id.c_str(), -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st.get(), 4, doc.c_str(), -1, SQLITE_TRANSIENT);
    if (sqlite3_step(st.get()) != SQLITE_DONE) return error(fmt::format("save job {}", job.summary.job_id));
    return {};
  }

  Status save_record(const protocol::RecordEntry& record) override {
    Statement st(db_, "INSERT INTO records (kind, key, doc) VALUES (?1, ?2, ?3) "
                      "ON CONFLICT(kind, key) DO UPDATE SET doc=excluded.doc;");
    if (!st) return error("prepare a record save");
    const std::string kind(protocol::enum_name(record.kind));
    const std::string doc = protocol::to_json(record).dump();
    sqlite3_bind_text(st.get(), 1, kind.c_str(), -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st.get(), 2, record.key.c_str(), -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st.get(), 3, doc.c_str(), -1, SQLITE_TRANSIENT);
    if (sqlite3_step(st.get()) != SQLITE_DONE) return error(fmt::format("save {} record {}", kind, record.key));
    return {};
  }

  Status save_lease(const LeaseRecord& lease) override {
    Statement st(db_, "INSERT INTO leases (lease_id, state, doc) VALUES (?1, ?2, ?3) "
                      "ON CONFLICT(lease_id) DO UPDATE SET state=excluded.state, doc=excluded.doc;");
    if (!st) return error("prepare a lease save");
    const std::string doc = protocol::to_json(lease).dump();
    const std::string state(protocol::enum_name(lease.summary.state));
    sqlite3_bind_int64(st.get(), 1, static_cast<sqlite3_int64>(lease.summary.lease_id));
    sqlite3_bind_text(st.get(), 2, state.c_str(), -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st.get(), 3, doc.c_str(), -1, SQLITE_TRANSIENT);
    if (sqlite3_step(st.get()) != SQLITE_DONE) return error(fmt::format("save lease L{}", lease.summary.lease_id));
    if (lease.summary.state != protocol::LeaseState::ended) return {};
    return exec(fmt::format("DELETE FROM leases WHERE state='ended' AND lease_id NOT IN (SELECT lease_id FROM "
                            "leases WHERE state='ended' ORDER BY lease_id DESC LIMIT {});",
                            kEndedLeasesKept)
                    .c_str());
  }

  Result<Snapshot> load() override {
    Snapshot snapshot;
    {
      Statement st(db_, "SELECT doc FROM nodes ORDER BY node_id;");
      if (!st) return tl::unexpected(error("read nodes").error());
      while (sqlite3_step(st.get()) == SQLITE_ROW) {
        auto node = parse<NodeRecord>(st.get(), "node");
        if (!node) return tl::unexpected(node.error());
        snapshot.nodes.push_back(std::move(*node));
      }
    }
    {
      Statement st(db_, "SELECT doc FROM jobs ORDER BY job_id;");
      if (!st) return tl::unexpected(error("read jobs").error());
      while (sqlite3_step(st.get()) == SQLITE_ROW) {
        auto job = parse<JobRecord>(st.get(), "job");
        if (!job) return tl::unexpected(job.error());
        snapshot.jobs.push_back(std::move(*job));
      }
    }
    {
      Statement st(db_, "SELECT doc FROM records ORDER BY kind, key;");
      if (!st) return tl::unexpected(error("read records").error());
      while (sqlite3_step(st.get()) == SQLITE_ROW) {
        auto record = parse<protocol::RecordEntry>(st.get(), "qualification");
        if (!record) return tl::unexpected(record.error());
        snapshot.records.push_back(std::move(*record));
      }
    }
    {
      Statement st(db_, "SELECT doc FROM leases ORDER BY lease_id;");
      if (!st) return tl::unexpected(error("read leases").error());
      while (sqlite3_step(st.get()) == SQLITE_ROW) {
        auto lease = parse<LeaseRecord>(st.get(), "lease");
        if (!lease) return tl::unexpected(lease.error());
        snapshot.leases.push_back(std::move(*lease));
      }
    }
    return snapshot;
  }

 private:
  template <class T>
  Result<T> parse(sqlite3_stmt* st, std::string_view what) {
    const auto* text = reinterpret_cast<const char*>(sqlite3_column_text(st, 0));
    auto doc = nlohmann::json::parse(text ? text : "", nullptr, /*allow_exceptions=*/false);
    if (doc.is_discarded()) {
      return fail(Errc::io, fmt::format("{} holds a {} record that is not JSON; restore the database from a backup",
                                        path_, what));
    }
    auto record = protocol::from_json<T>(doc);
    if (!record) {
      return fail(Errc::io, fmt::format("{} holds an invalid {} record ({}); restore the database from a backup",
                                        path_, what, record.error().message));
    }
    return record;
  }

  Status exec(const char* sql) {
    char* message = nullptr;
    if (sqlite3_exec(db_, sql, nullptr, nullptr, &message) != SQLITE_OK) {
      std::string text = message ? message : "unknown error";
      sqlite3_free(message);
      return fail(Errc::io, fmt::format("database {}: {} (while running `{}`)", path_, text, sql));
    }
    return {};
  }

  Status error(const std::string& what) const {
    return fail(Errc::io, fmt::format("database {}: cannot {}: {}", path_, what, sqlite3_errmsg(db_)));
  }

  sqlite3* db_;
  std::string path_;
};

}  // namespace

Result<std::unique_ptr<Store>> open_sqlite_store(const std::string& path) {
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX,
                      nullptr) != SQLITE_OK) {
    std::string message = db ? sqlite3_errmsg(db) : "out of memory";
    sqlite3_close(db);
    return fail(Errc::io, fmt::format("cannot open database {}: {}; check the directory exists and is writable",
                                      path, message));
  }
  auto store = std::make_unique<SqliteStore>(db, path);
  if (auto s = store->init(); !s) return tl::unexpected(s.error());
  return std::unique_ptr<Store>(std::move(store));
}

}  // namespace kiln::coordinator

#include <libpq-fe.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "coordinator/core/job_retention.h"
#include "coordinator/store/store.h"
#include "coordinator/store/stored_records.h"

namespace kiln::coordinator {
namespace postgres {
namespace {

// Held while a coordinator inspects and upgrades the schema: "KILN", as SQLite's application id.
constexpr std::int64_t kSchemaLockKey = 0x4B494C4E;
// The active coordinator's session lock: held while its connection lives (pg_locks shows a
// one-key advisory lock as classid 0, objid the key, objsubid 1).
constexpr std::int64_t kLeaderLockKey = 0x4B494C41;

// Each step brings a database from the version before it to its own, in the same transaction
// as the schema_version row that records it. The steps are those of SQLite's versions (see
// stored_records.h) and safe to run again, so a database is upgraded whatever it lacks. The
// documents are TEXT, as in SQLite, so that check-store reports a damaged one rather than the
// server refusing to hold it.
constexpr const char* kMigrations[] = {
    // 1: nodes and jobs.
    "CREATE SCHEMA IF NOT EXISTS kiln;"
    "CREATE TABLE IF NOT EXISTS kiln.schema_version (version INTEGER PRIMARY KEY, "
    "applied_at TIMESTAMPTZ NOT NULL DEFAULT now());"
    "CREATE TABLE IF NOT EXISTS kiln.nodes (node_id TEXT PRIMARY KEY, doc TEXT NOT NULL);"
    "CREATE TABLE IF NOT EXISTS kiln.jobs (job_id BIGINT PRIMARY KEY, state TEXT NOT NULL, node_id TEXT NOT NULL, "
    "doc TEXT NOT NULL);",
    // 2: qualification records, leases, and each job's bundle attribution.
    "CREATE TABLE IF NOT EXISTS kiln.records (kind TEXT NOT NULL, key TEXT NOT NULL, doc TEXT NOT NULL, "
    "PRIMARY KEY (kind, key));"
    "CREATE TABLE IF NOT EXISTS kiln.leases (lease_id BIGINT PRIMARY KEY, state TEXT NOT NULL, doc TEXT NOT NULL);"
    "UPDATE kiln.jobs SET doc = jsonb_set(jsonb_set(doc::jsonb, '{summary,bundle_id}', '\"\"'), "
    "'{summary,config_hash}', '\"\"')::text;",
    // 3: nodes never released from quarantine.
    "UPDATE kiln.nodes SET doc = jsonb_set(doc::jsonb, '{released_from_quarantine_wall_ms}', '0')::text;",
    // 4: no rendezvous address, no gang, no cancel reason, no artifacts.
    "UPDATE kiln.nodes SET doc = jsonb_set(doc::jsonb, '{summary,rendezvous_address}', '\"\"')::text;"
    "UPDATE kiln.jobs SET doc = (jsonb_set(doc::jsonb, '{summary}', (doc::jsonb -> 'summary') || "
    "'{\"gang_id\": 0, \"gang_rank\": 0, \"gang_size\": 0}') || '{\"cancel_reason\": \"\", \"artifacts\": []}')::text;",
    // 5: the audit log, which the server itself keeps append-only (as SQLite's triggers do), and
    // node labels (none until the agent's next hello).
    "CREATE TABLE IF NOT EXISTS kiln.audit (seq BIGSERIAL PRIMARY KEY, at_ms BIGINT NOT NULL, doc TEXT NOT NULL);"
    "CREATE INDEX IF NOT EXISTS audit_at ON kiln.audit (at_ms);"
    "CREATE OR REPLACE FUNCTION kiln.audit_append_only() RETURNS trigger LANGUAGE plpgsql AS "
    "$$ BEGIN RAISE EXCEPTION 'the kiln audit log is append-only'; END $$;"
    "DROP TRIGGER IF EXISTS audit_no_change ON kiln.audit;"
    "CREATE TRIGGER audit_no_change BEFORE UPDATE OR DELETE ON kiln.audit "
    "FOR EACH ROW EXECUTE FUNCTION kiln.audit_append_only();"
    "DROP TRIGGER IF EXISTS audit_no_truncate ON kiln.audit;"
    "CREATE TRIGGER audit_no_truncate BEFORE TRUNCATE ON kiln.audit "
    "FOR EACH STATEMENT EXECUTE FUNCTION kiln.audit_append_only();"
    "UPDATE kiln.nodes SET doc = jsonb_set(doc::jsonb, '{summary,labels}', '[]')::text;",
    // 6: the node each rollout install was for, and the indexes that let a coordinator start from
    // the live jobs only (stored_records.h).
    "ALTER TABLE kiln.jobs ADD COLUMN IF NOT EXISTS rollout_node TEXT NOT NULL DEFAULT '';"
    "ALTER TABLE kiln.jobs ADD COLUMN IF NOT EXISTS rerun_candidate_ms BIGINT NOT NULL DEFAULT 0;"
    "CREATE INDEX IF NOT EXISTS jobs_by_state ON kiln.jobs (state);"
    "CREATE INDEX IF NOT EXISTS jobs_by_rollout_node ON kiln.jobs (rollout_node, job_id) WHERE rollout_node <> '';"
    "CREATE INDEX IF NOT EXISTS jobs_by_rerun_candidate ON kiln.jobs (rerun_candidate_ms) "
    "WHERE rerun_candidate_ms > 0;",
    // 7: each record's seq, so that records are read a page at a time rather than held.
    "ALTER TABLE kiln.records ADD COLUMN IF NOT EXISTS seq BIGINT NOT NULL DEFAULT 0;",
};
static_assert(std::size(kMigrations) == stored::kSchemaVersion, "one migration per schema version");

struct ClearResult {
  void operator()(PGresult* result) const { PQclear(result); }
};
using QueryResult = std::unique_ptr<PGresult, ClearResult>;

struct FinishConnection {
  void operator()(PGconn* connection) const { PQfinish(connection); }
};
using Connection = std::unique_ptr<PGconn, FinishConnection>;

std::string trimmed(const char* message) {
  std::string text = message ? message : "";
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  return text;
}

// Parses a connection string as libpq does; an error says why it is not one.
Result<std::map<std::string, std::string>> parse_url(const std::string& url) {
  char* error = nullptr;
  PQconninfoOption* options = PQconninfoParse(url.c_str(), &error);
  if (!options) {
    const std::string why = error ? trimmed(error) : "out of memory";
    PQfreemem(error);
    return fail(Errc::config, why);
  }
  std::map<std::string, std::string> set;
  for (const PQconninfoOption* o = options; o->keyword; ++o) {
    if (o->val) set.emplace(o->keyword, o->val);
  }
  PQconninfoFree(options);
  return set;
}

std::string restore_advice() {
  return "stop the coordinator, restore the database from your latest backup (docs/operations.md, \"Backups\") "
         "and run `kiln-coordinator check-store` on what you restored";
}

std::string foreign_remedy() {
  return "kiln keeps its tables in the schema kiln and writes only to a schema it made: set [store] url in "
         "coordinator.toml to kiln's own database, or to one without a schema kiln, where the coordinator makes it";
}

Result<std::string> read_password(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    return fail(Errc::config, fmt::format("password_file {}: {}; write the PostgreSQL role's password there "
                                          "(mode 0600) or fix the path",
                                          path, std::strerror(errno)));
  }
  if ((st.st_mode & 077) != 0) {
    return fail(Errc::config, fmt::format("password_file {} can be read by others (mode {:04o}); run `chmod 600 {}`",
                                          path, st.st_mode & 07777, path));
  }
  std::ifstream in(path, std::ios::binary);
  std::string password((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (!in.good() && !in.eof()) {
    return fail(Errc::config, fmt::format("password_file {} cannot be read; check its owner and mode", path));
  }
  while (!password.empty() && (password.back() == '\n' || password.back() == '\r')) password.pop_back();
  if (password.empty()) {
    return fail(Errc::config, fmt::format("password_file {} is empty; write the PostgreSQL role's password there",
                                          path));
  }
  return password;
}

// A connection to kiln's database and how errors name it.
class Session {
 public:
  Session(Connection connection, std::string name) : connection_(std::move(connection)), name_(std::move(name)) {}

  const std::string& name() const { return name_; }
  stored::Place place() const { return {name_, restore_advice()}; }

  // One statement with its values bound as parameters.
  Result<QueryResult> run(std::string_view doing, const char* sql, const std::vector<std::string>& values = {}) {
    std::vector<const char*> bound;
    bound.reserve(values.size());
    for (const std::string& value : values) bound.push_back(value.c_str());
    QueryResult result(PQexecParams(connection_.get(), sql, static_cast<int>(bound.size()), nullptr, bound.data(),
                                    nullptr, nullptr, /*resultFormat=*/0));
    return checked(std::move(result), doing);
  }

  // Statements of kiln's own, no data in them: migrations and session settings.
  Status run_script(std::string_view doing, const char* sql) {
    auto result = checked(QueryResult(PQexec(connection_.get(), sql)), doing);
    if (!result) return tl::unexpected(result.error());
    return {};
  }

  // Runs `body` in one transaction: committed when it succeeds, rolled back when it fails.
  // Inside a group of writes (begin() to commit()) it is a savepoint of that transaction instead,
  // so the group still commits as one.
  Status transaction(std::string_view doing, const std::function<Status()>& body) {
    const bool nested = PQtransactionStatus(connection_.get()) == PQTRANS_INTRANS;
    if (auto s = run_script(doing, nested ? "SAVEPOINT kiln_step;" : "BEGIN;"); !s) return s;
    Status done = body();
    if (!done) {
      (void)run_script(doing, nested ? "ROLLBACK TO SAVEPOINT kiln_step;" : "ROLLBACK;");
      return done;
    }
    return run_script(doing, nested ? "RELEASE SAVEPOINT kiln_step;" : "COMMIT;");
  }

  // Reads kiln's tables for the shared loading and checking (stored_records.h).
  stored::RowReader row_reader() {
    return [this](const stored::RowQuery& query, const std::function<Status(const stored::Row&)>& visit) -> Status {
      const std::string sql = stored::select_sql(query, fmt::format("kiln.{}", query.table), " COLLATE \"C\"");
      auto result = run(fmt::format("read the {} table", query.table), sql.c_str(), query.parameters);
      if (!result) return tl::unexpected(result.error());
      PGresult* rows = result->get();
      const int doc_column = PQnfields(rows) - 1;
      for (int r = 0; r < PQntuples(rows); ++r) {
        stored::Row row;
        for (int c = 0; c < doc_column; ++c) row.keys.emplace_back(PQgetvalue(rows, r, c));
        if (!PQgetisnull(rows, r, doc_column)) row.doc = PQgetvalue(rows, r, doc_column);
        if (auto s = visit(row); !s) return s;
      }
      return {};
    };
  }

 private:
  Result<QueryResult> checked(QueryResult result, std::string_view doing) {
    const ExecStatusType status = result ? PQresultStatus(result.get()) : PGRES_FATAL_ERROR;
    if (status == PGRES_COMMAND_OK || status == PGRES_TUPLES_OK) return result;
    const std::string why = trimmed(result ? PQresultErrorMessage(result.get()) : PQerrorMessage(connection_.get()));
    if (PQstatus(connection_.get()) == CONNECTION_BAD) {
      return fail(Errc::io, fmt::format("{}: cannot {}: the connection to the server was lost ({}); check that the "
                                        "server is running",
                                        name_, doing, why));
    }
    return fail(Errc::io, fmt::format("{}: cannot {}: {}", name_, doing, why));
  }

  Connection connection_;
  std::string name_;
};

std::string server_name(const std::string& database, const std::string& host, const std::string& port,
                        const std::string& user) {
  const std::string at_port = port.empty() ? "5432" : port;
  return fmt::format("PostgreSQL database {} on {} as {}", database.empty() ? "(the user's name)" : database,
                     host.empty() ? "the local default socket, port " + at_port : host + ":" + at_port,
                     user.empty() ? "(the system user)" : user);
}

Result<Session> connect(const PostgresLocation& location, bool read_only) {
  std::string password;
  if (!location.password_file.empty()) {
    auto read = read_password(location.password_file);
    if (!read) return tl::unexpected(read.error());
    password = std::move(*read);
  }
  // The url's own settings override the defaults before it; the password file overrides the url.
  std::vector<const char*> keywords = {"connect_timeout", "application_name", "dbname"};
  std::vector<const char*> values = {"10", "kiln-coordinator", location.url.c_str()};
  if (!password.empty()) {
    keywords.push_back("password");
    values.push_back(password.c_str());
  }
  keywords.push_back(nullptr);
  values.push_back(nullptr);
  Connection connection(PQconnectdbParams(keywords.data(), values.data(), /*expand_dbname=*/1));
  if (!connection) return fail(Errc::io, "cannot connect to PostgreSQL: libpq is out of memory");
  const auto text = [](const char* value) { return std::string(value ? value : ""); };
  const std::string name = server_name(text(PQdb(connection.get())), text(PQhost(connection.get())),
                                       text(PQport(connection.get())), text(PQuser(connection.get())));
  if (PQstatus(connection.get()) != CONNECTION_OK) {
    return fail(Errc::unavailable,
                fmt::format("cannot connect to the {}: {}; check that the server is running and accepts connections "
                            "there, that [store] url in coordinator.toml names it, and that the role exists with the "
                            "password in password_file (docs/operations.md, \"PostgreSQL\")",
                            name, trimmed(PQerrorMessage(connection.get()))));
  }
  Session session(std::move(connection), name);
  // synchronous_commit on: a commit returns once its WAL is on the server's disk, whatever the
  // server's default, so the coordinator acknowledges only what is durable. Notices (such as
  // "already exists, skipping") are not for the coordinator's users.
  if (auto s = session.run_script("set up the session",
                                  read_only ? "SET client_min_messages TO warning; SET default_transaction_read_only "
                                              "TO on;"
                                            : "SET client_min_messages TO warning; SET synchronous_commit TO on;");
      !s) {
    return tl::unexpected(s.error());
  }
  return session;
}

// What the database's schema kiln holds: nothing (0: a new database), or kiln's tables at a
// version this coordinator can read. Anything else is refused.
Result<int> kiln_schema_version(Session& session) {
  auto tables = session.run("list the tables of the schema kiln",
                            "SELECT c.relname FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n "
                            "ON n.oid = c.relnamespace WHERE n.nspname = 'kiln' AND c.relkind IN ('r', 'p', 'v', 'm', "
                            "'f') ORDER BY c.relname;");
  if (!tables) return tl::unexpected(tables.error());
  std::vector<std::string> names;
  for (int r = 0; r < PQntuples(tables->get()); ++r) names.emplace_back(PQgetvalue(tables->get(), r, 0));
  if (names.empty()) return 0;
  if (std::find(names.begin(), names.end(), "schema_version") == names.end()) {
    return fail(Errc::config, fmt::format("the schema kiln of the {} holds tables kiln did not create ({}); {}",
                                          session.name(), fmt::join(names, ", "), foreign_remedy()));
  }
  auto version = session.run("read the schema version", "SELECT max(version) FROM kiln.schema_version;");
  if (!version) return tl::unexpected(version.error());
  if (PQgetisnull(version->get(), 0, 0)) {
    return fail(Errc::io, fmt::format("the {} holds kiln's tables without a schema version (kiln.schema_version "
                                      "is empty); {}",
                                      session.name(), restore_advice()));
  }
  const int found = std::atoi(PQgetvalue(version->get(), 0, 0));
  if (found < 1 || found > stored::kSchemaVersion) {
    return fail(Errc::config, fmt::format("the {} has schema version {}, this coordinator reads version {}; use a "
                                          "matching coordinator or a new database",
                                          session.name(), found, stored::kSchemaVersion));
  }
  return found;
}

class PostgresStore final : public Store {
 public:
  explicit PostgresStore(Session session) : session_(std::move(session)) {}

  // Brings the schema to this coordinator's version, or refuses the database untouched.
  Status migrate() {
    return session_.transaction("upgrade the schema", [this]() -> Status {
      if (auto s = session_.run("wait for the schema lock", "SELECT pg_advisory_xact_lock($1);",
                                {std::to_string(kSchemaLockKey)});
          !s) {
        return tl::unexpected(s.error());
      }
      auto found = kiln_schema_version(session_);
      if (!found) return tl::unexpected(found.error());
      for (int version = *found + 1; version <= stored::kSchemaVersion; ++version) {
        const std::string doing = fmt::format("upgrade the schema to version {}", version);
        if (auto s = session_.run_script(doing, kMigrations[version - 1]); !s) return s;
        if (version == 6) {
          // Each job's rollout node and rerun candidacy, read once from the documents.
          const auto path = [](std::string_view dotted) {
            std::string braced(dotted);
            std::replace(braced.begin(), braced.end(), '.', ',');
            return fmt::format("(doc::jsonb #>> '{{{}}}')", braced);
          };
          const auto number = [&](std::string_view dotted) { return path(dotted) + "::bigint"; };
          const std::string fill = stored::fill_job_columns_sql("kiln.jobs", path, number);
          if (auto s = session_.run_script(doing, fill.c_str()); !s) {
            return s;
          }
        }
        if (version == 7) {
          // Each record's seq, read once from its document; then the index, built once.
          const auto number = [](std::string_view field) { return fmt::format("(doc::jsonb ->> '{}')::bigint", field); };
          const std::string fill = stored::fill_record_seq_sql("kiln.records", number) +
                                   "CREATE INDEX IF NOT EXISTS records_by_seq ON kiln.records (kind, seq, key);";
          if (auto s = session_.run_script(doing, fill.c_str()); !s) return s;
        }
        if (auto s = session_.run(doing, "INSERT INTO kiln.schema_version (version) VALUES ($1);",
                                  {std::to_string(version)});
            !s) {
          return tl::unexpected(s.error());
        }
      }
      return {};
    });
  }

  Status save_node(const NodeRecord& node) override {
    return done(session_.run("save node " + node.summary.node_id,
                             "INSERT INTO kiln.nodes (node_id, doc) VALUES ($1, $2) "
                             "ON CONFLICT (node_id) DO UPDATE SET doc = EXCLUDED.doc;",
                             {node.summary.node_id, protocol::to_json(node).dump()}));
  }

  Status save_job(const JobRecord& job) override {
    return done(session_.run(fmt::format("save job {}", job.summary.job_id),
                             "INSERT INTO kiln.jobs (job_id, state, node_id, doc, rollout_node, rerun_candidate_ms) "
                             "VALUES ($1, $2, $3, $4, $5, $6) "
                             "ON CONFLICT (job_id) DO UPDATE SET state = EXCLUDED.state, node_id = EXCLUDED.node_id, "
                             "doc = EXCLUDED.doc, rollout_node = EXCLUDED.rollout_node, "
                             "rerun_candidate_ms = EXCLUDED.rerun_candidate_ms;",
                             {std::to_string(static_cast<std::int64_t>(job.summary.job_id)),
                              std::string(protocol::enum_name(job.summary.state)), job.summary.node_id,
                              protocol::to_json(job).dump(), stored::rollout_node_column(job),
                              std::to_string(stored::rerun_candidate_column(job))}));
  }

  Status save_record(const protocol::RecordEntry& record) override {
    const std::string kind(protocol::enum_name(record.kind));
    return done(session_.run(fmt::format("save {} record {}", kind, record.key),
                             "INSERT INTO kiln.records (kind, key, doc, seq) VALUES ($1, $2, $3, $4) "
                             "ON CONFLICT (kind, key) DO UPDATE SET doc = EXCLUDED.doc, seq = EXCLUDED.seq;",
                             {kind, record.key, protocol::to_json(record).dump(),
                              std::to_string(static_cast<std::int64_t>(record.seq))}));
  }

  Status save_lease(const LeaseRecord& lease) override {
    const std::string doing = fmt::format("save lease L{}", lease.summary.lease_id);
    // The lease and the trimming of old ended ones commit together: one write to the disk.
    return session_.transaction(doing, [&]() -> Status {
      if (auto s = session_.run(doing,
                                "INSERT INTO kiln.leases (lease_id, state, doc) VALUES ($1, $2, $3) "
                                "ON CONFLICT (lease_id) DO UPDATE SET state = EXCLUDED.state, doc = EXCLUDED.doc;",
                                {std::to_string(static_cast<std::int64_t>(lease.summary.lease_id)),
                                 std::string(protocol::enum_name(lease.summary.state)),
                                 protocol::to_json(lease).dump()});
          !s) {
        return tl::unexpected(s.error());
      }
      if (lease.summary.state != protocol::LeaseState::ended) return {};
      return done(session_.run(doing,
                               "DELETE FROM kiln.leases WHERE state = 'ended' AND lease_id < (SELECT lease_id "
                               "FROM kiln.leases WHERE state = 'ended' ORDER BY lease_id DESC LIMIT 1 OFFSET $1);",
                               {std::to_string(stored::kEndedLeasesKept - 1)}));
    });
  }

  Status begin() override { return session_.run_script("begin a group of writes", "BEGIN;"); }
  Status commit() override {
    Status committed = session_.run_script("commit a group of writes", "COMMIT;");
    if (!committed) (void)session_.run_script("roll back a group of writes", "ROLLBACK;");
    return committed;
  }

  Status append_audit(const protocol::AuditEntry& entry) override {
    return done(session_.run("append to the audit log: " + entry.action,
                             "INSERT INTO kiln.audit (at_ms, doc) VALUES ($1, $2);",
                             {std::to_string(entry.at_ms), protocol::to_json(entry).dump()}));
  }

  Result<std::vector<protocol::AuditEntry>> read_audit(const protocol::ListAudit& query) override {
    auto result = session_.run("read the audit log",
                               "SELECT seq, doc FROM kiln.audit WHERE at_ms >= $1 AND seq > $2 ORDER BY seq LIMIT $3;",
                               {std::to_string(query.since_ms), std::to_string(static_cast<std::int64_t>(query.after_seq)),
                                std::to_string(static_cast<std::int64_t>(query.limit))});
    if (!result) return tl::unexpected(result.error());
    std::vector<protocol::AuditEntry> entries;
    for (int r = 0; r < PQntuples(result->get()); ++r) {
      auto entry = stored::parse_record<protocol::AuditEntry>(std::string(PQgetvalue(result->get(), r, 1)),
                                                              session_.place(), "audit");
      if (!entry) return tl::unexpected(entry.error());
      entry->seq = std::stoull(PQgetvalue(result->get(), r, 0));
      entries.push_back(std::move(*entry));
    }
    return entries;
  }

  Result<Snapshot> load() override { return stored::load_snapshot(session_.row_reader(), session_.place()); }
  Result<Snapshot> load_live(std::size_t ended_jobs_in_memory, TimeMs reruns_since_ms) override {
    return stored::load_snapshot(session_.row_reader(), session_.place(),
                                 stored::jobs_held_at_start_where(ended_jobs_in_memory, reruns_since_ms), true);
  }
  Result<std::optional<JobRecord>> load_job(std::uint64_t job_id) override {
    return stored::load_job(session_.row_reader(), session_.place(), job_id);
  }
  Result<std::optional<protocol::RecordEntry>> load_record(protocol::RecordKind kind, const std::string& key) override {
    return stored::load_record(session_.row_reader(), session_.place(), kind, key);
  }
  Result<std::vector<protocol::RecordEntry>> list_records(const protocol::ListRecords& range) override {
    return stored::list_records(session_.row_reader(), session_.place(), range);
  }
  Status each_job(const std::function<Status(const JobRecord&)>& visit) override {
    return stored::each_job(session_.row_reader(), session_.place(), visit);
  }
  Result<StoreCounts> count() override {
    const std::string sql = stored::count_sql([](std::string_view table) { return fmt::format("kiln.{}", table); });
    auto result = session_.run("count the records", sql.c_str());
    if (!result) return tl::unexpected(result.error());
    const auto column = [&](int i) { return static_cast<std::size_t>(std::stoull(PQgetvalue(result->get(), 0, i))); };
    return StoreCounts{column(0), column(1), column(2), column(3), column(4)};
  }

  bool shared() const override { return true; }

  Result<bool> try_lead(const std::string& name) override {
    // The name shows in pg_stat_activity, where a standby reads who leads; PostgreSQL keeps 63 bytes of it.
    if (auto s = session_.run("name this session", "SELECT set_config('application_name', $1, false);",
                              {name.substr(0, 63)});
        !s) {
      return tl::unexpected(s.error());
    }
    auto taken = session_.run("try to take the coordinators' leadership", "SELECT pg_try_advisory_lock($1);",
                              {std::to_string(kLeaderLockKey)});
    if (!taken) return tl::unexpected(taken.error());
    return std::string_view(PQgetvalue(taken->get(), 0, 0)) == "t";
  }

  Result<std::string> leader() override {
    auto holder = session_.run(
        "read who leads",
        "SELECT a.application_name, coalesce(host(a.client_addr), 'a local socket'), "
        "to_char(a.backend_start AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS') FROM pg_catalog.pg_locks l "
        "JOIN pg_catalog.pg_stat_activity a ON a.pid = l.pid WHERE l.locktype = 'advisory' AND l.classid = 0 "
        "AND l.objid = $1 AND l.objsubid = 1 AND l.granted;",
        {std::to_string(kLeaderLockKey)});
    if (!holder) return tl::unexpected(holder.error());
    if (PQntuples(holder->get()) == 0) return std::string("no coordinator (the leadership is free)");
    return fmt::format("{}, connected from {} since {} UTC", PQgetvalue(holder->get(), 0, 0),
                       PQgetvalue(holder->get(), 0, 1), PQgetvalue(holder->get(), 0, 2));
  }

  Status confirm_lead() override {
    auto held = session_.run("confirm the coordinators' leadership",
                             "SELECT count(*) FROM pg_catalog.pg_locks WHERE locktype = 'advisory' AND classid = 0 "
                             "AND objid = $1 AND objsubid = 1 AND granted AND pid = pg_backend_pid();",
                             {std::to_string(kLeaderLockKey)});
    if (!held) return tl::unexpected(held.error());
    if (std::string_view(PQgetvalue(held->get(), 0, 0)) != "1") {
      return fail(Errc::unavailable, fmt::format("this coordinator no longer leads the {}", session_.name()));
    }
    return {};
  }

 private:
  static Status done(Result<QueryResult> result) {
    if (!result) return tl::unexpected(result.error());
    return {};
  }

  Session session_;
};

}  // namespace
}  // namespace postgres

Result<std::unique_ptr<Store>> open_postgres_store(const PostgresLocation& location) {
  auto session = postgres::connect(location, /*read_only=*/false);
  if (!session) return tl::unexpected(session.error());
  auto store = std::make_unique<postgres::PostgresStore>(std::move(*session));
  if (auto s = store->migrate(); !s) return tl::unexpected(s.error());
  return std::unique_ptr<Store>(std::move(store));
}

std::string postgres_server_name(const PostgresLocation& location) {
  auto set = postgres::parse_url(location.url);
  if (!set) return "PostgreSQL (an invalid url)";
  const auto get = [&](const char* keyword, const char* environment) {
    if (auto it = set->find(keyword); it != set->end()) return it->second;
    const char* value = std::getenv(environment);
    return std::string(value ? value : "");
  };
  return postgres::server_name(get("dbname", "PGDATABASE"), get("host", "PGHOST"), get("port", "PGPORT"),
                               get("user", "PGUSER"));
}

std::optional<std::string> postgres_url_problem(const std::string& url) {
  auto set = postgres::parse_url(url);
  if (!set) return fmt::format("is not a libpq connection string ({})", set.error().message);
  if (set->count("password")) {
    return std::string("holds a password; put it in password_file (mode 0600) instead, so that coordinator.toml "
                       "can be read without it");
  }
  return std::nullopt;
}

std::optional<std::string> postgres_password_file_problem(const std::string& path) {
  auto password = postgres::read_password(path);
  if (!password) return password.error().message;
  return std::nullopt;
}

Result<StoreCheck> check_postgres_store(const PostgresLocation& location) {
  auto session = postgres::connect(location, /*read_only=*/true);
  if (!session) return tl::unexpected(session.error());
  auto version = postgres::kiln_schema_version(*session);
  if (!version) return tl::unexpected(version.error());
  if (*version == 0) {
    return fail(Errc::not_found, fmt::format("the {} holds no kiln database (it has no schema kiln with kiln's "
                                             "tables); check [store] url in coordinator.toml",
                                             session->name()));
  }
  StoreCheck check;
  stored::check_records(session->row_reader(), session->place(),
                        fmt::format("{}: kiln database, schema version {}", session->name(), *version), *version,
                        check);
  return check;
}

}  // namespace kiln::coordinator

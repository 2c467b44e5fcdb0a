// Where the coordinator keeps what it acknowledged. The shell saves every record the core
// asks it to before it sends any later reply, so a restart never loses an accepted job, a
// developer's lease or a stored result.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/enum_names.h"
#include "common/error.h"
#include "common/time.h"
#include "coordinator/core/records.h"

namespace kiln::coordinator {

// How many of each kind of record a store holds.
struct StoreCounts {
  std::size_t nodes = 0;
  std::size_t jobs = 0;
  std::size_t records = 0;
  std::size_t leases = 0;
  std::size_t audit_lines = 0;
  bool operator==(const StoreCounts&) const = default;
};

class Store {
 public:
  virtual ~Store() = default;
  virtual Status save_node(const NodeRecord& node) = 0;
  virtual Status save_job(const JobRecord& job) = 0;
  virtual Status save_record(const protocol::RecordEntry& record) = 0;
  virtual Status save_lease(const LeaseRecord& lease) = 0;
  // The audit log is append-only: lines are added, never changed or removed.
  virtual Status append_audit(const protocol::AuditEntry& entry) = 0;
  // Its lines at or after `since_ms` and after `after_seq`, oldest first, at most `limit`.
  virtual Result<std::vector<protocol::AuditEntry>> read_audit(const protocol::ListAudit& query) = 0;
  // Everything stored (what `migrate-store` copies).
  virtual Result<Snapshot> load() = 0;
  // What a coordinator starts from: every node and lease, the qualification records (whole those
  // record_book.h holds in memory, of each other kind the kind, key and seq of its newest), and of the jobs
  // those job_retention.h says it holds (jobs_held_at_start), so that starting up reads the live
  // state, not the whole history.
  virtual Result<Snapshot> load_live(std::size_t ended_jobs_in_memory, TimeMs reruns_since_ms) = 0;
  // One job as stored, nullopt when there is none.
  virtual Result<std::optional<JobRecord>> load_job(std::uint64_t job_id) = 0;
  // One qualification record as stored, nullopt when there is none.
  virtual Result<std::optional<protocol::RecordEntry>> load_record(protocol::RecordKind kind,
                                                                   const std::string& key) = 0;
  // The records of `range`'s kind within its seqs, in its order (oldest or newest first), at most
  // range.limit, and none after the one whose document takes them past protocol::kRecordListBytes:
  // through an index, so a page costs the same however many are stored.
  virtual Result<std::vector<protocol::RecordEntry>> list_records(const protocol::ListRecords& range) = 0;
  // Every job, in id order, a page at a time: however many are stored, only a page is in
  // memory. The first error, the store's or `visit`'s, stops it.
  virtual Status each_job(const std::function<Status(const JobRecord&)>& visit) = 0;
  virtual Result<StoreCounts> count() = 0;
  // Group commit: the writes from begin() to commit() are one transaction, durable when commit()
  // returns success (each write's own Status then says only that it was taken). The server batches
  // the writes of one turn of its loop this way (coordinator/server/group_commit.h).
  virtual Status begin() = 0;
  virtual Status commit() = 0;

  // Leadership, for coordinators sharing one store (PostgreSQL; docs/operations.md, "A standby
  // coordinator"). The active coordinator holds it for as long as its connection to the store
  // lives, so one that is killed loses it at once and a standby can take it. An embedded store
  // (SQLite) has a single coordinator, which always leads.
  virtual bool shared() const { return false; }
  // Takes the leadership if no other coordinator holds it; true when this one holds it now.
  // `name` says who holds it to the standbys' callers (the host, for people).
  virtual Result<bool> try_lead(const std::string& name) {
    (void)name;
    return true;
  }
  // Who holds the leadership now, in words for people ("kiln-coordinator on h1, connected from
  // 10.0.0.5 since ..."), or why that cannot be read.
  virtual Result<std::string> leader() { return std::string("this coordinator"); }
  // Fails once this coordinator no longer holds the leadership (its connection was lost and
  // another may have taken it): it must then stop acknowledging anything.
  virtual Status confirm_lead() { return {}; }
};

// Which store coordinator.toml chose, and where it is.
enum class StoreBackend { sqlite, postgresql };
constexpr EnumTable<StoreBackend, 2> enum_names(StoreBackend) {
  return {{{StoreBackend::sqlite, "sqlite"}, {StoreBackend::postgresql, "postgresql"}}};
}

struct PostgresLocation {
  std::string url;            // a libpq connection string or URI, without a password
  std::string password_file;  // empty: libpq's own sources (~/.pgpass, PGPASSWORD)
};

// SQLite in WAL mode with synchronous=FULL: a save has reached the disk when it returns.
// A path that does not exist becomes a new kiln database. An existing file is written to only
// if kiln created it (its SQLite application id is kiln's, or it is a kiln database from before
// application ids, which is then upgraded); anything else, an empty file included, is refused
// untouched with an error that says what the file holds.
Result<std::unique_ptr<Store>> open_sqlite_store(const std::string& path);

// PostgreSQL through libpq, each save committed with synchronous_commit on: it has reached the
// server's disk (and its synchronous standbys, if any) when it returns. kiln keeps its tables in
// the database's schema `kiln`, made on first start; one it did not make is refused untouched.
// Migrations run on start, under an advisory lock so that two coordinators starting together
// upgrade once. A server it cannot reach is an error naming the server and what to check.
Result<std::unique_ptr<Store>> open_postgres_store(const PostgresLocation& location);

// How logs and check-config name the server: "database D on HOST:PORT as USER", never a password.
std::string postgres_server_name(const PostgresLocation& location);
// What is wrong with a [store] url, if anything: not a libpq connection string, or it holds a
// password (which belongs in password_file, not in coordinator.toml).
std::optional<std::string> postgres_url_problem(const std::string& url);

// What is wrong with a password_file, if anything: missing, unreadable, empty, or open to others.
std::optional<std::string> postgres_password_file_problem(const std::string& path);

// What `kiln-coordinator check-store` found, without writing to the database.
struct StoreCheck {
  std::string summary;                // what the database holds
  std::vector<std::string> problems;  // each says what is wrong and what to do
};

// Refuses what open_sqlite_store refuses; otherwise runs SQLite's integrity check and kiln's
// own: every stored record is valid and its key columns match it.
Result<StoreCheck> check_sqlite_store(const std::string& path);
// The same for PostgreSQL, in a read-only session: kiln's own checks (the server keeps its own
// pages consistent).
Result<StoreCheck> check_postgres_store(const PostgresLocation& location);

}  // namespace kiln::coordinator

// What the SQLite and PostgreSQL stores share: the schema version they are at, kiln's tables
// and their key columns, records read back from their JSON documents, and check-store's own
// checks. Each store reads its rows its own way and hands them to these through a RowReader.
// Included only by the stores.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "common/protocol/json.h"
#include "coordinator/store/store.h"

namespace kiln::coordinator::stored {

// Version 2 added the leases and records tables and each job's bundle_id and config_hash;
// version 3 each node's released_from_quarantine_wall_ms; version 4 each node's
// rendezvous_address, each job's gang, cancel reason and artifacts; version 5 the audit log and
// each node's labels; version 6 the jobs' rollout_node column (the node a rollout's install is
// for, "" for other jobs), their rerun_candidate_ms column (when a job that may be rerun ended,
// job_retention.h, 0 for other jobs) and the indexes that let a coordinator start from the live
// jobs only; version 7 the records' seq column (filled from the documents) and its index by
// kind, so that records are read from the store a page at a time rather than held.
// Both stores upgrade older databases in place and refuse newer ones, so a coordinator never
// drops what it does not know about.
constexpr int kSchemaVersion = 7;
// Ended leases kept for `kiln leases --all` after a restart; the oldest go first.
constexpr int kEndedLeasesKept = 1000;

// How errors name a database, and what to do when it holds something damaged.
struct Place {
  std::string name;
  std::string restore_advice;
};

// One row: the values of its table's key columns, then its JSON document (nullopt: NULL).
struct Row {
  std::vector<std::string> keys;
  std::optional<std::string> doc;
};

// Which rows of a table to read: `SELECT <key_columns>, doc FROM <table> [WHERE <where>] ORDER BY
// <order>`, where `{table}` in `where` stands for the table as the store names it. Every part is
// kiln's own text (numbers at most), never data: data goes in `parameters`, which `where` names
// as $1, $2, ... (both SQLite and PostgreSQL read that form).
struct RowQuery {
  std::string_view table;
  std::string_view key_columns;
  std::string where;  // empty: every row
  std::string_view order;
  std::size_t limit = 0;  // 0: every row selected
  std::vector<std::string> parameters{};
  bool document = true;  // false: the key columns only (each Row's doc is nullopt)
};

// Reads the rows a query selects and visits each. Fails when the database does.
using RowReader = std::function<Status(const RowQuery& query, const std::function<Status(const Row&)>& visit)>;

// The SQL both stores run for a query, `table` being the table's full name. A `where` names
// `{table}` for that name and `{bytes}` for what makes a text comparison compare bytes
// (`bytes_collation`: nothing in SQLite, whose text compares as bytes already).
std::string select_sql(const RowQuery& query, std::string_view table, std::string_view bytes_collation = {});

// The `where` of the jobs a coordinator holds at start (job_retention.h, jobs_held_at_start).
std::string jobs_held_at_start_where(std::size_t ended_jobs_in_memory, TimeMs reruns_since_ms);

// What a job's rollout_node and rerun_candidate_ms columns hold.
std::string rollout_node_column(const JobRecord& job);
std::int64_t rerun_candidate_column(const JobRecord& job);

// The SQL that fills both columns from the jobs' documents, in an upgrade to version 6: `text`
// and `number` turn a JSON path (`summary.workload`) into the store's expression for that field.
std::string fill_job_columns_sql(std::string_view table, const std::function<std::string(std::string_view)>& text,
                                 const std::function<std::string(std::string_view)>& number);

// A stored document read back as a T, or the error saying why it is not one.
template <class T>
Result<T> parse_record(const std::optional<std::string>& doc, const Place& place, std::string_view what) {
  auto json = nlohmann::json::parse(doc.value_or(""), nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded()) {
    return fail(Errc::io, fmt::format("{} holds a {} record that is not JSON; {}", place.name, what,
                                      place.restore_advice));
  }
  auto record = protocol::from_json<T>(json);
  if (!record) {
    return fail(Errc::io, fmt::format("{} holds an invalid {} record ({}); {}", place.name, what,
                                      record.error().message, place.restore_advice));
  }
  return record;
}

// Every node, qualification record and lease, each table in its key's order, and the jobs
// `jobs_where` selects (empty: all). With `live`, the records held in the store only come
// without their documents (record_book.h, held_in_store_only).
Result<Snapshot> load_snapshot(const RowReader& read, const Place& place, const std::string& jobs_where = "",
                               bool live = false);

// One job, nullopt when the table has none with that id.
Result<std::optional<JobRecord>> load_job(const RowReader& read, const Place& place, std::uint64_t job_id);

// One qualification record, and a kind's records in a range of seqs (Store::load_record,
// list_records).
Result<std::optional<protocol::RecordEntry>> load_record(const RowReader& read, const Place& place,
                                                         protocol::RecordKind kind, const std::string& key);
Result<std::vector<protocol::RecordEntry>> list_records(const RowReader& read, const Place& place,
                                                        const protocol::ListRecords& range);

// The SQL that fills the records' seq column from their documents, in an upgrade to version 7:
// `number` turns a JSON field (`seq`) into the store's expression for it.
std::string fill_record_seq_sql(std::string_view table, const std::function<std::string(std::string_view)>& number);

// Every job in id order, read a page of ids at a time (Store::each_job).
Status each_job(const RowReader& read, const Place& place, const std::function<Status(const JobRecord&)>& visit);

// The SQL that counts each of kiln's tables in one row, `qualified` giving a table its full name.
std::string count_sql(const std::function<std::string(std::string_view)>& qualified);

// kiln's own checks of every table: each record is valid and its key columns match it. Adds a
// problem per bad row to `check` and sets check.summary to "<what>; N nodes, ... N audit lines".
// A table that cannot be read is a problem too.
// `version` is the database's schema version: an older one is checked for the columns it has.
void check_records(const RowReader& read, const Place& place, std::string_view what, int version, StoreCheck& check);

}  // namespace kiln::coordinator::stored

// What the SQLite and PostgreSQL stores share: the schema version they are at, kiln's tables
// and their key columns, records read back from their JSON documents, and check-store's own
// checks. Each store reads its rows its own way and hands them to these through a RowReader.
// Included only by the stores.
#pragma once

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
// each node's labels. Both stores upgrade older databases in place and refuse newer ones, so a
// coordinator never drops what it does not know about.
constexpr int kSchemaVersion = 5;
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

// Reads every row of `table` as `SELECT <key_columns>, doc FROM <table> ORDER BY <order>`
// and visits each; the arguments are kiln's own constants, never data. Fails when the database does.
using RowReader = std::function<Status(std::string_view table, std::string_view key_columns, std::string_view order,
                                       const std::function<Status(const Row&)>& visit)>;

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

// Every node, job, qualification record and lease, each table in its key's order.
Result<Snapshot> load_snapshot(const RowReader& read, const Place& place);

// kiln's own checks of every table: each record is valid and its key columns match it. Adds a
// problem per bad row to `check` and sets check.summary to "<what>; N nodes, ... N audit lines".
// A table that cannot be read is a problem too.
void check_records(const RowReader& read, const Place& place, std::string_view what, StoreCheck& check);

}  // namespace kiln::coordinator::stored

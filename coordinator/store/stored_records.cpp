#include "coordinator/store/stored_records.h"

namespace kiln::coordinator::stored {
namespace {

std::string name_of(auto value) { return std::string(protocol::enum_name(value)); }

// Reads a table's documents as T into `list`, failing at the first bad one.
template <class T>
Status read_into(const RowReader& read, const Place& place, std::string_view table, std::string_view key_columns,
                 std::string_view order, std::string_view what, std::vector<T>& list) {
  return read(table, key_columns, order, [&](const Row& row) -> Status {
    auto record = parse_record<T>(row.doc, place, what);
    if (!record) return tl::unexpected(record.error());
    list.push_back(std::move(*record));
    return {};
  });
}

// Checks each row of a table: its record is valid and its key columns (named in `key_columns`,
// ", " apart) are what `keys_of` says they should be.
template <class T, class Keys>
Status check_table(const RowReader& read, const Place& place, std::string_view table, std::string_view key_columns,
                   std::string_view what, Keys&& keys_of, StoreCheck& check, std::size_t& rows) {
  std::vector<std::string> column_names;
  for (std::size_t start = 0; start <= key_columns.size();) {
    const std::size_t end = std::min(key_columns.find(", ", start), key_columns.size());
    column_names.emplace_back(key_columns.substr(start, end - start));
    start = end + 2;
  }
  return read(table, key_columns, key_columns, [&](const Row& row) -> Status {
    ++rows;
    auto record = parse_record<T>(row.doc, place, what);
    if (!record) {
      check.problems.push_back(fmt::format("{} row {}: {}", what, row.keys.at(0), record.error().message));
      return {};
    }
    const std::vector<std::string> expected = keys_of(*record);
    for (std::size_t i = 0; i < expected.size(); ++i) {
      if (row.keys.at(i) != expected[i]) {
        check.problems.push_back(fmt::format("{} row {}: column {} is '{}' but its record says '{}'", what,
                                             row.keys.at(0), column_names.at(i), row.keys.at(i), expected[i]));
      }
    }
    return {};
  });
}

}  // namespace

Result<Snapshot> load_snapshot(const RowReader& read, const Place& place) {
  Snapshot snapshot;
  for (auto s : {read_into(read, place, "nodes", "node_id", "node_id", "node", snapshot.nodes),
                 read_into(read, place, "jobs", "job_id", "job_id", "job", snapshot.jobs),
                 read_into(read, place, "records", "kind, key", "kind, key", "qualification", snapshot.records),
                 read_into(read, place, "leases", "lease_id", "lease_id", "lease", snapshot.leases)}) {
    if (!s) return tl::unexpected(s.error());
  }
  return snapshot;
}

void check_records(const RowReader& read, const Place& place, std::string_view what, StoreCheck& check) {
  std::size_t nodes = 0, jobs = 0, records = 0, leases = 0, audit_lines = 0;
  for (auto s : {check_table<NodeRecord>(
                     read, place, "nodes", "node_id", "node",
                     [](const NodeRecord& r) { return std::vector<std::string>{r.summary.node_id}; }, check, nodes),
                 check_table<JobRecord>(
                     read, place, "jobs", "job_id, state, node_id", "job",
                     [](const JobRecord& r) {
                       return std::vector<std::string>{std::to_string(r.summary.job_id), name_of(r.summary.state),
                                                       r.summary.node_id};
                     },
                     check, jobs),
                 check_table<protocol::RecordEntry>(
                     read, place, "records", "kind, key", "qualification",
                     [](const protocol::RecordEntry& r) { return std::vector<std::string>{name_of(r.kind), r.key}; },
                     check, records),
                 check_table<LeaseRecord>(
                     read, place, "leases", "lease_id, state", "lease",
                     [](const LeaseRecord& r) {
                       return std::vector<std::string>{std::to_string(r.summary.lease_id), name_of(r.summary.state)};
                     },
                     check, leases),
                 check_table<protocol::AuditEntry>(
                     read, place, "audit", "at_ms", "audit",
                     [](const protocol::AuditEntry& r) { return std::vector<std::string>{std::to_string(r.at_ms)}; },
                     check, audit_lines)}) {
    if (!s) check.problems.push_back(s.error().message);
  }
  check.summary = fmt::format("{}; {} nodes, {} jobs, {} qualification records, {} leases, {} audit lines", what,
                              nodes, jobs, records, leases, audit_lines);
}

}  // namespace kiln::coordinator::stored

#include "coordinator/store/stored_records.h"

#include <algorithm>
#include <charconv>

#include "coordinator/core/job_retention.h"
#include "coordinator/core/record_book.h"

namespace kiln::coordinator::stored {
namespace {

std::string name_of(auto value) { return std::string(protocol::enum_name(value)); }

// Reads a table's documents as T into `list`, failing at the first bad one.
template <class T>
Status read_into(const RowReader& read, const Place& place, const RowQuery& query, std::string_view what,
                 std::vector<T>& list) {
  return read(query, [&](const Row& row) -> Status {
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
  return read(RowQuery{table, key_columns, "", key_columns}, [&](const Row& row) -> Status {
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

std::string select_sql(const RowQuery& query, std::string_view table, std::string_view bytes_collation) {
  const std::string where = query.where.empty() ? ""
                                                : " WHERE " + fmt::format(fmt::runtime(query.where), fmt::arg("table", table),
                                                                          fmt::arg("bytes", bytes_collation));
  const std::string limit = query.limit == 0 ? "" : fmt::format(" LIMIT {}", query.limit);
  return fmt::format("SELECT {}, {} FROM {}{} ORDER BY {}{};", query.key_columns, query.document ? "doc" : "NULL",
                     table, where, query.order, limit);
}

Status each_job(const RowReader& read, const Place& place, const std::function<Status(const JobRecord&)>& visit) {
  constexpr std::size_t kPage = 1000;
  std::uint64_t after = 0;
  for (;;) {
    std::vector<JobRecord> page;
    if (auto s = read_into(read, place, RowQuery{"jobs", "job_id", fmt::format("job_id > {}", after), "job_id", kPage},
                           "job", page);
        !s) {
      return s;
    }
    for (const JobRecord& job : page) {
      if (auto s = visit(job); !s) return s;
    }
    if (page.size() < kPage) return {};
    after = page.back().summary.job_id;
  }
}

std::string count_sql(const std::function<std::string(std::string_view)>& qualified) {
  return fmt::format("SELECT (SELECT count(*) FROM {}), (SELECT count(*) FROM {}), (SELECT count(*) FROM {}), "
                     "(SELECT count(*) FROM {}), (SELECT count(*) FROM {});",
                     qualified("nodes"), qualified("jobs"), qualified("records"), qualified("leases"),
                     qualified("audit"));
}

std::string rollout_node_column(const JobRecord& job) { return rollout_install_node(job); }

std::int64_t rerun_candidate_column(const JobRecord& job) {
  return may_be_rerun(job) ? std::max<std::int64_t>(job.finished_at_ms, 1) : 0;
}

std::string fill_job_columns_sql(std::string_view table, const std::function<std::string(std::string_view)>& text,
                                 const std::function<std::string(std::string_view)>& number) {
  using protocol::JobState;
  // rollout_install_node and may_be_rerun, read from the documents.
  const std::string rollout = fmt::format("{} = '{}' AND {} = '{}'", text("summary.submitted_by"), kRolloutSubmitter,
                                          text("summary.workload"), protocol::kInstallWorkload);
  const std::string rerun = fmt::format(
      "{} <> '{}' AND state IN ('{}', '{}') AND {} = 0 AND {} = 0 AND {} = 0 AND {} = '' AND {} NOT IN ('{}', '{}')",
      text("summary.priority_class"), name_of(protocol::PriorityClass::experiment), name_of(JobState::failed),
      name_of(JobState::timed_out), number("rerun_job_id"), number("rerun_of"), number("lease_id"),
      text("requested_node_id"), text("summary.workload"), protocol::kDiagWorkload, protocol::kInstallWorkload);
  return fmt::format(
      "UPDATE {0} SET rollout_node = CASE WHEN {1} THEN {2} ELSE '' END, rerun_candidate_ms = CASE WHEN {3} AND {4} > 0 "
      "THEN {4} WHEN {3} THEN 1 ELSE 0 END;",
      table, rollout, text("requested_node_id"), rerun, number("finished_at_ms"));
}

std::string jobs_held_at_start_where(std::size_t ended_jobs_in_memory, TimeMs reruns_since_ms) {
  // The newest N ended jobs are those from the N-th newest ended one on (every one, in a shorter
  // table); the indexes on state and on rollout_node keep the other two parts off the history.
  const std::string active = fmt::format("('{}', '{}', '{}')", name_of(protocol::JobState::queued),
                                         name_of(protocol::JobState::assigned), name_of(protocol::JobState::running));
  return fmt::format("state IN {0} OR job_id >= COALESCE((SELECT job_id FROM {{table}} WHERE state NOT IN {0} ORDER "
                     "BY job_id DESC LIMIT 1 OFFSET {1}), 0) OR job_id IN (SELECT max(job_id) FROM {{table}} WHERE "
                     "rollout_node <> '' GROUP BY rollout_node) OR rerun_candidate_ms >= {2}",
                     active, std::max<std::size_t>(ended_jobs_in_memory, 1) - 1, std::max<TimeMs>(reruns_since_ms, 1));
}

namespace {

// `kind IN (...)` of the kinds held in the store only.
std::string kinds_in_store_only() {
  std::vector<std::string> names;
  for (const auto kind : enum_values<protocol::RecordKind>()) {
    if (held_in_store_only(kind)) names.push_back(fmt::format("'{}'", protocol::enum_name(kind)));
  }
  return fmt::format("kind IN ({})", fmt::join(names, ", "));
}

// The kind, key and seq of the newest record of each kind held in the store only, without its
// document: the coordinator needs their seqs only, to number the next record after them.
Status read_newest_record_keys(const RowReader& read, const Place& place, std::vector<protocol::RecordEntry>& records) {
  for (const auto wanted : enum_values<protocol::RecordKind>()) {
    if (!held_in_store_only(wanted)) continue;
    // The kind's last entry in the (kind, seq, key) index, which holds all three.
    RowQuery query{"records", "kind, key, seq", "kind = $1", "kind DESC, seq DESC", 1};
    query.parameters = {std::string(protocol::enum_name(wanted))};
    query.document = false;
    auto s = read(query, [&](const Row& row) -> Status {
      protocol::RecordEntry record;
      const auto kind = enum_from_name<protocol::RecordKind>(row.keys.at(0));
      std::uint64_t seq = 0;
      const std::string& seq_text = row.keys.at(2);
      const auto parsed = std::from_chars(seq_text.data(), seq_text.data() + seq_text.size(), seq);
      if (!kind || parsed.ec != std::errc() || seq == 0) {
        return fail(Errc::io, fmt::format("{} holds a qualification record row ('{}', '{}') whose kind or seq ('{}') "
                                          "is not kiln's; {}",
                                          place.name, row.keys.at(0), row.keys.at(1), seq_text, place.restore_advice));
      }
      record.kind = *kind;
      record.key = row.keys.at(1);
      record.seq = seq;
      records.push_back(std::move(record));
      return {};
    });
    if (!s) return s;
  }
  return {};
}

}  // namespace

Result<Snapshot> load_snapshot(const RowReader& read, const Place& place, const std::string& jobs_where, bool live) {
  Snapshot snapshot;
  const RowQuery records{"records", "kind, key", live ? fmt::format("NOT ({})", kinds_in_store_only()) : "",
                         "kind, key"};
  for (auto s : {read_into(read, place, RowQuery{"nodes", "node_id", "", "node_id"}, "node", snapshot.nodes),
                 read_into(read, place, RowQuery{"jobs", "job_id", jobs_where, "job_id"}, "job", snapshot.jobs),
                 read_into(read, place, records, "qualification", snapshot.records),
                 live ? read_newest_record_keys(read, place, snapshot.records) : Status{},
                 read_into(read, place, RowQuery{"leases", "lease_id", "", "lease_id"}, "lease", snapshot.leases)}) {
    if (!s) return tl::unexpected(s.error());
  }
  return snapshot;
}

Result<std::optional<protocol::RecordEntry>> load_record(const RowReader& read, const Place& place,
                                                         protocol::RecordKind kind, const std::string& key) {
  std::vector<protocol::RecordEntry> found;
  RowQuery query{"records", "kind, key", "kind = $1 AND key = $2", "kind, key"};
  query.parameters = {std::string(protocol::enum_name(kind)), key};
  if (auto s = read_into(read, place, query, "qualification", found); !s) return tl::unexpected(s.error());
  if (found.empty()) return std::optional<protocol::RecordEntry>();
  return std::optional<protocol::RecordEntry>(std::move(found.front()));
}

Result<std::vector<protocol::RecordEntry>> list_records(const RowReader& read, const Place& place,
                                                        const protocol::ListRecords& range) {
  std::vector<protocol::RecordEntry> found;
  if (range.limit == 0) return found;
  const std::string& prefix = range.key_prefix;
  // With a key prefix the keys are the narrower range: `+seq` keeps the planner off the seq index.
  const std::string_view seq = prefix.empty() ? "seq" : "+seq";
  std::string where = fmt::format("kind = $1 AND {} > {}", seq, range.after_seq);
  if (range.before_seq != 0) where += fmt::format(" AND {} < {}", seq, range.before_seq);
  std::vector<std::string> parameters = {std::string(protocol::enum_name(range.kind))};
  if (!prefix.empty()) {
    // The keys from the prefix on, compared as bytes whatever PostgreSQL's collation, up to the
    // prefix with its last character one higher when that is ASCII (a range of SQLite's key
    // index, exact); after any other last character, up to where they stop starting with it.
    parameters.push_back(prefix);
    where += " AND key{bytes} >= $2";
    if (const auto last = static_cast<unsigned char>(prefix.back()); last < 0x7F) {
      std::string above = prefix;
      above.back() = static_cast<char>(last + 1);
      parameters.push_back(std::move(above));
      where += " AND key{bytes} < $3";
    } else {
      where += " AND substr(key, 1, length(CAST($2 AS TEXT))) = CAST($2 AS TEXT)";
    }
  }
  RowQuery query{"records", "kind, key", std::move(where), range.newest_first ? "seq DESC" : "seq", range.limit};
  query.parameters = std::move(parameters);
  // Read no further than a reply holds: the row that passes its bytes (after a first one, which a
  // reply holds whatever its size) says that more follow.
  std::size_t bytes = 0;
  bool full = false;
  auto read_rows = read(query, [&](const Row& row) -> Status {
    auto record = parse_record<protocol::RecordEntry>(row.doc, place, "qualification");
    if (!record) return tl::unexpected(record.error());
    bytes += record->document.size();
    found.push_back(std::move(*record));
    if (bytes <= protocol::kRecordListBytes || found.size() < 2) return {};
    full = true;
    return fail(Errc::too_large, "a reply's worth of records is read");
  });
  if (!read_rows && !full) return tl::unexpected(read_rows.error());
  return found;
}

std::string fill_record_seq_sql(std::string_view table, const std::function<std::string(std::string_view)>& number) {
  return fmt::format("UPDATE {} SET seq = {};", table, number("seq"));
}

Result<std::optional<JobRecord>> load_job(const RowReader& read, const Place& place, std::uint64_t job_id) {
  std::vector<JobRecord> found;
  if (auto s = read_into(read, place, RowQuery{"jobs", "job_id", fmt::format("job_id = {}", job_id), "job_id"}, "job",
                         found);
      !s) {
    return tl::unexpected(s.error());
  }
  if (found.empty()) return std::optional<JobRecord>();
  return std::optional<JobRecord>(std::move(found.front()));
}

void check_records(const RowReader& read, const Place& place, std::string_view what, int version, StoreCheck& check) {
  // An older database (a backup checked before a coordinator upgrades it) lacks the newer key columns.
  const bool job_columns = version >= 6;
  const bool record_seq = version >= 7;
  std::size_t nodes = 0, jobs = 0, records = 0, leases = 0, audit_lines = 0;
  for (auto s : {check_table<NodeRecord>(
                     read, place, "nodes", "node_id", "node",
                     [](const NodeRecord& r) { return std::vector<std::string>{r.summary.node_id}; }, check, nodes),
                 check_table<JobRecord>(
                     read, place, "jobs",
                     job_columns ? "job_id, state, node_id, rollout_node, rerun_candidate_ms" : "job_id, state, node_id",
                     "job",
                     [&](const JobRecord& r) {
                       std::vector<std::string> keys{std::to_string(r.summary.job_id), name_of(r.summary.state),
                                                     r.summary.node_id};
                       if (job_columns) {
                         keys.push_back(rollout_node_column(r));
                         keys.push_back(std::to_string(rerun_candidate_column(r)));
                       }
                       return keys;
                     },
                     check, jobs),
                 check_table<protocol::RecordEntry>(
                     read, place, "records", record_seq ? "kind, key, seq" : "kind, key", "qualification",
                     [&](const protocol::RecordEntry& r) {
                       std::vector<std::string> keys{name_of(r.kind), r.key};
                       if (record_seq) keys.push_back(std::to_string(r.seq));
                       return keys;
                     },
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

#include "coordinator/store/stored_records.h"

#include <algorithm>

#include "coordinator/core/job_retention.h"

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

std::string select_sql(const RowQuery& query, std::string_view table) {
  const std::string where =
      query.where.empty() ? "" : " WHERE " + fmt::format(fmt::runtime(query.where), fmt::arg("table", table));
  const std::string limit = query.limit == 0 ? "" : fmt::format(" LIMIT {}", query.limit);
  return fmt::format("SELECT {}, doc FROM {}{} ORDER BY {}{};", query.key_columns, table, where, query.order, limit);
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

Result<Snapshot> load_snapshot(const RowReader& read, const Place& place, const std::string& jobs_where) {
  Snapshot snapshot;
  for (auto s : {read_into(read, place, RowQuery{"nodes", "node_id", "", "node_id"}, "node", snapshot.nodes),
                 read_into(read, place, RowQuery{"jobs", "job_id", jobs_where, "job_id"}, "job", snapshot.jobs),
                 read_into(read, place, RowQuery{"records", "kind, key", "", "kind, key"}, "qualification",
                           snapshot.records),
                 read_into(read, place, RowQuery{"leases", "lease_id", "", "lease_id"}, "lease", snapshot.leases)}) {
    if (!s) return tl::unexpected(s.error());
  }
  return snapshot;
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

void check_records(const RowReader& read, const Place& place, std::string_view what, StoreCheck& check) {
  std::size_t nodes = 0, jobs = 0, records = 0, leases = 0, audit_lines = 0;
  for (auto s : {check_table<NodeRecord>(
                     read, place, "nodes", "node_id", "node",
                     [](const NodeRecord& r) { return std::vector<std::string>{r.summary.node_id}; }, check, nodes),
                 check_table<JobRecord>(
                     read, place, "jobs", "job_id, state, node_id, rollout_node, rerun_candidate_ms", "job",
                     [](const JobRecord& r) {
                       return std::vector<std::string>{std::to_string(r.summary.job_id), name_of(r.summary.state),
                                                       r.summary.node_id, rollout_node_column(r),
                                                       std::to_string(rerun_candidate_column(r))};
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

// The store suite: every case runs against SQLite and against PostgreSQL (a server the suite
// starts itself; skipped, saying so, only where PostgreSQL is not installed).
#include <doctest/doctest.h>

#include <algorithm>

#include <fmt/format.h>

#include "coordinator/core/job_retention.h"
#include "coordinator/core/record_book.h"
#include "coordinator/store/copy_store.h"
#include "tests/unit/coordinator/store/store_backends.h"

using namespace kiln;
using namespace kiln::coordinator;
using kiln::testing::contains;
using kiln::testing::why;
using kiln::testing::PostgresBackend;
using kiln::testing::run_sql;
using kiln::testing::SqliteBackend;

namespace {

void save_smoke_job(Store& store, std::uint64_t job_id) {
  JobRecord job;
  job.summary.job_id = job_id;
  job.summary.workload = "smoke";
  job.timeout_ms = 60000;
  REQUIRE(store.save_job(job).has_value());
}

LeaseRecord lease_record(std::uint64_t lease_id, const std::string& owner, std::uint32_t chips,
                         protocol::LeaseState state) {
  LeaseRecord lease;
  lease.summary.lease_id = lease_id;
  lease.summary.owner = owner;
  lease.summary.chips = chips;
  lease.summary.state = state;
  return lease;
}

protocol::AuditEntry audit_line(std::int64_t at_ms, const std::string& action) {
  return protocol::AuditEntry{0, at_ms, "alice", "developer", action, "lease L1 of alice", "8 chips for 1h"};
}

// Opens the store again, as the next coordinator would, and loads what it holds.
template <class Backend>
std::pair<Result<std::unique_ptr<Store>>, Result<Snapshot>> reopen(const Backend& backend) {
  auto store = backend.open();
  REQUIRE_MESSAGE(store.has_value(), why(store));
  auto snapshot = (*store)->load();
  REQUIRE_MESSAGE(snapshot.has_value(), why(snapshot));
  return {std::move(store), std::move(snapshot)};
}

}  // namespace

// Each case starts with a fresh database of its backend, or returns where it has none.
#define KILN_STORE_BACKEND(backend)                                                         \
  Backend backend;                                                                          \
  if (!backend.available()) {                                                               \
    MESSAGE("skipped: PostgreSQL is not installed here (scripts/setup installs it)");       \
    return;                                                                                 \
  }

TEST_CASE_TEMPLATE("the store keeps nodes and jobs across reopening", Backend, SqliteBackend, PostgresBackend) {
  KILN_STORE_BACKEND(backend);
  {
    auto store = backend.open();
    REQUIRE_MESSAGE(store.has_value(), why(store));
    NodeRecord node;
    node.summary.node_id = "n01";
    node.summary.hardware_revision = "a";
    node.draining = true;
    REQUIRE((*store)->save_node(node).has_value());
    JobRecord job;
    job.summary.job_id = 5;
    job.summary.workload = "smoke";
    job.summary.args = {"--steps", "10"};
    job.timeout_ms = 60000;
    job.result = R"({"tokens_per_s": 1234.5})";
    REQUIRE((*store)->save_job(job).has_value());
    job.summary.state = protocol::JobState::succeeded;
    REQUIRE((*store)->save_job(job).has_value());
  }
  auto [store, snapshot] = reopen(backend);
  REQUIRE(snapshot->nodes.size() == 1);
  CHECK(snapshot->nodes[0].draining);
  REQUIRE(snapshot->jobs.size() == 1);
  CHECK(snapshot->jobs[0].summary.state == protocol::JobState::succeeded);
  CHECK(snapshot->jobs[0].summary.args == std::vector<std::string>{"--steps", "10"});
  CHECK(snapshot->jobs[0].result == R"({"tokens_per_s": 1234.5})");
}

TEST_CASE_TEMPLATE("the store keeps developer leases and qualification records across reopening", Backend,
                   SqliteBackend, PostgresBackend) {
  KILN_STORE_BACKEND(backend);
  {
    auto store = backend.open();
    REQUIRE(store.has_value());
    LeaseRecord lease = lease_record(7, "alice", 4, protocol::LeaseState::pending);
    lease.summary.hardware_revision = "b";
    lease.summary.duration_ms = 7200000;
    lease.summary.requested_at_ms = 1000;
    lease.requested_at_ms = 1000;
    lease.start_at_ms = 5000;
    REQUIRE((*store)->save_lease(lease).has_value());
    lease.summary.state = protocol::LeaseState::granted;
    lease.summary.placement = {protocol::LeasePlacement{"n03", {4, 5, 6, 7}}};
    lease.summary.granted_at_ms = 5000;
    lease.summary.expires_at_ms = 7205000;
    lease.summary.event_seq = 1;
    REQUIRE((*store)->save_lease(lease).has_value());
    LeaseRecord ended = lease_record(8, "bob", 1, protocol::LeaseState::ended);
    ended.summary.detail = "released by bob";
    REQUIRE((*store)->save_lease(ended).has_value());
    protocol::RecordEntry ticket;
    ticket.kind = protocol::RecordKind::ticket;
    ticket.key = "T1";
    ticket.document = R"({"state": "open"})";
    REQUIRE((*store)->save_record(ticket).has_value());
    ticket.document = R"({"state": "fixed"})";
    REQUIRE((*store)->save_record(ticket).has_value());
  }
  auto [store, snapshot] = reopen(backend);
  REQUIRE(snapshot->leases.size() == 2);
  const LeaseRecord& lease = snapshot->leases[0];
  CHECK(lease.summary.lease_id == 7);
  CHECK(lease.summary.state == protocol::LeaseState::granted);
  CHECK(lease.summary.owner == "alice");
  REQUIRE(lease.summary.placement.size() == 1);
  CHECK(lease.summary.placement[0].node_id == "n03");
  CHECK(lease.summary.placement[0].chip_indices == std::vector<std::uint32_t>{4, 5, 6, 7});
  CHECK(lease.summary.expires_at_ms == 7205000);
  CHECK(lease.requested_at_ms == 1000);
  CHECK(lease.start_at_ms == 5000);
  CHECK(snapshot->leases[1].summary.state == protocol::LeaseState::ended);
  CHECK(snapshot->leases[1].summary.detail == "released by bob");
  REQUIRE(snapshot->records.size() == 1);
  CHECK(snapshot->records[0].key == "T1");
  CHECK(snapshot->records[0].document == R"({"state": "fixed"})");
}

TEST_CASE_TEMPLATE("only the newest ended leases are kept", Backend, SqliteBackend, PostgresBackend) {
  KILN_STORE_BACKEND(backend);
  auto store = backend.open();
  REQUIRE(store.has_value());
  REQUIRE((*store)->save_lease(lease_record(1, "alice", 1, protocol::LeaseState::granted)).has_value());
  constexpr std::uint64_t kEnded = 1005;
  for (std::uint64_t id = 2; id < 2 + kEnded; ++id) {
    REQUIRE((*store)->save_lease(lease_record(id, "bob", 1, protocol::LeaseState::ended)).has_value());
  }
  auto snapshot = (*store)->load();
  REQUIRE(snapshot.has_value());
  // The active lease and the 1000 newest ended ones: 2 to 6 went first.
  REQUIRE(snapshot->leases.size() == 1001);
  CHECK(snapshot->leases[0].summary.lease_id == 1);
  CHECK(snapshot->leases[1].summary.lease_id == 7);
  CHECK(snapshot->leases.back().summary.lease_id == 1 + kEnded);
}

TEST_CASE_TEMPLATE("a version 1 database (before leases, records and job attribution) is upgraded; a newer one is "
                   "refused",
                   Backend, SqliteBackend, PostgresBackend) {
  KILN_STORE_BACKEND(backend);
  {
    auto store = backend.open();
    REQUIRE(store.has_value());
    save_smoke_job(**store, 3);
  }
  // What a version 1 coordinator wrote: jobs without the bundle attribution.
  run_sql(backend, backend.remove_fields(backend.table("jobs"), {"summary.bundle_id", "summary.config_hash"}));
  run_sql(backend, backend.set_schema_version(1));
  {
    auto [store, snapshot] = reopen(backend);
    REQUIRE(snapshot->jobs.size() == 1);
    CHECK(snapshot->jobs[0].summary.bundle_id.empty());
    CHECK(snapshot->leases.empty());
    CHECK(snapshot->records.empty());
  }
  run_sql(backend, backend.set_schema_version(99));
  const std::string before = backend.contents();
  auto refused = backend.open();
  REQUIRE_FALSE(refused.has_value());
  CHECK(contains(refused.error().message, "schema version 99"));
  CHECK(contains(refused.error().message, "use a matching coordinator"));
  CHECK(backend.contents() == before);
}

TEST_CASE_TEMPLATE("a version 2 database is upgraded: its nodes read back, never released from quarantine", Backend,
                   SqliteBackend, PostgresBackend) {
  KILN_STORE_BACKEND(backend);
  {
    auto store = backend.open();
    REQUIRE(store.has_value());
    NodeRecord node;
    node.summary.node_id = "n01";
    node.summary.hardware_revision = "a";
    node.released_from_quarantine_wall_ms = 1234;
    REQUIRE((*store)->save_node(node).has_value());
  }
  // What a version 2 coordinator wrote: nodes without the release time.
  run_sql(backend, backend.remove_fields(backend.table("nodes"), {"released_from_quarantine_wall_ms"}));
  run_sql(backend, backend.set_schema_version(2));
  auto [store, snapshot] = reopen(backend);
  REQUIRE(snapshot->nodes.size() == 1);
  CHECK(snapshot->nodes[0].summary.node_id == "n01");
  CHECK(snapshot->nodes[0].released_from_quarantine_wall_ms == 0);
}

TEST_CASE_TEMPLATE("a version 3 database is upgraded: its nodes name no rendezvous address, its jobs are no gang's "
                   "and name no artifacts",
                   Backend, SqliteBackend, PostgresBackend) {
  KILN_STORE_BACKEND(backend);
  {
    auto store = backend.open();
    REQUIRE(store.has_value());
    NodeRecord node;
    node.summary.node_id = "n01";
    node.summary.hardware_revision = "a";
    node.summary.rendezvous_address = "10.0.0.1";
    REQUIRE((*store)->save_node(node).has_value());
    save_smoke_job(**store, 5);
  }
  // What a version 3 coordinator wrote.
  run_sql(backend, backend.remove_fields(backend.table("nodes"), {"summary.rendezvous_address"}));
  run_sql(backend, backend.remove_fields(backend.table("jobs"), {"summary.gang_id", "summary.gang_rank",
                                                                 "summary.gang_size", "cancel_reason", "artifacts"}));
  run_sql(backend, backend.set_schema_version(3));
  auto [store, snapshot] = reopen(backend);
  REQUIRE(snapshot->nodes.size() == 1);
  CHECK(snapshot->nodes[0].summary.rendezvous_address.empty());
  REQUIRE(snapshot->jobs.size() == 1);
  CHECK(snapshot->jobs[0].summary.job_id == 5);
  CHECK(snapshot->jobs[0].summary.gang_size == 0);
  CHECK(snapshot->jobs[0].cancel_reason.empty());
  CHECK(snapshot->jobs[0].artifacts.empty());
}

TEST_CASE_TEMPLATE("a version 4 database is upgraded: it gains an empty audit log, its nodes no labels", Backend,
                   SqliteBackend, PostgresBackend) {
  KILN_STORE_BACKEND(backend);
  {
    auto store = backend.open();
    REQUIRE(store.has_value());
    save_smoke_job(**store, 7);
    NodeRecord node;
    node.summary.node_id = "n01";
    node.summary.hardware_revision = "a";
    node.summary.labels = {"rack=r1"};
    REQUIRE((*store)->save_node(node).has_value());
  }
  // What a version 4 coordinator wrote: no audit table, nodes without labels.
  run_sql(backend, backend.drop_audit_log());
  run_sql(backend, backend.remove_fields(backend.table("nodes"), {"summary.labels"}));
  run_sql(backend, backend.set_schema_version(4));
  auto [store, snapshot] = reopen(backend);
  CHECK(snapshot->jobs.size() == 1);
  REQUIRE(snapshot->nodes.size() == 1);
  CHECK(snapshot->nodes[0].summary.labels.empty());
  REQUIRE((*store)->append_audit(audit_line(5000, "drained")).has_value());
  auto lines = (*store)->read_audit(protocol::ListAudit{0, 0, 10});
  REQUIRE(lines.has_value());
  REQUIRE(lines->size() == 1);
  CHECK((*lines)[0].action == "drained");
  // The upgraded log is append-only too.
  CHECK_FALSE(backend.try_sql("DELETE FROM " + backend.table("audit") + ";").first);
}

namespace {

JobRecord job_in(std::uint64_t job_id, protocol::JobState state, const std::string& rollout_node = "") {
  JobRecord job;
  job.summary.job_id = job_id;
  job.summary.state = state;
  job.summary.workload = rollout_node.empty() ? "smoke" : std::string(protocol::kInstallWorkload);
  if (!rollout_node.empty()) job.summary.submitted_by = std::string(kRolloutSubmitter);
  job.requested_node_id = rollout_node;
  job.timeout_ms = 60000;
  return job;
}

std::vector<std::uint64_t> ids_of(const std::vector<JobRecord>& jobs) {
  std::vector<std::uint64_t> ids;
  for (const JobRecord& job : jobs) ids.push_back(job.summary.job_id);
  return ids;
}

// Installs on n01 (1, then 3) and n02 (4), a job running since long ago (2), ended smoke jobs
// (5 to 9, 6 a failed presubmit) and a queued one (10).
std::vector<JobRecord> history() {
  using protocol::JobState;
  std::vector<JobRecord> jobs = {job_in(1, JobState::succeeded, "n01"), job_in(2, JobState::running),
                                 job_in(3, JobState::failed, "n01"), job_in(4, JobState::succeeded, "n02")};
  for (std::uint64_t id = 5; id <= 9; ++id) jobs.push_back(job_in(id, JobState::cancelled));
  jobs.push_back(job_in(10, JobState::queued));
  // 6: a presubmit that failed at 5000, which a quarantine of its node may rerun.
  jobs[5].summary.state = JobState::failed;
  jobs[5].summary.priority_class = protocol::PriorityClass::presubmit;
  jobs[5].finished_at_ms = 5000;
  return jobs;
}

}  // namespace

TEST_CASE_TEMPLATE("a coordinator starts from the live jobs only, and reads any other back by its id", Backend,
                   SqliteBackend, PostgresBackend) {
  KILN_STORE_BACKEND(backend);
  auto store = backend.open();
  REQUIRE_MESSAGE(store.has_value(), why(store));
  for (const JobRecord& job : history()) REQUIRE((*store)->save_job(job).has_value());
  for (std::size_t held : {1, 3, 100}) {
    for (TimeMs since : {4000, 6000}) {
      CAPTURE(held);
      CAPTURE(since);
      auto live = (*store)->load_live(held, since);
      REQUIRE_MESSAGE(live.has_value(), why(live));
      CHECK(ids_of(live->jobs) == ids_of(jobs_held_at_start(history(), held, since)));
    }
  }
  CHECK(ids_of((*store)->load_live(3, 6000)->jobs) == std::vector<std::uint64_t>{2, 3, 4, 7, 8, 9, 10});
  CHECK(ids_of((*store)->load_live(3, 4000)->jobs) == std::vector<std::uint64_t>{2, 3, 4, 6, 7, 8, 9, 10});
  CHECK((*store)->load()->jobs.size() == 10);
  auto old = (*store)->load_job(1);
  REQUIRE_MESSAGE(old.has_value(), why(old));
  REQUIRE(old->has_value());
  CHECK((*old)->summary.state == protocol::JobState::succeeded);
  CHECK((*old)->requested_node_id == "n01");
  auto none = (*store)->load_job(11);
  REQUIRE(none.has_value());
  CHECK_FALSE(none->has_value());
}

namespace {

protocol::RecordEntry record_of(protocol::RecordKind kind, const std::string& key, std::uint64_t seq,
                                const std::string& document) {
  protocol::RecordEntry record;
  record.kind = kind;
  record.key = key;
  record.seq = seq;
  record.document = document;
  return record;
}

std::vector<std::string> keys_of(const std::vector<protocol::RecordEntry>& records) {
  std::vector<std::string> keys;
  for (const auto& record : records) keys.push_back(record.key);
  return keys;
}

// A change, and run reports of both kinds interleaved with it in seq order; one key holds a quote.
void save_reports(Store& store) {
  using protocol::RecordKind;
  REQUIRE(store.save_record(record_of(RecordKind::change, "c1", 1, R"({"id": "c1"})")).has_value());
  REQUIRE(store.save_record(record_of(RecordKind::qualification_run, "run-3", 3, R"({"run_id": "run-3"})")).has_value());
  REQUIRE(store.save_record(record_of(RecordKind::qualification_run, "it's", 2, R"({"run_id": "it's"})")).has_value());
  REQUIRE(store.save_record(record_of(RecordKind::stability_run, "s-4", 4, R"({"run_id": "s-4"})")).has_value());
  REQUIRE(store.save_record(record_of(RecordKind::qualification_run, "run-5", 5, R"({"run_id": "run-5"})")).has_value());
  // A report updated as its run goes keeps its seq.
  REQUIRE(store.save_record(record_of(RecordKind::qualification_run, "run-3", 3, R"({"run_id": "run-3", "done": 1})"))
              .has_value());
}

}  // namespace

TEST_CASE_TEMPLATE("a coordinator starts from the newest seq of each kind of report, and reads them by key or a page at "
                   "a time",
                   Backend, SqliteBackend, PostgresBackend) {
  using protocol::RecordKind;
  KILN_STORE_BACKEND(backend);
  auto store = backend.open();
  REQUIRE_MESSAGE(store.has_value(), why(store));
  save_reports(**store);
  auto live = (*store)->load_live(10, 0);
  REQUIRE_MESSAGE(live.has_value(), why(live));
  // Of each kind held in the store only, the newest record's key and seq, without its document.
  std::map<RecordKind, std::pair<std::string, std::uint64_t>> newest;
  for (const auto& record : live->records) {
    CAPTURE(record.key);
    CHECK(record.document.empty() == held_in_store_only(record.kind));
    CHECK(newest.emplace(record.kind, std::make_pair(record.key, record.seq)).second);
  }
  CHECK(newest == std::map<RecordKind, std::pair<std::string, std::uint64_t>>{
                      {RecordKind::change, {"c1", 1}},
                      {RecordKind::qualification_run, {"run-5", 5}},
                      {RecordKind::stability_run, {"s-4", 4}}});
  // Whole for migrate-store.
  for (const auto& record : (*store)->load()->records) CHECK_FALSE(record.document.empty());

  auto quoted = (*store)->load_record(RecordKind::qualification_run, "it's");
  REQUIRE_MESSAGE(quoted.has_value(), why(quoted));
  REQUIRE(quoted->has_value());
  CHECK((*quoted)->seq == 2);
  CHECK((*quoted)->document == R"({"run_id": "it's"})");
  CHECK((*(*store)->load_record(RecordKind::qualification_run, "run-3"))->document == R"({"run_id": "run-3", "done": 1})");
  CHECK_FALSE((*store)->load_record(RecordKind::stability_run, "run-3")->has_value());
  CHECK_FALSE((*store)->load_record(RecordKind::qualification_run, "' OR '1'='1")->has_value());

  const auto range = [](RecordKind kind, std::uint64_t after_seq, std::uint32_t limit, std::uint64_t before_seq = 0,
                        bool newest_first = false) {
    return protocol::ListRecords{kind, limit, after_seq, before_seq, newest_first};
  };
  auto runs = (*store)->list_records(range(RecordKind::qualification_run, 0, 100));
  REQUIRE_MESSAGE(runs.has_value(), why(runs));
  CHECK(keys_of(*runs) == std::vector<std::string>{"it's", "run-3", "run-5"});
  CHECK(keys_of(*(*store)->list_records(range(RecordKind::qualification_run, 0, 2))) ==
        std::vector<std::string>{"it's", "run-3"});
  CHECK(keys_of(*(*store)->list_records(range(RecordKind::qualification_run, 3, 2))) == std::vector<std::string>{"run-5"});
  CHECK(keys_of(*(*store)->list_records(range(RecordKind::stability_run, 0, 10))) == std::vector<std::string>{"s-4"});
  CHECK((*store)->list_records(range(RecordKind::qualification_run, 5, 10))->empty());
  // Newest first, a page at a time from the last one's seq: what a client reads for the latest runs.
  CHECK(keys_of(*(*store)->list_records(range(RecordKind::qualification_run, 0, 2, 0, true))) ==
        std::vector<std::string>{"run-5", "run-3"});
  CHECK(keys_of(*(*store)->list_records(range(RecordKind::qualification_run, 0, 2, 3, true))) ==
        std::vector<std::string>{"it's"});
  CHECK(keys_of(*(*store)->list_records(range(RecordKind::qualification_run, 0, 10, 5))) ==
        std::vector<std::string>{"it's", "run-3"});
  CHECK((*store)->list_records(range(RecordKind::qualification_run, 2, 10, 3))->empty());
  // By a prefix of the key, as a bundle is named by a prefix of its id: characters compared as
  // they are (no pattern, no quoting), in either order, within the seqs.
  const auto prefixed = [&](std::string prefix, std::uint64_t after_seq = 0, bool newest_first = false) {
    auto query = range(RecordKind::qualification_run, after_seq, 10, 0, newest_first);
    query.key_prefix = std::move(prefix);
    return keys_of(*(*store)->list_records(query));
  };
  CHECK(prefixed("run-") == std::vector<std::string>{"run-3", "run-5"});
  CHECK(prefixed("run-", 0, true) == std::vector<std::string>{"run-5", "run-3"});
  CHECK(prefixed("run-", 3) == std::vector<std::string>{"run-5"});
  CHECK(prefixed("it'") == std::vector<std::string>{"it's"});
  CHECK(prefixed("run-5") == std::vector<std::string>{"run-5"});
  CHECK(prefixed("run_").empty());
  CHECK(prefixed("%").empty());
  CHECK(prefixed("run-50").empty());
  CHECK(prefixed("s-").empty());

  // No more is read than a reply holds: the row past its bytes is the last read (it says that
  // more follow), and a first row larger than a reply is read with the next.
  const std::string big(300 * 1024, 'x');
  const std::string huge(600 * 1024, 'x');
  for (std::uint64_t seq = 10; seq < 14; ++seq) {
    REQUIRE((*store)->save_record(record_of(RecordKind::stability_run, fmt::format("big-{}", seq), seq,
                                            fmt::format(R"({{"run_id": "big-{}", "pad": "{}"}})", seq,
                                                        seq == 10 ? huge : big)))
                .has_value());
  }
  CHECK(keys_of(*(*store)->list_records(range(RecordKind::stability_run, 0, 10))) ==
        std::vector<std::string>{"s-4", "big-10"});
  CHECK(keys_of(*(*store)->list_records(range(RecordKind::stability_run, 4, 10))) ==
        std::vector<std::string>{"big-10", "big-11"});
  CHECK(keys_of(*(*store)->list_records(range(RecordKind::stability_run, 10, 10))) ==
        std::vector<std::string>{"big-11", "big-12"});
  CHECK(keys_of(*(*store)->list_records(range(RecordKind::stability_run, 12, 10))) == std::vector<std::string>{"big-13"});

  // A prefix matches by bytes, whatever the server's collation: keys that sort beside it by
  // letters (case, accents) are not in it, a prefix ending in a character past ASCII or in the
  // last ASCII one still finds its keys, and a prefix is not a pattern.
  if constexpr (std::is_same_v<Backend, PostgresBackend>) {
    // A server whose keys sort by a language's rules (ICU's root locale, where case comes after
    // letters and DEL is ignored), as a database made in such a locale has them.
    run_sql(backend, "ALTER TABLE " + backend.table("records") + " ALTER COLUMN key TYPE TEXT COLLATE \"und-x-icu\";");
  }
  std::uint64_t seq = 20;
  for (const char* key : {"ab~", "ab~z", "abc", "abC", "ABc", "ab", "abé", "abéz", "abf", "ab\x7f", "ab%", "a\xc3\xa9"}) {
    REQUIRE((*store)->save_record(record_of(RecordKind::bundle, key, seq++, "{}")).has_value());
  }
  const auto bundles = [&](std::string prefix) {
    protocol::ListRecords query{RecordKind::bundle, 100};
    query.key_prefix = std::move(prefix);
    return keys_of(*(*store)->list_records(query));
  };
  CHECK(bundles("abc") == std::vector<std::string>{"abc"});
  CHECK(bundles("ab~") == std::vector<std::string>{"ab~", "ab~z"});
  CHECK(bundles("abé") == std::vector<std::string>{"abé", "abéz"});
  CHECK(bundles("ab%") == std::vector<std::string>{"ab%"});
  CHECK(bundles("ab\x7f") == std::vector<std::string>{"ab\x7f"});
  CHECK(bundles("aé") == std::vector<std::string>{"a\xc3\xa9"});
  CHECK(bundles("ab").size() == 10);
  CHECK(bundles("abd").empty());
}

TEST_CASE_TEMPLATE("a version 6 database is upgraded: its records' seqs are read from their documents", Backend,
                   SqliteBackend, PostgresBackend) {
  KILN_STORE_BACKEND(backend);
  {
    auto store = backend.open();
    REQUIRE(store.has_value());
    save_reports(**store);
  }
  // What a version 6 coordinator made: records without a seq column.
  run_sql(backend, "DROP INDEX " + backend.table("records_by_seq") + ";");
  run_sql(backend, "ALTER TABLE " + backend.table("records") + " DROP COLUMN seq;");
  run_sql(backend, backend.set_schema_version(6));
  // A backup of version 6, checked before a coordinator upgrades it: for the columns it has.
  auto checked = backend.check();
  REQUIRE_MESSAGE(checked.has_value(), why(checked));
  CHECK(checked->problems.empty());
  CHECK(contains(checked->summary, "schema version 6; 0 nodes, 0 jobs, 5 qualification records"));
  auto store = backend.open();
  REQUIRE_MESSAGE(store.has_value(), why(store));
  auto runs = (*store)->list_records(protocol::ListRecords{protocol::RecordKind::qualification_run, 10, 2});
  REQUIRE_MESSAGE(runs.has_value(), why(runs));
  CHECK(keys_of(*runs) == std::vector<std::string>{"run-3", "run-5"});
  auto every = (*store)->load();
  REQUIRE_MESSAGE(every.has_value(), why(every));
  std::uint64_t seqs = 0;
  for (const auto& record : every->records) seqs += record.seq;
  CHECK(seqs == 1 + 2 + 3 + 4 + 5);
}

TEST_CASE_TEMPLATE("a version 5 database is upgraded: the rollout installs and the failures that may be rerun are found", Backend,
                   SqliteBackend, PostgresBackend) {
  KILN_STORE_BACKEND(backend);
  {
    auto store = backend.open();
    REQUIRE(store.has_value());
    for (const JobRecord& job : history()) REQUIRE((*store)->save_job(job).has_value());
  }
  // What a version 5 coordinator wrote: nothing said which jobs were a rollout's or may be rerun.
  run_sql(backend, "UPDATE " + backend.table("jobs") + " SET rollout_node = '', rerun_candidate_ms = 0;");
  run_sql(backend, backend.set_schema_version(5));
  auto store = backend.open();
  REQUIRE_MESSAGE(store.has_value(), why(store));
  CHECK(ids_of((*store)->load_live(1, 4000)->jobs) == std::vector<std::uint64_t>{2, 3, 4, 6, 9, 10});
  CHECK(ids_of((*store)->load_live(1, 6000)->jobs) == std::vector<std::uint64_t>{2, 3, 4, 9, 10});
}

TEST_CASE_TEMPLATE("migrate-store copies a history of thousands of jobs whole, a page at a time", Backend,
                   SqliteBackend, PostgresBackend) {
  KILN_STORE_BACKEND(backend);
  SqliteBackend source_backend;
  auto source = source_backend.open();
  REQUIRE_MESSAGE(source.has_value(), why(source));
  constexpr std::uint64_t kJobs = 2500;  // three pages of reads, three transactions of writes
  REQUIRE((*source)->begin().has_value());
  for (std::uint64_t id = 1; id <= kJobs; ++id) {
    JobRecord job = job_in(id, id % 3 ? protocol::JobState::succeeded : protocol::JobState::failed);
    job.output_tail = "job " + std::to_string(id);
    REQUIRE((*source)->save_job(job).has_value());
  }
  for (std::int64_t at = 1; at <= 1200; ++at) REQUIRE((*source)->append_audit(audit_line(at, "drained")).has_value());
  REQUIRE((*source)->commit().has_value());
  auto target = backend.open();
  REQUIRE_MESSAGE(target.has_value(), why(target));
  std::vector<std::string> told;
  auto copied = copy_store(**source, **target, [&](const std::string& step) { told.push_back(step); });
  REQUIRE_MESSAGE(copied.has_value(), why(copied));
  CHECK(copied->jobs == kJobs);
  CHECK(copied->audit_lines == 1200);
  CHECK(*(*target)->count() == *copied);
  std::uint64_t next = 1;
  REQUIRE((*target)
              ->each_job([&](const JobRecord& job) -> Status {
                CHECK(job.summary.job_id == next);
                CHECK(job.output_tail == "job " + std::to_string(next));
                ++next;
                return {};
              })
              .has_value());
  CHECK(next == kJobs + 1);
  CHECK(std::find(told.begin(), told.end(), "copying 2500 jobs") != told.end());
}

TEST_CASE_TEMPLATE("check-store finds damaged records and key columns that disagree with their record", Backend,
                   SqliteBackend, PostgresBackend) {
  KILN_STORE_BACKEND(backend);
  {
    auto store = backend.open();
    REQUIRE(store.has_value());
    for (std::uint64_t id : {1, 2, 3}) save_smoke_job(**store, id);
    NodeRecord node;
    node.summary.node_id = "n01";
    node.summary.hardware_revision = "a";
    REQUIRE((*store)->save_node(node).has_value());
    save_reports(**store);
  }
  auto healthy = backend.check();
  REQUIRE_MESSAGE(healthy.has_value(), why(healthy));
  CHECK(healthy->problems.empty());
  CHECK(contains(healthy->summary, "kiln database, schema version 7; 1 nodes, 3 jobs"));

  const std::string jobs = backend.table("jobs");
  run_sql(backend, "UPDATE " + jobs + " SET state='succeeded' WHERE job_id=2;");
  run_sql(backend, "UPDATE " + jobs + " SET doc='{not json' WHERE job_id=3;");
  run_sql(backend, "UPDATE " + backend.table("records") + " SET seq=9 WHERE key='run-5';");
  const std::string before = backend.contents();
  auto damaged = backend.check();
  REQUIRE(damaged.has_value());
  REQUIRE(damaged->problems.size() == 3);
  CHECK(contains(damaged->problems[2], "qualification row qualification_run: column seq is '9' but its record says '5'"));
  CHECK(contains(damaged->problems[0], "job row 2: column state is 'succeeded' but its record says 'queued'"));
  CHECK(contains(damaged->problems[1], "job row 3"));
  CHECK(contains(damaged->problems[1], "not JSON"));
  CHECK(backend.contents() == before);
  // The coordinator refuses to start on it, saying what to do.
  auto store = backend.open();
  REQUIRE(store.has_value());
  auto refused = (*store)->load();
  REQUIRE_FALSE(refused.has_value());
  CHECK(contains(refused.error().message, "restore"));

  auto missing = backend.check_elsewhere();
  REQUIRE_FALSE(missing.has_value());
  CHECK(missing.error().code == Errc::not_found);
}

TEST_CASE_TEMPLATE("the audit log is kept across reopening, read by time and in pages, and the database refuses to "
                   "change it",
                   Backend, SqliteBackend, PostgresBackend) {
  KILN_STORE_BACKEND(backend);
  {
    auto store = backend.open();
    REQUIRE(store.has_value());
    for (std::int64_t at : {1000, 2000, 3000, 4000}) {
      REQUIRE((*store)->append_audit(audit_line(at, "lease_requested")).has_value());
    }
  }
  auto store = backend.open();
  REQUIRE(store.has_value());
  auto since = (*store)->read_audit(protocol::ListAudit{2000, 0, 100});
  REQUIRE(since.has_value());
  REQUIRE(since->size() == 3);
  CHECK((*since)[0].seq == 2);
  CHECK((*since)[0].at_ms == 2000);
  CHECK((*since)[0].actor == "alice");
  CHECK((*since)[2].seq == 4);
  auto page = (*store)->read_audit(protocol::ListAudit{0, 2, 1});
  REQUIRE(page.has_value());
  REQUIRE(page->size() == 1);
  CHECK((*page)[0].seq == 3);

  // Append-only, also for a hand with the database's own shell.
  const std::string audit = backend.table("audit");
  const auto changed = backend.try_sql("UPDATE " + audit + " SET doc = '{}' WHERE seq = 1;");
  CHECK_FALSE(changed.first);
  CHECK(contains(changed.second, "the kiln audit log is append-only"));
  const auto removed = backend.try_sql("DELETE FROM " + audit + ";");
  CHECK_FALSE(removed.first);
  CHECK(contains(removed.second, "the kiln audit log is append-only"));
  auto all = (*store)->read_audit(protocol::ListAudit{0, 0, 100});
  REQUIRE(all.has_value());
  CHECK(all->size() == 4);

  auto checked = backend.check();
  REQUIRE(checked.has_value());
  CHECK(checked->problems.empty());
  CHECK(contains(checked->summary, "4 audit lines"));
}

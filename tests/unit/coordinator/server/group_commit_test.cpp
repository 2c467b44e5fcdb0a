// Group commit: a turn's writes are one transaction, and nothing sent after them goes out before
// that transaction is durable; when the commit fails, nothing that waited for it goes out.
#include <doctest/doctest.h>

#include <filesystem>
#include <string>
#include <vector>

#include <unistd.h>

#include "coordinator/server/group_commit.h"

using namespace kiln;
using namespace kiln::coordinator;

namespace {

namespace fs = std::filesystem;

// A SQLite store whose commit can be made to fail, as a full disk would make it.
class FlakyCommitStore final : public Store {
 public:
  explicit FlakyCommitStore(std::unique_ptr<Store> inner) : inner_(std::move(inner)) {}
  bool fail_commit = false;
  int commits = 0;

  Status save_node(const NodeRecord& node) override { return inner_->save_node(node); }
  Status save_job(const JobRecord& job) override { return inner_->save_job(job); }
  Status save_record(const protocol::RecordEntry& record) override { return inner_->save_record(record); }
  Status save_lease(const LeaseRecord& lease) override { return inner_->save_lease(lease); }
  Status append_audit(const protocol::AuditEntry& entry) override { return inner_->append_audit(entry); }
  Result<std::vector<protocol::AuditEntry>> read_audit(const protocol::ListAudit& query) override {
    return inner_->read_audit(query);
  }
  Result<Snapshot> load() override { return inner_->load(); }
  Result<Snapshot> load_live(std::size_t ended_jobs_in_memory, TimeMs reruns_since_ms) override {
    return inner_->load_live(ended_jobs_in_memory, reruns_since_ms);
  }
  Result<std::optional<JobRecord>> load_job(std::uint64_t job_id) override { return inner_->load_job(job_id); }
  Status each_job(const std::function<Status(const JobRecord&)>& visit) override { return inner_->each_job(visit); }
  Result<std::optional<protocol::RecordEntry>> load_record(protocol::RecordKind kind, const std::string& key) override {
    return inner_->load_record(kind, key);
  }
  Result<std::vector<protocol::RecordEntry>> list_records(const protocol::ListRecords& range) override {
    return inner_->list_records(range);
  }
  Result<StoreCounts> count() override { return inner_->count(); }
  Status begin() override { return inner_->begin(); }
  Status commit() override {
    ++commits;
    // A commit that fails makes nothing of the transaction durable.
    if (fail_commit) return fail(Errc::io, "disk full");
    return inner_->commit();
  }

 private:
  std::unique_ptr<Store> inner_;
};

struct TempDatabase {
  fs::path dir = fs::temp_directory_path() / ("kiln-group-commit-" + std::to_string(::getpid()));
  TempDatabase() {
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  ~TempDatabase() { fs::remove_all(dir); }
  std::string path() const { return (dir / "kiln.db").string(); }
  // What another connection finds: only what was committed.
  std::size_t jobs_stored() const {
    auto other = open_sqlite_store(path());
    REQUIRE(other.has_value());
    auto snapshot = (*other)->load();
    REQUIRE_MESSAGE(snapshot.has_value(), (snapshot ? "" : snapshot.error().message));
    return snapshot->jobs.size();
  }
};

JobRecord stored_job(std::uint64_t id) {
  JobRecord j;
  j.summary.job_id = id;
  j.summary.workload = "smoke";
  j.summary.chips = 1;
  j.timeout_ms = 60000;
  return j;
}

// A turn of the loop over a fresh database: the store, its group commit and what was sent.
struct Turn {
  TempDatabase db;
  FlakyCommitStore store{opened(db)};
  GroupCommit batch{store};
  std::vector<std::string> sent;

  static std::unique_ptr<Store> opened(const TempDatabase& db) {
    auto store = open_sqlite_store(db.path());
    REQUIRE(store.has_value());
    return std::move(*store);
  }
};

}  // namespace

TEST_CASE("a message sent before any write of the turn goes out at once") {
  TempDatabase db;
  auto store = open_sqlite_store(db.path());
  REQUIRE(store.has_value());
  GroupCommit batch(**store);
  std::vector<std::string> sent;
  batch.send([&] { sent.push_back("heartbeat"); });
  CHECK(sent == std::vector<std::string>{"heartbeat"});
  CHECK_FALSE(batch.writing());
  CHECK(batch.commit().has_value());
}

TEST_CASE("the writes of a turn are one transaction, and what follows them waits for its commit") {
  Turn turn;
  auto& [db, store, batch, sent] = turn;
  for (std::uint64_t id = 1; id <= 3; ++id) {
    REQUIRE(batch.before_write().has_value());
    REQUIRE(store.save_job(stored_job(id)).has_value());
    batch.send([&sent, id] { sent.push_back("job_accepted " + std::to_string(id)); });
  }
  CHECK(batch.writing());
  // Written but not durable: no other connection sees them, and no acknowledgement went out.
  CHECK(db.jobs_stored() == 0);
  CHECK(sent.empty());
  REQUIRE(batch.commit().has_value());
  CHECK(store.commits == 1);
  CHECK(db.jobs_stored() == 3);
  CHECK(sent == std::vector<std::string>{"job_accepted 1", "job_accepted 2", "job_accepted 3"});
  // The next turn starts a transaction of its own.
  CHECK_FALSE(batch.writing());
  CHECK(batch.commit().has_value());
  CHECK(store.commits == 1);
}

TEST_CASE("when the commit fails, nothing that waited for it is sent and nothing of it is kept") {
  Turn turn;
  auto& [db, store, batch, sent] = turn;
  batch.send([&] { sent.push_back("before the write"); });
  REQUIRE(batch.before_write().has_value());
  REQUIRE(store.save_job(stored_job(1)).has_value());
  batch.send([&] { sent.push_back("job_accepted 1"); });
  store.fail_commit = true;
  auto committed = batch.commit();
  REQUIRE_FALSE(committed.has_value());
  CHECK(committed.error().message == "disk full");
  CHECK(sent == std::vector<std::string>{"before the write"});
  CHECK(db.jobs_stored() == 0);
}

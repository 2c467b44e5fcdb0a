#include <doctest/doctest.h>

#include <unistd.h>

#include <filesystem>

#include "coordinator/store/store.h"

using namespace kiln;
using namespace kiln::coordinator;

TEST_CASE("the SQLite store keeps nodes and jobs across reopening") {
  auto dir = std::filesystem::temp_directory_path() / ("kiln-store-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "kiln.db").string();
  {
    auto store = open_sqlite_store(path);
    REQUIRE(store.has_value());
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
  auto store = open_sqlite_store(path);
  REQUIRE(store.has_value());
  auto snapshot = (*store)->load();
  REQUIRE(snapshot.has_value());
  REQUIRE(snapshot->nodes.size() == 1);
  CHECK(snapshot->nodes[0].draining);
  REQUIRE(snapshot->jobs.size() == 1);
  CHECK(snapshot->jobs[0].summary.state == protocol::JobState::succeeded);
  CHECK(snapshot->jobs[0].summary.args == std::vector<std::string>{"--steps", "10"});
  CHECK(snapshot->jobs[0].result == R"({"tokens_per_s": 1234.5})");
  std::filesystem::remove_all(dir);
}

TEST_CASE("an unwritable database path is refused with a clear error") {
  auto store = open_sqlite_store("/nonexistent-dir/kiln.db");
  REQUIRE_FALSE(store.has_value());
  CHECK(store.error().message.find("check the directory exists") != std::string::npos);
}

// What a waiting command says: what is pending and why, and who holds the chips it waits for.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "cli/wait_progress.h"

using namespace kiln;
using namespace kiln::cli;

namespace {

FleetSnapshot busy_fleet() {
  FleetSnapshot fleet;
  fleet.now_ms = 1'000'000;
  fleet.revision_of_node = {{"n01", "a"}, {"n02", "a"}, {"n03", "b"}};
  protocol::LeaseSummary lease;
  lease.lease_id = 3;
  lease.state = protocol::LeaseState::granted;
  lease.priority_class = protocol::PriorityClass::experiment;
  lease.owner = "dev";
  lease.placement = {{"n01", {0, 1, 2, 3, 4, 5, 6, 7}}};
  lease.expires_at_ms = 2'000'000;
  fleet.leases.push_back(lease);
  protocol::LeaseSummary elsewhere = lease;
  elsewhere.lease_id = 4;
  elsewhere.placement = {{"n03", {0, 1}}};
  fleet.leases.push_back(elsewhere);
  protocol::JobSummary running;
  running.job_id = 12;
  running.state = protocol::JobState::running;
  running.priority_class = protocol::PriorityClass::nightly;
  running.workload = "model";
  running.node_id = "n02";
  running.chip_indices = {0, 1, 2, 3};
  fleet.jobs[12] = running;
  protocol::JobSummary queued;
  queued.job_id = 14;
  queued.state = protocol::JobState::queued;
  fleet.jobs[14] = queued;
  protocol::QueueEntry entry;
  entry.job_id = 14;
  entry.chips = 8;
  entry.hardware_revision = "a";
  entry.reasons = {"no node of revision a has 8 free chips (most free: 4 on n02)"};
  fleet.queued_jobs[14] = entry;
  protocol::QueueEntry gang;
  gang.lease_id = 5;
  gang.nodes = 2;
  gang.hardware_revision = "a";
  gang.reasons = {"preempting L3 for it; the grace ends in 25s"};
  gang.expected_start_ms = 1'030'000;
  fleet.queued_leases[5] = gang;
  return fleet;
}

}  // namespace

TEST_CASE("a queued job says why it waits, who holds the chips of its revision, and when it may start") {
  const FleetSnapshot fleet = busy_fleet();
  const std::string text = job_status_text(fleet, 14);
  CHECK(text.find("job 14 queued: no node of revision a has 8 free chips (most free: 4 on n02)") == 0);
  // The lease on n01 and the job on n02 hold revision a; the lease on n03 (revision b) does not.
  CHECK(text.find("held by lease L3 (experiment, dev, 8 chips, ends ") != std::string::npos);
  CHECK(text.find("job 12 (nightly, model on n02)") != std::string::npos);
  CHECK(text.find("L4") == std::string::npos);
  CHECK(text.find("no start in sight yet") != std::string::npos);
  CHECK(job_status_text(fleet, 12) == "job 12 running on n02 (chips 0,1,2,3)");
}

TEST_CASE("a lease waiting for a preemption's grace says so, with its expected start") {
  const std::string text = lease_status_text(busy_fleet(), 5);
  CHECK(text.find("lease L5 (2 whole nodes of revision a) queued: preempting L3 for it; the grace ends in 25s") == 0);
  CHECK(text.find("expected to start ") != std::string::npos);
}

TEST_CASE("a running run lists what it waits for, the queued jobs first") {
  const nlohmann::json report = {
      {"run_id", "smoke-1"},
      {"models", {{{"verdict", "passed"}}, {{"verdict", "pending"}}, {{"verdict", "pending"}}}},
      {"jobs_in_flight",
       {{{"job_id", 12}, {"lease_id", 0}, {"model", "mlp-bf16"}, {"revision", "a"}, {"purpose", "measure"}},
        {{"job_id", 14}, {"lease_id", 0}, {"model", "mlp-fp8"}, {"revision", "a"}, {"purpose", "measure"}},
        {{"job_id", 0}, {"lease_id", 5}, {"model", "mlp-wide"}, {"revision", "a"}, {"purpose", "measure"}}}}};
  const auto lines = run_status_lines(report, busy_fleet());
  REQUIRE(lines.size() == 4);
  CHECK(lines[0] == "run smoke-1: 1 of 3 model runs decided; 1 job running, 2 waiting");
  CHECK(lines[1].find("job 14 queued: ") == 0);
  CHECK(lines[1].find(" for measure mlp-fp8 on revision a") != std::string::npos);
  CHECK(lines[2].find("lease L5 (2 whole nodes of revision a) queued: ") == 0);
  CHECK(lines[3] == "job 12 running on n02 (chips 0,1,2,3) for measure mlp-bf16 on revision a");
  // A report from before jobs in flight were recorded still gives the counts.
  CHECK(run_status_lines({{"run_id", "old"}, {"models", nlohmann::json::array()}}, FleetSnapshot{}).size() == 1);
}

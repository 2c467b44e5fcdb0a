// The index of active jobs agrees with a reading of every job after any sequence of saves: the
// queue's length, the jobs on each node, and the jobs in each developer lease, which a lease's
// grant, events and end read without going through the queue.
#include <doctest/doctest.h>

#include <map>
#include <random>
#include <set>

#include "coordinator/core/active_jobs.h"

using namespace kiln;
using namespace kiln::coordinator;
using protocol::JobState;

TEST_CASE("the index of active jobs follows every save: the queue, each node's jobs, each lease's jobs") {
  constexpr DurationMs kSlackMs = 1000;
  std::mt19937 rng(7);
  ActiveJobIndex index;
  std::map<std::uint64_t, JobRecord> jobs;
  const JobState states[] = {JobState::queued,    JobState::assigned, JobState::running,
                             JobState::succeeded, JobState::failed,   JobState::cancelled};
  for (int step = 0; step < 5000; ++step) {
    const std::uint64_t id = 1 + rng() % 200;
    JobRecord& job = jobs[id];
    job.summary.job_id = id;
    job.summary.state = states[rng() % std::size(states)];
    job.summary.node_id = rng() % 3 == 0 ? "" : "n" + std::to_string(rng() % 5);
    job.lease_id = rng() % 2 == 0 ? 0 : 1 + rng() % 4;
    index.update(job, kSlackMs);

    std::size_t queued = 0;
    std::map<std::string, std::set<std::uint64_t>> on_node;
    std::map<std::uint64_t, std::set<std::uint64_t>> in_lease;
    for (const auto& [other_id, other] : jobs) {
      const JobState state = other.summary.state;
      if (state != JobState::queued && state != JobState::assigned && state != JobState::running) continue;
      queued += state == JobState::queued ? 1 : 0;
      if (!other.summary.node_id.empty()) on_node[other.summary.node_id].insert(other_id);
      if (other.lease_id != 0) in_lease[other.lease_id].insert(other_id);
    }
    REQUIRE(index.queued() == queued);
    REQUIRE(index.by_lease() == in_lease);
    for (std::uint64_t lease = 0; lease <= 4; ++lease) {
      const auto expected = in_lease.find(lease);
      REQUIRE(index.in_lease(lease) == (expected == in_lease.end() ? std::set<std::uint64_t>{} : expected->second));
    }
    for (int node = 0; node < 5; ++node) {
      const std::string node_id = "n" + std::to_string(node);
      REQUIRE(index.on_node(node_id) == on_node[node_id]);
    }
  }
}

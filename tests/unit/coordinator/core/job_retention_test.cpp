// The coordinator holds the active jobs and the newest ended ones; an older job a client names is
// read back from the store, so its memory and its start-up follow the live work, not the history.
#include <doctest/doctest.h>

#include <algorithm>
#include <vector>

#include "coordinator/core/coordinator_core.h"
#include "coordinator/core/job_retention.h"
#include "tests/support/core_harness.h"

using namespace kiln;
using namespace kiln::coordinator;
using namespace kiln::protocol;
using namespace kiln::coordinator::testing;

namespace {

CoordinatorKnobs holding(std::size_t ended_jobs) {
  CoordinatorKnobs knobs;
  knobs.heartbeat_interval_ms = 60000;
  knobs.ended_jobs_in_memory = ended_jobs;
  return knobs;
}

std::vector<std::uint64_t> held_ids(const Harness& h) {
  std::vector<std::uint64_t> ids;
  for (const auto& [id, job] : h.core.jobs()) ids.push_back(id);
  return ids;
}

// Submits `count` jobs nothing can run and cancels them: each ends `cancelled` at once.
std::vector<std::uint64_t> submit_and_cancel(Harness& h, std::size_t count, Now now) {
  std::vector<std::uint64_t> ids;
  for (std::size_t i = 0; i < count; ++i) {
    const Body accepted = h.client("alice", Role::developer, sleep_job(8), now);
    REQUIRE(std::holds_alternative<JobAccepted>(accepted));
    ids.push_back(std::get<JobAccepted>(accepted).job_id);
    REQUIRE(std::holds_alternative<Ok>(h.client("alice", Role::developer, CancelJob{ids.back()}, now)));
  }
  return ids;
}

}  // namespace

TEST_CASE("ended jobs beyond ended_jobs_in_memory are let go, oldest first, and read back from the store when named") {
  Harness h(holding(2));
  const auto ids = submit_and_cancel(h, 5, 10);
  const Body queued = h.client("alice", Role::developer, sleep_job(8), 20);
  const std::uint64_t active = std::get<JobAccepted>(queued).job_id;
  // The two newest ended jobs and the queued one are held; the store has all six.
  CHECK(held_ids(h) == std::vector<std::uint64_t>{ids[3], ids[4], active});
  CHECK(h.stored_jobs.size() == 6);

  SUBCASE("kiln result of a job let go reads it back, with its result") {
    const Body reply = h.client("alice", Role::developer, GetJob{ids[0]}, 30);
    REQUIRE(std::holds_alternative<JobDetail>(reply));
    CHECK(std::get<JobDetail>(reply).job.job_id == ids[0]);
    CHECK(std::get<JobDetail>(reply).job.state == JobState::cancelled);
    CHECK(h.recalls == 1);
    // Held only to answer: the table is back to its bound.
    CHECK(held_ids(h) == std::vector<std::uint64_t>{ids[3], ids[4], active});
  }
  SUBCASE("cancelling a job let go says it ended, not that there is no such job") {
    const Body reply = h.client("alice", Role::developer, CancelJob{ids[1]}, 30);
    REQUIRE(std::holds_alternative<ErrorReply>(reply));
    CHECK(std::get<ErrorReply>(reply).code == "conflict");
    CHECK(std::get<ErrorReply>(reply).message.find("already ended (cancelled)") != std::string::npos);
  }
  SUBCASE("a held job and an id never given out need no store read") {
    CHECK(std::holds_alternative<JobDetail>(h.client("alice", Role::developer, GetJob{ids[4]}, 30)));
    const Body unknown = h.client("alice", Role::developer, GetJob{active + 1}, 30);
    REQUIRE(std::holds_alternative<ErrorReply>(unknown));
    CHECK(std::get<ErrorReply>(unknown).code == "not_found");
    CHECK(h.recalls == 0);
  }
  SUBCASE("a restarted coordinator holds the same jobs, gives out new ids after the newest, and reads old ones back") {
    Harness restarted(holding(2), h.store(), 40);
    restarted.stored_jobs = h.stored_jobs;  // the same database
    CHECK(held_ids(restarted) == std::vector<std::uint64_t>{ids[3], ids[4], active});
    const Body reply = restarted.client("alice", Role::developer, GetJob{ids[0]}, 41);
    REQUIRE(std::holds_alternative<JobDetail>(reply));
    CHECK(std::get<JobDetail>(reply).job.job_id == ids[0]);
    const Body next = restarted.client("alice", Role::developer, sleep_job(8), 42);
    CHECK(std::get<JobAccepted>(next).job_id == active + 1);
  }
}

TEST_CASE("a store that cannot read a job let go makes the request fail with what to do, not a verdict") {
  struct FailingRecall : Harness {
    using Harness::Harness;
    Result<std::optional<JobRecord>> recall_job(std::uint64_t) override {
      return kiln::fail(Errc::io, "disk I/O error");
    }
  };
  FailingRecall h(holding(1));
  const auto ids = submit_and_cancel(h, 3, 10);
  const Body reply = h.client("alice", Role::developer, GetJob{ids[0]}, 20);
  REQUIRE(std::holds_alternative<ErrorReply>(reply));
  CHECK(std::get<ErrorReply>(reply).code == "unavailable");
  CHECK(std::get<ErrorReply>(reply).message.find("disk I/O error") != std::string::npos);
  CHECK(std::get<ErrorReply>(reply).message.find("try again") != std::string::npos);
}

TEST_CASE("a failed CI job stays held while a quarantine of its node would rerun it, also across a restart") {
  CoordinatorKnobs knobs = holding(1);
  knobs.quarantine_rerun_window_ms = 60000;
  Harness h(knobs);
  h.agent("p1", "n01", hello("n01", "a"), 0);
  const auto fail_on_n01 = [&](Role role, PriorityClass cls, TimeMs now) {
    SubmitJob job = sleep_job(1, cls);
    job.hardware_revision = "a";
    const Body accepted = h.client(role == Role::ci ? "ci" : "dev", role, job, now);
    const std::uint64_t id = std::get<JobAccepted>(accepted).job_id;
    REQUIRE(h.core.jobs().at(id).summary.node_id == "n01");
    JobFinished fin;
    fin.job_id = id;
    fin.attempt = h.core.jobs().at(id).summary.attempt;
    fin.outcome = JobOutcome::failed;
    fin.exit_code = 1;
    h.agent("p1", "n01", fin, now);
    return id;
  };
  const std::uint64_t presubmit = fail_on_n01(Role::ci, PriorityClass::presubmit, 1);
  // Experiments that failed after it: the developers' business, let go beyond the newest one.
  for (TimeMs now = 2; now < 6; ++now) fail_on_n01(Role::developer, PriorityClass::experiment, now);
  CHECK(h.core.jobs().size() == 2);
  REQUIRE(h.core.jobs().count(presubmit) == 1);

  SUBCASE("its node quarantined now: it is rerun") {
    h.agent("p2", "n02", hello("n02", "a"), 10);
    h.agent("p1", "n01", failing_probe(), 11);
    CHECK(h.stored_jobs.at(presubmit).rerun_job_id != 0);  // then let go: nothing decides by it now
  }
  SUBCASE("its node quarantined after a restart: it is rerun") {
    Harness restarted(knobs, h.store(), 20);
    CHECK(restarted.core.jobs().count(presubmit) == 1);
    restarted.agent("p1", "n01", hello("n01", "a"), 21);
    restarted.agent("p2", "n02", hello("n02", "a"), 21);
    restarted.agent("p1", "n01", failing_probe(), 22);
    CHECK(restarted.stored_jobs.at(presubmit).rerun_job_id != 0);
  }
  SUBCASE("past the window it is let go like any other") {
    h.tick(1 + knobs.quarantine_rerun_window_ms + 1);
    CHECK(h.core.jobs().count(presubmit) == 0);
  }
}

TEST_CASE("the jobs held at start: the active ones, the newest ended ones, and each node's newest rollout install") {
  std::vector<JobRecord> stored;
  auto add = [&](std::uint64_t id, JobState state, const std::string& rollout_node = "") {
    JobRecord job;
    job.summary.job_id = id;
    job.summary.state = state;
    job.summary.workload = rollout_node.empty() ? "smoke" : std::string(kInstallWorkload);
    if (!rollout_node.empty()) job.summary.submitted_by = std::string(kRolloutSubmitter);
    job.requested_node_id = rollout_node;
    stored.push_back(job);
  };
  add(1, JobState::succeeded, "n01");
  add(2, JobState::running);
  add(3, JobState::failed, "n01");
  add(4, JobState::succeeded, "n02");
  for (std::uint64_t id = 5; id <= 9; ++id) add(id, JobState::cancelled);
  add(10, JobState::queued);
  // 6: a presubmit that failed at 5000, which a quarantine of its node may rerun.
  stored[5].summary.state = JobState::failed;
  stored[5].summary.priority_class = PriorityClass::presubmit;
  stored[5].finished_at_ms = 5000;
  CHECK(may_be_rerun(stored[5]));
  std::reverse(stored.begin(), stored.end());
  const auto held = [&](TimeMs reruns_since_ms) {
    std::vector<std::uint64_t> ids;
    for (const JobRecord& job : jobs_held_at_start(stored, 3, reruns_since_ms)) ids.push_back(job.summary.job_id);
    return ids;
  };
  // 7, 8 and 9 are the newest ended; 3 and 4 their nodes' newest installs; 2 and 10 active; 6
  // while it may still be rerun.
  CHECK(held(6000) == std::vector<std::uint64_t>{2, 3, 4, 7, 8, 9, 10});
  CHECK(held(4000) == std::vector<std::uint64_t>{2, 3, 4, 6, 7, 8, 9, 10});
  // A job submitted by hand under another name is no rollout's.
  CHECK(rollout_install_node(stored.back()) == "n01");
  stored.back().summary.submitted_by = "ops";
  CHECK(rollout_install_node(stored.back()).empty());
}

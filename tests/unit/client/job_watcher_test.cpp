// JobWatcher against a scripted coordinator: it follows jobs with watch_jobs, sending what it saw,
// and falls back to get_job polls when the coordinator is older than watch_jobs.
#include <doctest/doctest.h>

#include <deque>

#include "client/job_watcher.h"

using namespace kiln;
using namespace kiln::protocol;

namespace {

JobSummary job_in(std::uint64_t id, JobState state, std::uint32_t attempt) {
  JobSummary job;
  job.job_id = id;
  job.state = state;
  job.attempt = attempt;
  return job;
}

// Answers each watch_jobs with the next of `events` (or, knowing no watch_jobs, bad_message as an
// older coordinator does) and each get_job with the job in `polled`'s next state.
class ScriptedCoordinator final : public cli::Client {
 public:
  Result<Body> request(Body body) override {
    if (auto* watch = std::get_if<WatchJobs>(&body)) {
      watches.push_back(*watch);
      if (!knows_watch_jobs) return fail(Errc::bad_message, "unknown message type 'watch_jobs'");
      REQUIRE(!events.empty());
      JobEvents next = events.front();
      events.pop_front();
      return next;
    }
    if (auto* get = std::get_if<GetJob>(&body)) {
      ++gets;
      REQUIRE(!polled.empty());
      JobDetail detail;
      detail.job = job_in(get->job_id, polled.front(), 1);
      polled.pop_front();
      return detail;
    }
    return fail(Errc::bad_message, "not scripted");
  }

  bool knows_watch_jobs = true;
  std::deque<JobEvents> events;
  std::deque<JobState> polled;
  std::vector<WatchJobs> watches;
  int gets = 0;
};

}  // namespace

TEST_CASE("a job watcher asks once for a job as it is, then waits for changes from what it saw") {
  ScriptedCoordinator coordinator;
  coordinator.events = {JobEvents{{job_in(7, JobState::assigned, 1)}, {}}, JobEvents{},
                        JobEvents{{job_in(7, JobState::running, 1)}, {}}};
  cli::JobWatcher watcher(coordinator, 30000, std::chrono::milliseconds(1));
  watcher.follow(7);

  auto first = watcher.changes();
  REQUIRE(first.has_value());
  REQUIRE(first->size() == 1);
  CHECK(coordinator.watches.at(0).wait_ms == 0);  // a job new to it: as it is now
  auto silent = watcher.changes();
  REQUIRE(silent.has_value());
  CHECK(silent->empty());
  CHECK(coordinator.watches.at(1).wait_ms == 30000);
  CHECK(coordinator.watches.at(1).jobs.at(0).state == JobState::assigned);
  CHECK(coordinator.watches.at(1).jobs.at(0).attempt == 1);
  auto running = watcher.changes();
  REQUIRE(running.has_value());
  REQUIRE(running->size() == 1);
  CHECK(running->front().state == JobState::running);
  CHECK_FALSE(watcher.polling());
  CHECK(coordinator.gets == 0);
}

TEST_CASE("a job watcher follows by get_job a coordinator older than watch_jobs") {
  ScriptedCoordinator coordinator;
  coordinator.knows_watch_jobs = false;
  coordinator.polled = {JobState::running, JobState::running, JobState::succeeded};
  cli::JobWatcher watcher(coordinator, 30000, std::chrono::milliseconds(1));
  watcher.follow(7);

  auto first = watcher.changes();
  REQUIRE(first.has_value());
  CHECK(watcher.polling());
  REQUIRE(first->size() == 1);
  CHECK(first->front().state == JobState::running);
  auto same = watcher.changes();
  REQUIRE(same.has_value());
  CHECK(same->empty());
  auto ended = watcher.changes();
  REQUIRE(ended.has_value());
  REQUIRE(ended->size() == 1);
  CHECK(ended->front().state == JobState::succeeded);
  CHECK(coordinator.watches.size() == 1);  // asked once, then never again
  CHECK(coordinator.gets == 3);
}

// JobWatcher against a scripted coordinator: it follows jobs, leases and the node list with
// watch_jobs, sending what it saw, and falls back to get_job and list_leases polls when the
// coordinator is older than watch_jobs or than its leases and nodes_revision.
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

JobEvents events_of(std::vector<JobSummary> jobs, std::uint64_t nodes_revision = 0,
                    std::vector<LeaseSummary> leases = {}) {
  JobEvents events;
  events.jobs = std::move(jobs);
  events.nodes_revision = nodes_revision;
  events.leases = std::move(leases);
  return events;
}

LeaseSummary lease_in(std::uint64_t id, LeaseState state) {
  LeaseSummary lease;
  lease.lease_id = id;
  lease.state = state;
  return lease;
}

// A watcher of job 7, lease 3 and the node list from `nodes_revision`.
cli::JobWatcher watcher_of_all(cli::Client& coordinator, std::uint64_t nodes_revision,
                               std::chrono::milliseconds poll_interval) {
  cli::JobWatcher watcher(coordinator, 30000, poll_interval);
  watcher.follow_nodes(nodes_revision);
  watcher.follow(7);
  watcher.follow_lease(3);
  return watcher;
}

// Answers each watch_jobs with the next of `events` (or, knowing no watch_jobs, bad_message as an
// older coordinator does) and each get_job with the job in `polled`'s next state.
class ScriptedCoordinator final : public cli::Client {
 public:
  Result<Body> request(Body body) override {
    if (auto* watch = std::get_if<WatchJobs>(&body)) {
      watches.push_back(*watch);
      if (!knows_watch_jobs) return fail(Errc::bad_message, "unknown message type 'watch_jobs'");
      if (watch->jobs.empty() && !knows_watch_without_jobs) {
        return fail(Errc::bad_message, "watch_jobs message: jobs must have 1 to 1000 elements");
      }
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
    if (std::holds_alternative<ListLeases>(body)) {
      ++lease_lists;
      REQUIRE(!leases.empty());
      LeaseList list{{leases.front()}};
      leases.pop_front();
      return list;
    }
    return fail(Errc::bad_message, "not scripted");
  }

  bool knows_watch_jobs = true;
  bool knows_watch_without_jobs = true;
  std::deque<LeaseSummary> leases;  // list_leases lists the next one
  int lease_lists = 0;
  std::deque<JobEvents> events;
  std::deque<JobState> polled;
  std::vector<WatchJobs> watches;
  int gets = 0;
};

}  // namespace

TEST_CASE("a job watcher asks once for a job as it is, then waits for changes from what it saw") {
  ScriptedCoordinator coordinator;
  coordinator.events = {events_of({job_in(7, JobState::assigned, 1)}), JobEvents{},
                        events_of({job_in(7, JobState::running, 1)})};
  cli::JobWatcher watcher(coordinator, 30000, std::chrono::milliseconds(1));
  watcher.follow(7);

  auto first = watcher.changes();
  REQUIRE(first.has_value());
  REQUIRE(first->jobs.size() == 1);
  CHECK(coordinator.watches.at(0).wait_ms == 0);  // a job new to it: as it is now
  auto silent = watcher.changes();
  REQUIRE(silent.has_value());
  CHECK(silent->empty());
  CHECK(coordinator.watches.at(1).wait_ms == 30000);
  CHECK(coordinator.watches.at(1).jobs.at(0).state == JobState::assigned);
  CHECK(coordinator.watches.at(1).jobs.at(0).attempt == 1);
  auto running = watcher.changes();
  REQUIRE(running.has_value());
  REQUIRE(running->jobs.size() == 1);
  CHECK(running->jobs.front().state == JobState::running);
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
  REQUIRE(first->jobs.size() == 1);
  CHECK(first->jobs.front().state == JobState::running);
  auto same = watcher.changes();
  REQUIRE(same.has_value());
  CHECK(same->empty());
  auto ended = watcher.changes();
  REQUIRE(ended.has_value());
  REQUIRE(ended->jobs.size() == 1);
  CHECK(ended->jobs.front().state == JobState::succeeded);
  CHECK(coordinator.watches.size() == 1);  // asked once, then never again
  CHECK(coordinator.gets == 3);
}

TEST_CASE("a job watcher hears a lease's grant and a change of the node list from the same watch as its jobs") {
  ScriptedCoordinator coordinator;
  coordinator.events = {events_of({job_in(7, JobState::assigned, 1)}, 5, {lease_in(3, LeaseState::pending)}),
                        events_of({}, 5, {lease_in(3, LeaseState::granted)}), events_of({}, 6)};
  cli::JobWatcher watcher = watcher_of_all(coordinator, 5, std::chrono::milliseconds(1));

  auto first = watcher.changes();
  REQUIRE(first.has_value());
  CHECK(first->jobs.size() == 1);
  REQUIRE(first->leases.size() == 1);
  CHECK(first->leases[0].state == LeaseState::pending);
  CHECK_FALSE(first->nodes_changed);
  CHECK(coordinator.watches.at(0).wait_ms == 0);
  CHECK(coordinator.watches.at(0).nodes_revision == 5);

  auto granted = watcher.changes();
  REQUIRE(granted.has_value());
  CHECK(coordinator.watches.at(1).wait_ms == 30000);  // the grant is pushed: the watch waits whole
  REQUIRE(coordinator.watches.at(1).leases.size() == 1);
  CHECK(coordinator.watches.at(1).leases[0].state == LeaseState::pending);
  REQUIRE(granted->leases.size() == 1);
  CHECK(granted->leases[0].state == LeaseState::granted);
  CHECK_FALSE(granted->nodes_changed);

  watcher.forget_lease(3);
  auto nodes = watcher.changes();
  REQUIRE(nodes.has_value());
  CHECK(coordinator.watches.at(2).leases.empty());
  CHECK(nodes->nodes_changed);
  CHECK(watcher.pushes_leases_and_nodes());
  CHECK(coordinator.lease_lists == 0);
  CHECK(coordinator.gets == 0);
}

TEST_CASE("a job watcher reads the leases of a coordinator that does not push them, and its node list every time") {
  // A coordinator that knows watch_jobs but not its leases and nodes_revision: its replies say no revision.
  ScriptedCoordinator coordinator;
  coordinator.events = {events_of({job_in(7, JobState::running, 1)}), JobEvents{}};
  coordinator.leases = {lease_in(3, LeaseState::pending), lease_in(3, LeaseState::granted)};
  cli::JobWatcher watcher = watcher_of_all(coordinator, 0, std::chrono::milliseconds(250));

  auto first = watcher.changes();
  REQUIRE(first.has_value());
  CHECK(first->jobs.size() == 1);
  REQUIRE(first->leases.size() == 1);
  CHECK(first->nodes_changed);
  auto granted = watcher.changes();
  REQUIRE(granted.has_value());
  // While a lease is followed the watch waits a poll interval only, then the leases are listed.
  CHECK(coordinator.watches.at(1).wait_ms == 250);
  CHECK(coordinator.watches.at(1).leases.empty());
  REQUIRE(granted->leases.size() == 1);
  CHECK(granted->leases[0].state == LeaseState::granted);
  CHECK(granted->nodes_changed);
  CHECK(coordinator.lease_lists == 2);
  CHECK_FALSE(watcher.polling());
  CHECK_FALSE(watcher.pushes_leases_and_nodes());
}

TEST_CASE("a job watcher with only a lease to follow polls it where a watch without a job is refused") {
  ScriptedCoordinator coordinator;
  coordinator.knows_watch_without_jobs = false;
  coordinator.leases = {lease_in(3, LeaseState::pending), lease_in(3, LeaseState::pending)};
  cli::JobWatcher watcher(coordinator, 30000, std::chrono::milliseconds(1));
  watcher.follow_lease(3);

  auto first = watcher.changes();
  REQUIRE(first.has_value());
  REQUIRE(first->leases.size() == 1);
  auto same = watcher.changes();
  REQUIRE(same.has_value());
  CHECK(same->empty());
  CHECK(coordinator.watches.size() == 1);  // refused once, then never asked again
  CHECK(coordinator.lease_lists == 2);
  CHECK_FALSE(watcher.polling());
}

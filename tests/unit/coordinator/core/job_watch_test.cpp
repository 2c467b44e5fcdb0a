// watch_jobs through the pure core: a watcher hears of every change of its jobs, in order, and of
// nothing else; a watch with nothing new is answered when its wait passes, which frees its place;
// a connection and the coordinator park a bounded number of watches, and say so past it. A watch
// also hears of its leases' grants and ends, and of changes of the node list when it follows it.
#include <doctest/doctest.h>

#include "coordinator/core/coordinator_core.h"
#include "tests/support/core_harness.h"

using namespace kiln;
using namespace kiln::coordinator;
using namespace kiln::protocol;
using namespace kiln::coordinator::testing;

namespace {

constexpr std::uint32_t kWaitMs = 60000;

// Sends a watch_jobs from `key`'s connection; the reply, if any came at once, stays in to_clients.
void watch(Harness& h, const std::string& key, WatchJobs request, Now now) {
  h.core.on_client_message("c-" + key, Caller{key, Role::ci}, make_envelope(std::move(request), h.next_id++), now);
  h.drain();
}

// A watch of jobs alone, as a client older than the leases and nodes_revision fields sends it.
void watch(Harness& h, const std::string& key, std::vector<WatchedJob> seen, std::uint32_t wait_ms, Now now) {
  WatchJobs request;
  request.jobs = std::move(seen);
  request.wait_ms = wait_ms;
  watch(h, key, std::move(request), now);
}

WatchJobs nodes_watch(std::uint64_t revision) {
  WatchJobs request;
  request.wait_ms = kWaitMs;
  request.nodes_revision = revision;
  return request;
}

std::uint64_t nodes_revision(Harness& h, Now now) {
  const Body reply = h.client("ops", Role::ops, ListNodes{}, now);
  REQUIRE(std::holds_alternative<NodeList>(reply));
  return std::get<NodeList>(reply).revision;
}

WatchedJob seen_as(const JobSummary& job) { return WatchedJob{job.job_id, job.state, job.attempt}; }

}  // namespace

TEST_CASE("a job watcher hears of every change of its jobs, in order, and of nothing of others") {
  Harness h;
  h.agent("p1", "n01", hello("n01", "a"), 0);
  const auto mine = h.submit("ci", Role::ci, sleep_job(1, PriorityClass::nightly), 10);
  const auto other = h.submit("ci", Role::ci, sleep_job(1, PriorityClass::nightly), 10);

  // With no wait, the jobs as they are now.
  watch(h, "ci", {WatchedJob{mine, JobState::queued, 0}}, 0, 20);
  auto events = h.client_bodies<JobEvents>("ci");
  REQUIRE(events.size() == 1);
  REQUIRE(events[0].jobs.size() == 1);
  CHECK(events[0].jobs[0].state == JobState::assigned);
  std::vector<JobState> heard{events[0].jobs[0].state};
  WatchedJob seen = seen_as(events[0].jobs[0]);

  const auto park = [&](Now now) {
    const std::size_t before = h.to_clients.size();
    watch(h, "ci", {seen}, kWaitMs, now);
    CHECK(h.to_clients.size() == before);  // nothing new: parked
  };
  const auto hear = [&](std::size_t answers) {
    events = h.client_bodies<JobEvents>("ci");
    REQUIRE(events.size() == answers);
    REQUIRE(events.back().jobs.size() == 1);
    CHECK(events.back().jobs[0].job_id == mine);
    heard.push_back(events.back().jobs[0].state);
    seen = seen_as(events.back().jobs[0]);
  };

  park(30);
  h.agent("p1", "n01", JobStarted{other, 1}, 40);
  h.agent("p1", "n01", finished(other, 1, JobOutcome::succeeded), 50);
  CHECK(h.client_bodies<JobEvents>("ci").size() == 1);  // the other job's changes are not news to it
  h.agent("p1", "n01", JobStarted{mine, 1}, 60);
  hear(2);
  park(70);
  h.tick(80);
  CHECK(h.client_bodies<JobEvents>("ci").size() == 2);
  h.agent("p1", "n01", finished(mine, 1, JobOutcome::succeeded), 5000);
  hear(3);
  CHECK(heard == std::vector<JobState>{JobState::assigned, JobState::running, JobState::succeeded});
}

TEST_CASE("a job watch with nothing new is answered with no job when its wait passes, which frees its place") {
  CoordinatorKnobs knobs;
  knobs.max_job_watches_per_client = 2;
  knobs.max_job_watches = 3;
  Harness h(knobs);
  // No node: the job stays queued, and nothing changes while the watches wait.
  const auto id = h.submit("ci", Role::ci, sleep_job(1, PriorityClass::nightly), 10);
  const WatchedJob seen = seen_as(h.job(id).summary);

  watch(h, "ci", {seen}, kWaitMs, 20);
  watch(h, "ci", {seen}, kWaitMs, 20);
  CHECK(h.client_bodies<JobEvents>("ci").empty());
  CHECK(h.core.next_deadline().has_value());

  // A third from the same connection is refused, saying what the bound is and what to do.
  watch(h, "ci", {seen}, kWaitMs, 30);
  auto refused = h.client_bodies<ErrorReply>("ci");
  REQUIRE(refused.size() == 1);
  CHECK(refused[0].code == "unavailable");
  CHECK(refused[0].message.find("max_job_watches_per_client") != std::string::npos);
  CHECK(refused[0].message.find("watch several jobs in one watch_jobs") != std::string::npos);

  // Another connection parks one; then the coordinator's own bound is reached.
  watch(h, "dev", {seen}, kWaitMs, 30);
  watch(h, "lab", {seen}, kWaitMs, 30);
  CHECK(h.client_bodies<JobEvents>("dev").empty());
  refused = h.client_bodies<ErrorReply>("lab");
  REQUIRE(refused.size() == 1);
  CHECK(refused[0].message.find("max_job_watches") != std::string::npos);

  // A watcher that went away is never heard from again: its watches are dropped at their wait,
  // answered with no job (to nobody), and their places are free again.
  h.tick(20 + kWaitMs - 1);
  CHECK(h.client_bodies<JobEvents>("ci").empty());
  h.tick(20 + kWaitMs);
  auto answered = h.client_bodies<JobEvents>("ci");
  REQUIRE(answered.size() == 2);
  CHECK(answered[0].jobs.empty());
  CHECK(answered[0].unknown_job_ids.empty());
  watch(h, "ci", {seen}, kWaitMs, 20 + kWaitMs);
  watch(h, "ci", {seen}, kWaitMs, 20 + kWaitMs);
  CHECK(h.client_bodies<ErrorReply>("ci").size() == 1);
}

TEST_CASE("a job watch names the jobs the coordinator does not hold at once") {
  Harness h;
  h.agent("p1", "n01", hello("n01", "a"), 0);
  const auto id = h.submit("ci", Role::ci, sleep_job(1, PriorityClass::nightly), 10);
  watch(h, "ci", {seen_as(h.job(id).summary), WatchedJob{id + 100, JobState::queued, 0}}, kWaitMs, 20);
  auto events = h.client_bodies<JobEvents>("ci");
  REQUIRE(events.size() == 1);
  CHECK(events[0].jobs.empty());
  CHECK(events[0].unknown_job_ids == std::vector<std::uint64_t>{id + 100});
}

TEST_CASE("a job watch asked again of a restarted coordinator is answered at once with what changed meanwhile") {
  Harness h;
  h.agent("p1", "n01", hello("n01", "a"), 0);
  const auto id = h.submit("ci", Role::ci, sleep_job(1, PriorityClass::nightly), 10);
  h.agent("p1", "n01", JobStarted{id, 1}, 20);
  const WatchedJob seen = seen_as(h.job(id).summary);
  h.agent("p1", "n01", finished(id, 1, JobOutcome::succeeded), 30);

  // The watcher saw it running; the job ended while the coordinator restarted.
  Harness restarted(CoordinatorKnobs{}, h.store(), 1000);
  watch(restarted, "ci", {seen}, kWaitMs, 1010);
  auto events = restarted.client_bodies<JobEvents>("ci");
  REQUIRE(events.size() == 1);
  REQUIRE(events[0].jobs.size() == 1);
  CHECK(events[0].jobs[0].state == JobState::succeeded);
}

TEST_CASE("a watch that follows the node list is answered when a node's record changes, and only then") {
  Harness h;
  h.agent("p1", "n01", hello("n01", "a"), 0);
  const std::uint64_t first = nodes_revision(h, 10);
  CHECK(first != 0);
  watch(h, "ci", nodes_watch(first), 20);
  // A job placed on the node uses its chips but changes no node record: nothing to hear.
  const auto id = h.submit("ci", Role::ci, sleep_job(1, PriorityClass::nightly), 30);
  h.agent("p1", "n01", JobStarted{id, 1}, 40);
  CHECK(h.client_bodies<JobEvents>("ci").empty());

  // A client older than nodes_revision follows its job alone, and hears nothing of the nodes.
  watch(h, "old", {seen_as(h.job(id).summary)}, kWaitMs, 50);
  CHECK(h.client_bodies<JobEvents>("old").empty());

  REQUIRE(std::holds_alternative<Ok>(h.client("ops", Role::ops, DrainNode{"n01", true, "cabling"}, 60)));
  auto events = h.client_bodies<JobEvents>("ci");
  REQUIRE(events.size() == 1);
  CHECK(events[0].jobs.empty());
  CHECK(events[0].leases.empty());
  const std::uint64_t second = events[0].nodes_revision;
  CHECK(second != first);
  CHECK(nodes_revision(h, 70) == second);
  CHECK(h.client_bodies<JobEvents>("old").empty());

  // A watch from the revision before is answered at once; one from the latest waits again.
  watch(h, "ci", nodes_watch(first), 80);
  CHECK(h.client_bodies<JobEvents>("ci").size() == 2);
  watch(h, "ci", nodes_watch(second), 90);
  CHECK(h.client_bodies<JobEvents>("ci").size() == 2);
  // A node that registers is a change of the list too.
  h.agent("p2", "n02", hello("n02", "a"), 100);
  events = h.client_bodies<JobEvents>("ci");
  REQUIRE(events.size() == 3);
  CHECK(events[2].nodes_revision != second);
  CHECK(h.client_bodies<JobEvents>("old").empty());
}

TEST_CASE("a node list revision read from a coordinator before its restart is no revision of the restarted one") {
  Harness h;
  h.agent("p1", "n01", hello("n01", "a"), 0);
  const std::uint64_t before = nodes_revision(h, 10);
  Harness restarted(CoordinatorKnobs{}, h.store(), 1000);
  watch(restarted, "ci", nodes_watch(before), 1010);
  auto events = restarted.client_bodies<JobEvents>("ci");
  REQUIRE(events.size() == 1);
  CHECK(events[0].nodes_revision != before);
}

TEST_CASE("a watch of a lease is answered when the lease is granted, and names the leases the coordinator does not hold") {
  Harness h;
  h.agent("p1", "n01", hello("n01", "a"), 0);
  const auto busy = h.submit("ci", Role::ci, sleep_job(8, PriorityClass::nightly), 10);
  h.agent("p1", "n01", JobStarted{busy, 1}, 20);
  const Body asked = h.client("dev", Role::developer, lease_request(8, "a"), 30);
  REQUIRE(std::holds_alternative<LeasePending>(asked));
  const std::uint64_t lease_id = std::get<LeasePending>(asked).lease.lease_id;

  WatchJobs request;
  request.wait_ms = kWaitMs;
  request.leases = {WatchedLease{lease_id, LeaseState::pending}};
  watch(h, "ci", request, 40);
  CHECK(h.client_bodies<JobEvents>("ci").empty());

  h.agent("p1", "n01", finished(busy, 1, JobOutcome::succeeded), 50);
  auto events = h.client_bodies<JobEvents>("ci");
  REQUIRE(events.size() == 1);
  REQUIRE(events[0].leases.size() == 1);
  CHECK(events[0].leases[0].lease_id == lease_id);
  CHECK(events[0].leases[0].state == LeaseState::granted);
  CHECK(events[0].nodes_revision != 0);

  request.leases = {WatchedLease{lease_id, LeaseState::granted}, WatchedLease{lease_id + 100, LeaseState::pending}};
  watch(h, "ci", request, 60);
  events = h.client_bodies<JobEvents>("ci");
  REQUIRE(events.size() == 2);
  CHECK(events[1].leases.empty());
  CHECK(events[1].unknown_lease_ids == std::vector<std::uint64_t>{lease_id + 100});
}

TEST_CASE("a watch of nothing is refused, saying what to list") {
  Harness h;
  watch(h, "ci", WatchJobs{}, 10);
  auto refused = h.client_bodies<ErrorReply>("ci");
  REQUIRE(refused.size() == 1);
  CHECK(refused[0].code == "invalid_argument");
  CHECK(refused[0].message.find("nodes_revision") != std::string::npos);
}

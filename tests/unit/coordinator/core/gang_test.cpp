// Gangs: the ranks of a multi-node job start together in a lease of whole nodes, one per node,
// each told the same rendezvous; a rank that ends without succeeding ends the others.
#include <doctest/doctest.h>

#include <set>

#include "coordinator/core/coordinator_core.h"
#include "tests/support/core_harness.h"

using namespace kiln;
using namespace kiln::coordinator;
using namespace kiln::protocol;
using namespace kiln::coordinator::testing;

namespace {

CoordinatorKnobs quiet_knobs() {
  CoordinatorKnobs knobs;
  knobs.liveness_missed_beats = 1000;  // nodes stay alive without heartbeats
  return knobs;
}

// Nodes n01..nN, each announcing 10.0.0.<i> as its rendezvous address, on peers p1..pN.
void register_nodes(Harness& h, int count) {
  for (int i = 1; i <= count; ++i) {
    Hello hi = hello(fmt::format("n{:02}", i), "a");
    hi.rendezvous_address = fmt::format("10.0.0.{}", i);
    h.agent(fmt::format("p{}", i), hi.node_id, hi, 0);
  }
}

std::uint64_t lease_nodes(Harness& h, std::uint32_t nodes, Now now) {
  RequestLease r;
  r.chips = 0;
  r.nodes = nodes;
  r.duration_ms = 3600000;
  Body reply = h.client("dev", Role::developer, r, now);
  REQUIRE(std::holds_alternative<LeaseGranted>(reply));
  return std::get<LeaseGranted>(reply).lease.lease_id;
}

SubmitGang gang_of(std::uint64_t lease_id, std::size_t ranks) {
  SubmitGang gang{lease_id, {}};
  for (std::size_t r = 0; r < ranks; ++r) gang.jobs.push_back(sleep_job(8));
  return gang;
}

std::vector<std::uint64_t> submit_gang(Harness& h, const SubmitGang& gang, Now now) {
  Body reply = h.client("dev", Role::developer, gang, now);
  REQUIRE_MESSAGE(std::holds_alternative<GangAccepted>(reply),
                  (std::holds_alternative<ErrorReply>(reply) ? std::get<ErrorReply>(reply).message : ""));
  return std::get<GangAccepted>(reply).job_ids;
}

// Every job_start sent so far, from every peer.
std::vector<JobStart> starts(const Harness& h) {
  std::vector<JobStart> out;
  for (const auto& a : h.to_agents) {
    if (auto* s = std::get_if<JobStart>(&a.body)) out.push_back(*s);
  }
  return out;
}

std::vector<JobCancel> cancels(const Harness& h) {
  std::vector<JobCancel> out;
  for (const auto& a : h.to_agents) {
    if (auto* c = std::get_if<JobCancel>(&a.body)) out.push_back(*c);
  }
  return out;
}

JobFinished rank_ended(std::uint64_t id, JobOutcome outcome) {
  JobFinished fin;
  fin.job_id = id;
  fin.attempt = 1;
  fin.outcome = outcome;
  fin.exit_code = outcome == JobOutcome::failed ? 3 : 0;
  return fin;
}

}  // namespace

TEST_CASE("the ranks of a gang start together, one per node, with one rendezvous") {
  Harness h(quiet_knobs());
  register_nodes(h, 3);
  const auto lease = lease_nodes(h, 3, 10);
  const auto ids = submit_gang(h, gang_of(lease, 3), 20);
  REQUIRE(ids.size() == 3);
  CHECK(ids[1] == ids[0] + 1);
  CHECK(ids[2] == ids[0] + 2);

  const auto sent = starts(h);
  REQUIRE(sent.size() == 3);
  std::set<std::string> nodes;
  std::set<std::uint32_t> ranks;
  for (const auto& start : sent) {
    const JobRecord& job = h.job(start.job_id);
    nodes.insert(job.summary.node_id);
    ranks.insert(start.rendezvous.rank);
    CHECK(start.rendezvous.rank == start.job_id - ids[0]);
    CHECK(start.rendezvous.world_size == 3);
    CHECK(start.rendezvous.master_port == 29500 + ids[0] % 1000);
    CHECK(job.summary.gang_id == ids[0]);
    CHECK(job.summary.gang_rank == start.rendezvous.rank);
    CHECK(job.summary.gang_size == 3);
  }
  CHECK(nodes.size() == 3);
  CHECK(ranks == std::set<std::uint32_t>{0, 1, 2});
  // The master is rank 0's node, as that node announced itself.
  const std::string rank0_node = h.job(ids[0]).summary.node_id;
  for (const auto& start : sent) {
    CHECK(start.rendezvous.master_address == h.core.nodes().at(rank0_node).summary.rendezvous_address);
  }
  CHECK(sent[0].rendezvous.master_address.starts_with("10.0.0."));

  // A job outside any gang is told no rendezvous.
  Harness single(quiet_knobs());
  register_nodes(single, 1);
  const auto alone = single.submit("dev", Role::developer, sleep_job(1), 10);
  const auto alone_start = single.agent_bodies<JobStart>("p1");
  REQUIRE(alone_start.size() == 1);
  CHECK(alone_start[0].job_id == alone);
  CHECK(alone_start[0].rendezvous.world_size == 0);
  CHECK(single.job(alone).summary.gang_size == 0);
}

TEST_CASE("a gang is refused as a whole: larger than the lease, a lease of chips, a bad rank") {
  Harness h(quiet_knobs());
  register_nodes(h, 2);
  const auto lease = lease_nodes(h, 2, 10);
  Body too_big = h.client("dev", Role::developer, gang_of(lease, 3), 20);
  REQUIRE(std::holds_alternative<ErrorReply>(too_big));
  CHECK(std::get<ErrorReply>(too_big).code == "invalid_argument");
  CHECK(std::get<ErrorReply>(too_big).message.find("needs 3 nodes, lease L1 holds 2") != std::string::npos);

  SubmitGang bad_rank = gang_of(lease, 2);
  bad_rank.jobs[1].chips = 9;
  Body refused = h.client("dev", Role::developer, bad_rank, 30);
  REQUIRE(std::holds_alternative<ErrorReply>(refused));
  CHECK(std::get<ErrorReply>(refused).message.starts_with("rank 1: "));
  CHECK(h.core.jobs().empty());  // nothing of a refused gang is kept

  Body foreign = h.client("mallory", Role::developer, gang_of(lease, 2), 40);
  CHECK(std::get<ErrorReply>(foreign).code == "unauthorized");

  Harness chips(quiet_knobs());
  register_nodes(chips, 1);
  Body granted = chips.client("dev", Role::developer, lease_request(8), 10);
  const auto chip_lease = std::get<LeaseGranted>(granted).lease.lease_id;
  Body one_node = chips.client("dev", Role::developer, gang_of(chip_lease, 1), 20);
  REQUIRE(std::holds_alternative<ErrorReply>(one_node));
  CHECK(std::get<ErrorReply>(one_node).message.find("lease of whole nodes") != std::string::npos);
}

TEST_CASE("a rank that fails ends its gang: the others are stopped and their records name the rank") {
  Harness h(quiet_knobs());
  register_nodes(h, 3);
  const auto lease = lease_nodes(h, 3, 10);
  const auto ids = submit_gang(h, gang_of(lease, 3), 20);
  for (std::uint64_t id : ids) {
    const std::string node = h.job(id).summary.node_id;
    h.agent("p" + node.substr(2, 1), node, JobStarted{id, 1}, 30);
  }
  const std::string failing_node = h.job(ids[1]).summary.node_id;
  h.agent("p" + failing_node.substr(2, 1), failing_node, rank_ended(ids[1], JobOutcome::failed), 100);
  CHECK(h.job(ids[1]).summary.state == JobState::failed);

  auto stop = cancels(h);
  REQUIRE(stop.size() == 2);
  std::set<std::uint64_t> stopped;
  for (const auto& c : stop) {
    stopped.insert(c.job_id);
    CHECK(c.reason.find(fmt::format("rank 1 of its gang (job {}) ended failed", ids[1])) != std::string::npos);
  }
  CHECK(stopped == std::set<std::uint64_t>{ids[0], ids[2]});

  // They end as cancelled, saying why; their ends stop nothing more.
  for (std::uint64_t id : {ids[0], ids[2]}) {
    const std::string node = h.job(id).summary.node_id;
    h.agent("p" + node.substr(2, 1), node, rank_ended(id, JobOutcome::cancelled), 200);
    CHECK(h.job(id).summary.state == JobState::cancelled);
    CHECK(h.job(id).summary.detail.find("rank 1 of its gang") != std::string::npos);
    CHECK(h.stored_jobs.at(id).summary.detail == h.job(id).summary.detail);
  }
  CHECK(cancels(h).size() == 2);
  CHECK(h.core.scheduler().check_invariants().has_value());
}

TEST_CASE("a rank that ran and found its outputs wrong ends nothing: the others run on to their own results") {
  // The scenario of a nightly with a broken bf16 change: every rank of a multi-node model computes
  // wrong outputs and exits 1 with its result document (docs/workloads.md). The first to end must
  // not cancel the others, or the gang ends without their results, is retried and never judged.
  Harness h(quiet_knobs());
  register_nodes(h, 3);
  const auto lease = lease_nodes(h, 3, 10);
  const auto ids = submit_gang(h, gang_of(lease, 3), 20);
  const auto peer_of = [&](std::uint64_t id) { return "p" + h.job(id).summary.node_id.substr(2, 1); };
  for (std::uint64_t id : ids) h.agent(peer_of(id), h.job(id).summary.node_id, JobStarted{id, 1}, 30);
  const auto incorrect = [](std::uint64_t id) {
    JobFinished fin = rank_ended(id, JobOutcome::failed);
    fin.exit_code = 1;
    fin.result = R"({"schema": "kiln.workload-result/1", "passed": false})";
    return fin;
  };
  h.agent(peer_of(ids[2]), h.job(ids[2]).summary.node_id, incorrect(ids[2]), 100);
  CHECK(h.job(ids[2]).summary.state == JobState::failed);
  CHECK(cancels(h).empty());
  CHECK(h.job(ids[0]).summary.state == JobState::running);
  CHECK_FALSE(h.job(ids[0]).cancel_requested);
  for (std::uint64_t id : {ids[0], ids[1]}) {
    h.agent(peer_of(id), h.job(id).summary.node_id, incorrect(id), 110);
    CHECK(h.job(id).summary.state == JobState::failed);
    CHECK(h.job(id).result.find("\"passed\": false") != std::string::npos);
  }
  CHECK(cancels(h).empty());

  // Exit 1 without a result document is no report of a run: the gang ends as before.
  const auto again = submit_gang(h, gang_of(lease, 3), 200);
  for (std::uint64_t id : again) h.agent(peer_of(id), h.job(id).summary.node_id, JobStarted{id, 1}, 210);
  JobFinished crashed = rank_ended(again[0], JobOutcome::failed);
  crashed.exit_code = 1;
  h.agent(peer_of(again[0]), h.job(again[0]).summary.node_id, crashed, 300);
  CHECK(cancels(h).size() == 2);
  CHECK(h.job(again[1]).cancel_requested);
  CHECK(h.core.scheduler().check_invariants().has_value());
}

TEST_CASE("a rank whose agent restarted without it is not retried alone: the gang ends") {
  Harness h(quiet_knobs());
  register_nodes(h, 2);
  const auto lease = lease_nodes(h, 2, 10);
  SubmitGang gang = gang_of(lease, 2);
  for (auto& job : gang.jobs) job.max_attempts = 3;
  const auto ids = submit_gang(h, gang, 20);
  const std::string lost_node = h.job(ids[0]).summary.node_id;
  const std::string other_node = h.job(ids[1]).summary.node_id;
  Hello again = hello(lost_node, "a");
  again.rendezvous_address = "10.0.0.9";
  h.agent("p9", lost_node, again, 100);
  CHECK(h.job(ids[0]).summary.state == JobState::lost);
  CHECK(h.job(ids[0]).summary.detail.find("not retried alone") != std::string::npos);
  auto stop = h.agent_bodies<JobCancel>("p" + other_node.substr(2, 1));
  REQUIRE(stop.size() == 1);
  CHECK(stop[0].job_id == ids[1]);
  CHECK(stop[0].reason.find("rank 0 of its gang") != std::string::npos);
  // The node's new address is what a later gang is told.
  CHECK(h.core.nodes().at(lost_node).summary.rendezvous_address == "10.0.0.9");
}

TEST_CASE("a queued gang waits for nodes of its own; cancelling a queued rank ends the gang, a success ends nothing") {
  Harness h(quiet_knobs());
  register_nodes(h, 2);
  const auto lease = lease_nodes(h, 2, 10);
  const auto first = submit_gang(h, gang_of(lease, 2), 20);
  const auto second = submit_gang(h, gang_of(lease, 2), 30);
  CHECK(starts(h).size() == 2);  // the second gang has no free nodes
  CHECK(h.job(second[0]).summary.state == JobState::queued);
  CHECK(h.job(second[1]).summary.state == JobState::queued);

  Body ok = h.client("dev", Role::developer, CancelJob{second[0]}, 40);
  CHECK(std::holds_alternative<Ok>(ok));
  CHECK(h.job(second[0]).summary.state == JobState::cancelled);
  CHECK(h.job(second[1]).summary.state == JobState::cancelled);
  CHECK(h.job(second[1]).summary.detail.find(fmt::format("rank 0 of its gang (job {}) ended cancelled", second[0])) !=
        std::string::npos);

  // A rank that succeeds leaves the others running.
  const std::string node0 = h.job(first[0]).summary.node_id;
  h.agent("p" + node0.substr(2, 1), node0, rank_ended(first[0], JobOutcome::succeeded), 50);
  CHECK(h.job(first[0]).summary.state == JobState::succeeded);
  CHECK(h.job(first[1]).summary.state == JobState::assigned);
  CHECK(cancels(h).empty());
}

TEST_CASE("a rank the coordinator times out ends its gang") {
  Harness h(quiet_knobs());
  register_nodes(h, 2);
  const auto lease = lease_nodes(h, 2, 10);
  SubmitGang gang = gang_of(lease, 2);
  gang.jobs[0].timeout_ms = 1000;
  const auto ids = submit_gang(h, gang, 20);
  h.tick(20 + 1000 + quiet_knobs().job_timeout_slack_ms + 1);
  CHECK(h.job(ids[0]).summary.state == JobState::timed_out);
  CHECK(h.job(ids[1]).cancel_requested);
  CHECK(h.job(ids[1]).cancel_reason.find("rank 0 of its gang") != std::string::npos);
}

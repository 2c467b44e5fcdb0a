// The phases of a qualification run on their own: the job book, the gate, triage and the
// tickets (run_test.cpp drives them together through QualificationRun).
#include <doctest/doctest.h>

#include <string>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "qualification/run_context.h"
#include "qualification/run_gate.h"
#include "qualification/run_measure.h"
#include "qualification/run_tickets.h"
#include "qualification/run_triage.h"

namespace q = kiln::qualification;

namespace {

q::JobRequest request(q::JobPurpose purpose, std::uint64_t seed = 5) {
  q::JobRequest job;
  job.purpose = purpose;
  job.model = "m";
  job.seed = seed;
  return job;
}

std::vector<double> samples(double level) {
  std::vector<double> out;
  for (int i = 0; i < 10; ++i) out.push_back(level * (1.0 + 0.0005 * (i % 5)));
  return out;
}

q::QualificationModel model_of(int chips) {
  q::QualificationModel model;
  model.name = "llm";
  model.owner_team = "llm-models";
  model.chips = chips;
  model.seed = 9;
  return model;
}

}  // namespace

TEST_CASE("the job book starts follow-ups before first measures, at most max_in_flight at once") {
  q::JobBook book;
  const auto measure = book.enqueue(request(q::JobPurpose::measure), {0, std::nullopt, 0}, false);
  const auto rerun = book.enqueue(request(q::JobPurpose::triage_rerun), {1, std::nullopt, 0}, true);
  const auto retried_measure = book.enqueue(request(q::JobPurpose::measure), {2, std::nullopt, 0}, false, 2);

  q::RunJob* first = book.start_next(2);
  REQUIRE(first != nullptr);
  CHECK(first->request.tag == rerun);
  CHECK(first->request.seed == q::job_seed(5, rerun));  // a follow-up gets its own seed
  CHECK(book.start_next(2)->request.tag == retried_measure);  // a retry is a follow-up too
  CHECK(book.start_next(2) == nullptr);                       // two in flight
  REQUIRE(book.answer(rerun, "run").has_value());
  q::RunJob* last = book.start_next(2);
  REQUIRE(last != nullptr);
  CHECK(last->request.tag == measure);
  CHECK(last->request.seed == 5);  // a first measure keeps the model's seed
}

TEST_CASE("the job book cancels a running job on the shell, a queued one silently, and refuses bad answers") {
  q::JobBook book;
  const auto running = book.enqueue(request(q::JobPurpose::measure), {0, std::nullopt, 0}, false);
  const auto queued = book.enqueue(request(q::JobPurpose::measure), {1, std::nullopt, 0}, false);
  REQUIRE(book.start_next(1) != nullptr);
  book.cancel_all_unfinished();
  auto action = book.pop_action();
  REQUIRE(action.has_value());
  REQUIRE(std::holds_alternative<q::run_action::CancelJob>(*action));
  CHECK(std::get<q::run_action::CancelJob>(*action).tag == running);
  CHECK_FALSE(book.has_actions());  // the queued one never reached the shell
  CHECK(book.start_next(1) == nullptr);

  auto late = book.answer(running, "run");
  REQUIRE(late.has_value());
  CHECK(*late == nullptr);  // a late answer to a cancelled job is ignored
  CHECK(book.answer(queued, "run").value() == nullptr);  // cancelled before it started
  CHECK(book.answer(99, "run").error().code == kiln::Errc::conflict);

  q::JobBook fresh;
  const auto never_started = fresh.enqueue(request(q::JobPurpose::measure), {0, std::nullopt, 0}, false);
  CHECK(fresh.answer(never_started, "run").error().message.find("never started") != std::string::npos);
}

TEST_CASE("the fleet view counts healthy and free nodes per revision, less the quarantined") {
  q::FleetView fleet;
  CHECK_FALSE(fleet.known());
  fleet.set({{"n1", "a", true, true}, {"n2", "a", true, false}, {"n3", "a", false, true}, {"n4", "b", true, true}});
  CHECK(fleet.healthy_nodes("a") == 2);
  CHECK(fleet.free_nodes("a") == 1);
  CHECK(fleet.quarantine("n1"));
  CHECK_FALSE(fleet.quarantine("n1"));  // the shell is told once
  CHECK(fleet.healthy_nodes("a") == 1);
  CHECK(fleet.free_nodes("a") == 0);
  CHECK(fleet.healthy().size() == 2);
}

TEST_CASE("measure jobs: a model larger than a node takes whole nodes; without enough nodes it is skipped") {
  q::RunSettings settings;
  settings.repeats_per_side = 10;
  settings.repeats_multiplier = 2;
  const q::JobRequest small = q::measure_job(model_of(4), "a", "cand", "base", settings, 8);
  CHECK(small.nodes == 1);
  CHECK(small.chips == 4);
  CHECK(small.repeats_per_side == 20);
  CHECK(small.seed == 9);
  const q::JobRequest large = q::measure_job(model_of(32), "a", "cand", "", settings, 8);
  CHECK(large.nodes == 4);
  CHECK(large.chips == 8);
  CHECK(large.repeats_per_side == 0);  // no baseline: correctness only

  CHECK_FALSE(q::skip_reason(model_of(32), "a", 4, 8).has_value());
  CHECK(q::skip_reason(model_of(32), "a", 3, 8).value().find("4 whole nodes of revision a") != std::string::npos);
  CHECK(q::skip_reason(model_of(1), "b", 0, 8).value() == "no healthy node of revision b in the fleet");
}

TEST_CASE("the gate judges nothing until every pair in it has its first samples or has left") {
  q::RunGate gate({true, false, true}, kiln::stats::PerfGateOptions{}, 1);
  CHECK(gate.judges(0));
  CHECK_FALSE(gate.judges(1));
  const q::GateStep waiting = gate.add_first_samples(0, samples(100), samples(100));
  CHECK(waiting.jobs.empty());
  CHECK(waiting.concluded.empty());
  const q::GateStep step = gate.leave(2);  // failed correctness: p = 1 in the family, and the gate starts
  REQUIRE(step.concluded.size() == 1);
  CHECK(step.concluded[0].pair == 0);
  CHECK(step.concluded[0].outcome.verdict == kiln::stats::Verdict::no_change);
  CHECK(gate.left(2));
  CHECK(gate.add_more_samples(2, samples(100), samples(90)).concluded.empty());  // a pair that left is not judged
}

TEST_CASE("the gate confirms a regression with a rerun before it concludes") {
  q::RunGate gate({true}, kiln::stats::PerfGateOptions{}, 1);
  const q::GateStep first = gate.add_first_samples(0, samples(100), samples(90));
  CHECK(first.concluded.empty());
  REQUIRE(first.jobs.size() == 1);
  CHECK(first.jobs[0].pair == 0);
  CHECK(first.jobs[0].purpose == q::JobPurpose::confirmation);
  const q::GateStep confirmed = gate.add_more_samples(0, samples(100), samples(90));
  REQUIRE(confirmed.concluded.size() == 1);
  CHECK(confirmed.concluded[0].outcome.regression_confirmed);
}

TEST_CASE("triage reruns on another node and the failing one, and decides once every rerun is in") {
  q::RunTriage triage({"lab", 2}, 1);
  const std::vector<q::NodeCandidate> nodes = {{"n1", "a", true, true}, {"n2", "a", true, true}};
  const q::TriageStart start = triage.begin(0, {"llm", "llm-models", "n1", "a", "cand"}, "", 1, nodes);
  CHECK_FALSE(start.unconfirmed.has_value());
  REQUIRE(start.reruns.size() == 3);
  CHECK(start.reruns[0].node_id == "n2");
  CHECK(start.reruns[1].node_id == "n2");
  CHECK(start.reruns[2].purpose == q::JobPurpose::origin_rerun);
  CHECK(start.reruns[2].node_id == "n1");
  CHECK(triage.failure_detail(0) == "outputs incorrect against the golden");
  CHECK_FALSE(triage.on_rerun(0, q::JobPurpose::triage_rerun, true).has_value());
  CHECK_FALSE(triage.on_rerun(0, q::JobPurpose::triage_rerun, true).has_value());
  auto decision = triage.on_rerun(0, q::JobPurpose::origin_rerun, std::nullopt);  // the failing node is dead
  REQUIRE(decision.has_value());
  REQUIRE(decision->has_value());
  CHECK((*decision)->decision == q::TriageDecision::hardware_suspect);
  CHECK((*decision)->quarantine_node == "n1");
}

TEST_CASE("triage cannot confirm a failure with no other node, nor one on several nodes") {
  q::RunTriage triage({}, 2);
  const std::vector<q::NodeCandidate> alone = {{"n1", "a", true, true}};
  const q::TriageStart lonely = triage.begin(0, {"llm", "llm-models", "n1", "a", "cand"}, "bad logits", 1, alone);
  CHECK(lonely.reruns.empty());
  CHECK(lonely.unconfirmed.value().find("bad logits on node n1; unconfirmed: no other healthy node of revision a") ==
        0);
  const q::TriageStart gang = triage.begin(1, {"llm", "llm-models", "", "a", "cand"}, "bad logits", 4, alone);
  CHECK(gang.unconfirmed.value().find("on 4 nodes; a multi-node model has no single node to suspect") !=
        std::string::npos);
}

TEST_CASE("a culprit's ticket goes to its owner with the shift and every probe; the run files it once") {
  q::CulpritFound found;
  found.run_id = "nightly-1";
  found.model = "mlp-small";
  found.revision = "a";
  found.culprit = {"c07", q::Layer::compiler, "compiler-team", {"gemm-bf16"}, 0, "fuse", std::nullopt};
  found.bisection.culprit_change_id = "c07";
  kiln::stats::ModelGateOutcome outcome;
  outcome.initial = kiln::stats::Comparison{};
  outcome.initial->shift.relative = -0.031;
  found.performance = outcome;
  const q::Ticket ticket = q::culprit_ticket(found, 1000);
  CHECK(ticket.team == "compiler-team");
  CHECK(ticket.culprit_change == "c07");
  CHECK(ticket.title == "mlp-small: throughput -3.10% on revision a since change c07 (compiler, compiler-team)");
  const auto evidence = nlohmann::json::parse(ticket.evidence_json);
  CHECK(evidence.at("run_id") == "nightly-1");
  CHECK(evidence.contains("bisection"));
  CHECK(evidence.contains("performance"));

  q::JobBook book;
  q::RunReport report;
  q::RunTickets tickets(book, report);
  CHECK(tickets.file(ticket) == ticket.id);
  q::CulpritFound again = found;
  again.model = "mlp-medium";  // another model, the same culprit: the same ticket
  CHECK(tickets.file(q::culprit_ticket(again, 2000)) == ticket.id);
  CHECK(report.tickets.size() == 1);
  auto action = book.pop_action();
  REQUIRE(action.has_value());
  CHECK(std::holds_alternative<q::run_action::FileTicket>(*action));
  CHECK_FALSE(book.has_actions());
}

TEST_CASE("a hardware suspect's ticket goes to the lab, culprit the node") {
  q::TriageAction action;
  action.decision = q::TriageDecision::hardware_suspect;
  action.quarantine_node = "n1";
  const q::Ticket ticket =
      q::hardware_suspect_ticket({"smoke-1", "llm", "a", "cand", "n2", "sdc in logits", action, "lab"}, 5);
  CHECK(ticket.kind == q::TicketKind::hardware_suspect);
  CHECK(ticket.team == "lab");
  CHECK(ticket.culprit_change == "node:n1");
  CHECK(ticket.title == "node n1 (revision a) suspect: llm fails there and passes on n2");
}

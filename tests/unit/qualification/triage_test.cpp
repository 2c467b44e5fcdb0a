#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "qualification/flake_budget.h"
#include "qualification/triage.h"

namespace q = kiln::qualification;
using q::RunOutcome;

namespace {

q::FailedRun failure() { return {"mlp-bf16-small-03", "recsys-models", "n07", "a", "bundle-1"}; }

q::RerunReport rerun(std::vector<RunOutcome> outcomes, std::vector<RunOutcome> origin = {}) {
  return {"n03", "a", "bundle-1", true, std::move(outcomes), std::move(origin)};
}

}  // namespace

TEST_CASE("passes on another node: the first node is suspect, quarantined, and the lab gets a ticket") {
  auto action = q::triage(failure(), rerun({RunOutcome::passed, RunOutcome::passed, RunOutcome::passed},
                                           {RunOutcome::failed}));
  REQUIRE(action.has_value());
  CHECK(action->decision == q::TriageDecision::hardware_suspect);
  CHECK(action->quarantine_node == "n07");
  CHECK(action->ticket_team == "lab");
  CHECK_FALSE(action->start_bisection);
  CHECK(action->reason.find("n07") != std::string::npos);
}

TEST_CASE("fails on another node too: a software regression to bisect") {
  auto action = q::triage(failure(), rerun({RunOutcome::failed, RunOutcome::failed}));
  REQUIRE(action.has_value());
  CHECK(action->decision == q::TriageDecision::software_regression);
  CHECK(action->start_bisection);
  CHECK_FALSE(action->quarantine_node.has_value());
}

TEST_CASE("fails now and then: flaky, counted against the flake budget, no quarantine") {
  auto mixed = q::triage(failure(), rerun({RunOutcome::passed, RunOutcome::failed, RunOutcome::passed}));
  REQUIRE(mixed.has_value());
  CHECK(mixed->decision == q::TriageDecision::flaky);
  CHECK(mixed->count_flake);
  CHECK_FALSE(mixed->quarantine_node.has_value());
  CHECK(mixed->reason.find("recsys-models") != std::string::npos);
  // Passing again on the first node too: the failure was a one-off, not the node.
  auto one_off = q::triage(failure(), rerun({RunOutcome::passed}, {RunOutcome::passed, RunOutcome::passed}));
  CHECK(one_off->decision == q::TriageDecision::flaky);
}

TEST_CASE("a rerun that does not qualify is refused with the reason") {
  auto same_node = rerun({RunOutcome::passed});
  same_node.node_id = "n07";
  CHECK(q::triage(failure(), same_node).error().message.find("another node") != std::string::npos);
  auto other_revision = rerun({RunOutcome::passed});
  other_revision.revision = "b";
  CHECK(q::triage(failure(), other_revision).error().message.find("same revision") != std::string::npos);
  auto other_bundle = rerun({RunOutcome::passed});
  other_bundle.bundle_id = "bundle-2";
  CHECK(q::triage(failure(), other_bundle).error().message.find("same bundle") != std::string::npos);
  auto sick = rerun({RunOutcome::passed});
  sick.node_healthy = false;
  CHECK_FALSE(q::triage(failure(), sick).has_value());
  q::TriageOptions options;
  options.min_reruns = 3;
  CHECK_FALSE(q::triage(failure(), rerun({RunOutcome::passed}), options).has_value());
  CHECK_FALSE(q::triage(failure(), rerun({})).has_value());
}

TEST_CASE("the rerun node is another healthy node of the same revision, free ones first") {
  const std::vector<q::NodeCandidate> nodes = {
      {"n07", "a", true, true},   // the failing node itself
      {"n01", "b", true, true},   // other revision
      {"n02", "a", false, true},  // quarantined
      {"n05", "a", true, false},
      {"n04", "a", true, false},
      {"n09", "a", true, true},
  };
  CHECK(q::choose_rerun_node(failure(), nodes) == "n09");
  std::vector<q::NodeCandidate> busy(nodes.begin(), nodes.end() - 1);
  CHECK(q::choose_rerun_node(failure(), busy) == "n04");
  std::vector<q::NodeCandidate> none(nodes.begin(), nodes.begin() + 3);
  CHECK_FALSE(q::choose_rerun_node(failure(), none).has_value());
}

TEST_CASE("the flake budget: under 1% of runs over the window, with the owner") {
  q::FlakeLedger ledger;
  const kiln::TimeMs hour = kiln::kHourMs;
  for (int i = 0; i < 200; ++i) ledger.record_run("t", "team-t", i * hour, i == 10 || i == 150);
  auto status = ledger.status("t", 199 * hour);
  CHECK(status.runs == 200);
  CHECK(status.flakes == 2);
  CHECK(status.flake_rate == doctest::Approx(0.01));
  CHECK_FALSE(status.over_budget);  // 2 flakes in 200 runs is the budget, not over it
  ledger.record_run("t", "team-t", 200 * hour, true);
  status = ledger.status("t", 200 * hour);
  CHECK(status.over_budget);
  CHECK(status.owner_team == "team-t");
  CHECK(ledger.over_budget(200 * hour).size() == 1);

  // A young test may flake once, not twice, before 100 runs.
  ledger.record_run("young", "team-y", 0, true);
  CHECK_FALSE(ledger.status("young", 0).over_budget);
  ledger.record_run("young", "team-y", hour, true);
  CHECK(ledger.status("young", hour).over_budget);

  // Old flakes leave the window (14 days by default).
  CHECK_FALSE(ledger.status("young", 20 * 24 * hour).over_budget);
  CHECK(ledger.status("unknown", 0).runs == 0);
}

TEST_CASE("flake budgets come from the recorded run reports; one ticket per test over budget") {
  auto report = [](std::int64_t at, bool finished, std::vector<std::pair<std::string, std::string>> models) {
    nlohmann::json json = {{"finished", finished}, {"finished_at_ms", at}, {"models", nlohmann::json::array()}};
    for (const auto& [name, verdict] : models) {
      json["models"].push_back({{"model", name}, {"owner_team", "llm-models"}, {"verdict", verdict}});
    }
    return json;
  };
  std::vector<nlohmann::json> reports;
  // 150 runs of each test over a day; "wobbly" is flaky twice (1.3%, over 1%), "steady" once (0.7%).
  for (int i = 0; i < 150; ++i) {
    const std::string wobbly = (i == 10 || i == 90) ? "flaky" : "passed";
    const std::string steady = i == 50 ? "flaky" : "passed";
    reports.push_back(report(1000 + i * 60000, true, {{"wobbly", wobbly}, {"steady", steady}, {"absent", "skipped"}}));
  }
  // An unfinished run does not count, nor do skipped and error verdicts.
  reports.push_back(report(20000000, false, {{"steady", "flaky"}, {"steady", "flaky"}}));
  const q::FlakeLedger ledger = q::flake_ledger_from_reports(reports);
  const kiln::TimeMs now = 1000 + 150 * 60000;
  CHECK(ledger.status("wobbly", now).runs == 150);
  CHECK(ledger.status("absent", now).runs == 0);
  const auto tickets = q::flake_budget_tickets(ledger, now);
  REQUIRE(tickets.size() == 1);
  CHECK(tickets[0].kind == q::TicketKind::flake_budget);
  CHECK(tickets[0].team == "llm-models");
  CHECK(tickets[0].culprit_change == "test:wobbly");
  CHECK(tickets[0].title.find("2 flakes in 150 runs") != std::string::npos);
}

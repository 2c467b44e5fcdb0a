// The qualifier's /metrics from run requests, reports and tickets as the coordinator holds them.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "qualification/ci_metrics.h"
#include "qualification/run_report.h"
#include "qualification/run_verdict.h"
#include "tests/support/text.h"

using namespace kiln;
using namespace kiln::qualification;
using kiln::testing::contains;

namespace {

RunRequest request(const std::string& run_id, Tier tier, TimeMs deadline_ms = 0) {
  RunRequest r;
  r.run_id = run_id;
  r.tier = tier;
  r.bundle_id = std::string(64, 'b');
  r.deadline_ms = deadline_ms;
  return r;
}

ModelReport model(const std::string& name, ModelVerdict verdict, const std::string& owner = "team-llm") {
  ModelReport m;
  m.model = name;
  m.revision = "a";
  m.owner_team = owner;
  m.verdict = verdict;
  return m;
}

nlohmann::json report(const std::string& run_id, Tier tier, bool finished, bool passed, TimeMs finished_at_ms,
                      std::vector<ModelReport> models = {}) {
  RunReport r;
  r.run_id = run_id;
  r.tier = tier;
  r.candidate_bundle_id = std::string(64, 'b');
  r.finished = finished;
  r.passed = passed;
  r.started_at_ms = 1000;
  r.finished_at_ms = finished ? finished_at_ms : 0;
  r.models = std::move(models);
  return to_json(r);
}

}  // namespace

TEST_CASE("a presubmit's time to signal runs from its request to its verdict; runs count by kind and verdict") {
  CiMetrics m;
  m.add_request(request("smoke-1", Tier::smoke), 1000);
  m.add_request(request("smoke-2", Tier::smoke), 2000);
  CHECK(m.unfinished_runs() == std::vector<std::string>{"smoke-1", "smoke-2"});
  m.add_report(report("smoke-1", Tier::smoke, true, true, 1000 + 300000, {model("mlp", ModelVerdict::passed)}));
  m.add_report(report("smoke-2", Tier::smoke, false, false, 0));
  CHECK(m.unfinished_runs() == std::vector<std::string>{"smoke-2"});
  m.add_report(report("smoke-2", Tier::smoke, true, false, 2000 + 3600000));
  // Seen again, a finished report is not counted twice.
  m.add_report(report("smoke-2", Tier::smoke, true, false, 2000 + 3600000));
  CHECK(m.unfinished_runs().empty());
  const std::string text = m.render(5000000);
  for (const char* line : {"# TYPE kiln_presubmit_time_to_signal_seconds histogram\n",
                           "kiln_presubmit_time_to_signal_seconds_bucket{le=\"300\"} 1\n",
                           "kiln_presubmit_time_to_signal_seconds_bucket{le=\"2700\"} 1\n",
                           "kiln_presubmit_time_to_signal_seconds_bucket{le=\"3600\"} 2\n",
                           "kiln_presubmit_time_to_signal_seconds_count 2\n",
                           "kiln_runs_total{kind=\"smoke\",verdict=\"passed\"} 1\n",
                           "kiln_runs_total{kind=\"smoke\",verdict=\"failed\"} 1\n",
                           "kiln_runs_total{kind=\"release\",verdict=\"passed\"} 0\n"}) {
    CHECK_MESSAGE(contains(text, line), line);
  }
}

TEST_CASE("a run that could not be carried out counts as an error, not as a failure") {
  CiMetrics m;
  for (const char* run_id : {"smoke-refused", "smoke-unmeasured", "smoke-regressed"}) {
    m.add_request(request(run_id, Tier::smoke), 1000);
  }
  nlohmann::json refused = report("smoke-refused", Tier::smoke, true, false, 2000);
  end_with_error(refused, "cannot run: change c99 is not recorded", "", 2000);
  m.add_report(refused);
  m.add_report(report("smoke-unmeasured", Tier::smoke, true, false, 2000, {model("mlp", ModelVerdict::error)}));
  m.add_report(report("smoke-regressed", Tier::smoke, true, false, 2000,
                      {model("mlp", ModelVerdict::error), model("bert", ModelVerdict::correctness_regression)}));
  const std::string text = m.render(3000);
  CHECK(contains(text, "kiln_runs_total{kind=\"smoke\",verdict=\"error\"} 2\n"));
  CHECK(contains(text, "kiln_runs_total{kind=\"smoke\",verdict=\"failed\"} 1\n"));
  CHECK(contains(text, "kiln_runs_total{kind=\"smoke\",verdict=\"passed\"} 0\n"));
}

TEST_CASE("the latest scheduled nightly: its deadline, its finish once it has one, and whether it is late") {
  CiMetrics m;
  std::string text = m.render(0);
  CHECK(contains(text, "kiln_nightly_late 0\n"));
  CHECK_FALSE(contains(text, "\nkiln_nightly_deadline_timestamp_seconds "));
  m.add_request(request("nightly-2026-12-02", Tier::nightly, 7000000), 0);
  m.add_report(report("nightly-2026-12-02", Tier::nightly, true, true, 8000000));
  m.add_request(request("manual-nightly", Tier::nightly), 9000000);  // no deadline: not the calendar's
  m.add_request(request("nightly-2026-12-03", Tier::nightly, 20000000), 10000000);
  text = m.render(15000000);
  CHECK(contains(text, "kiln_nightly_deadline_timestamp_seconds 20000\n"));
  CHECK_FALSE(contains(text, "\nkiln_nightly_finish_timestamp_seconds "));
  CHECK(contains(text, "kiln_nightly_late 0\n"));
  CHECK(contains(m.render(21000000), "kiln_nightly_late 1\n"));  // still running past its deadline
  m.add_report(report("nightly-2026-12-03", Tier::nightly, true, false, 19000000));
  text = m.render(21000000);
  CHECK(contains(text, "kiln_nightly_finish_timestamp_seconds 19000\n"));
  CHECK(contains(text, "kiln_nightly_late 0\n"));
  CHECK(contains(text, "kiln_runs_total{kind=\"nightly\",verdict=\"failed\"} 1\n"));
}

TEST_CASE("flake ratio per test and owner; bisections under way with their rounds; tickets per team") {
  CiMetrics m;
  m.add_request(request("n1", Tier::nightly), 0);
  m.add_report(report("n1", Tier::nightly, true, true, 1000,
                      {model("mlp", ModelVerdict::flaky), model("bert", ModelVerdict::passed, "team-nlp"),
                       model("gone", ModelVerdict::skipped)}));
  m.add_request(request("n2", Tier::nightly), 0);
  m.add_report(report("n2", Tier::nightly, true, true, 2000, {model("mlp", ModelVerdict::passed)}));

  RunReport running;
  running.run_id = "n3";
  running.tier = Tier::nightly;
  running.candidate_bundle_id = std::string(64, 'c');
  running.bisections_running = {{"bert", "a", 2, 6}, {"bert", "b", 3, 9}, {"resnet", "a", 1, 3}};
  m.add_request(request("n3", Tier::nightly), 0);
  m.add_report(to_json(running));

  TicketRecord first;
  first.ticket.team = "team-llm";
  TicketRecord second = first;
  TicketRecord third;
  third.ticket.team = "lab";
  m.set_tickets({first, second, third});

  const std::string text = m.render(3000);
  for (const char* line : {"kiln_test_flake_ratio{test=\"bert\",owner=\"team-nlp\"} 0\n",
                           "kiln_test_flake_ratio{test=\"mlp\",owner=\"team-llm\"} 0.5\n",
                           "kiln_bisections_running 3\n",
                           "kiln_bisection_rounds{run=\"n3\",model=\"bert\"} 3\n",
                           "kiln_bisection_rounds{run=\"n3\",model=\"resnet\"} 1\n",
                           "kiln_tickets_filed_total{team=\"lab\"} 1\nkiln_tickets_filed_total{team=\"team-llm\"} 2\n"}) {
    CHECK_MESSAGE(contains(text, line), line);
  }
  CHECK_FALSE(contains(text, "test=\"gone\""));

  // Once the run finishes its bisections are no longer under way.
  m.add_report(report("n3", Tier::nightly, true, false, 4000));
  CHECK(contains(m.render(5000), "kiln_bisections_running 0\n"));
}

TEST_CASE("a report's bisections under way survive its JSON") {
  RunReport r;
  r.run_id = "n3";
  r.candidate_bundle_id = std::string(64, 'c');
  r.bisections_running = {{"bert", "a", 2, 6}};
  auto outline = report_outline_from_json(to_json(r));
  REQUIRE(outline.has_value());
  REQUIRE(outline->bisections_running.size() == 1);
  CHECK(outline->bisections_running[0].model == "bert");
  CHECK(outline->bisections_running[0].rounds == 2);
  CHECK(outline->bisections_running[0].probes_started == 6);
}

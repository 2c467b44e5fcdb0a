// A run's one verdict, and a run ended because it could not be carried out or was cancelled.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "qualification/run_report.h"
#include "qualification/run_verdict.h"

using namespace kiln;
namespace q = kiln::qualification;

namespace {

q::RunReport running_nightly() {
  q::RunReport report;
  report.run_id = "nightly-9";
  report.tier = q::Tier::nightly;
  report.candidate_bundle_id = "3dbff4cc0123456789";
  report.started_at_ms = 1000;
  for (const auto& [name, verdict] : {std::pair{"mlp", q::ModelVerdict::performance_regression},
                                      std::pair{"bert", q::ModelVerdict::pending}}) {
    q::ModelReport m;
    m.model = name;
    m.revision = "a";
    m.owner_team = "team";
    m.verdict = verdict;
    m.detail = "measured";
    report.models.push_back(m);
  }
  report.jobs_in_flight.push_back({7, 0, "bert", "a", q::JobPurpose::measure});
  return report;
}

}  // namespace

TEST_CASE("a cancelled run ends with the error verdict, its models without a verdict errors, its summary saying why") {
  nlohmann::json report = q::to_json(running_nightly());
  CHECK(q::run_verdict(report).word == "running");
  q::end_with_error(report, "cancelled by alice", "alice", 5000);
  const q::RunVerdict verdict = q::run_verdict(report);
  CHECK(verdict.word == "error");
  CHECK(verdict.reason == "cancelled by alice");
  CHECK(report.at("finished") == true);
  CHECK(report.at("passed") == false);
  CHECK(report.at("finished_at_ms") == 5000);
  CHECK(report.at("cancelled_by") == "alice");
  CHECK(report.at("jobs_in_flight").empty());
  // What was decided stays; what was not is an error with the reason.
  CHECK(report.at("models").at(0).at("verdict") == "performance_regression");
  CHECK(report.at("models").at(1).at("verdict") == "error");
  CHECK(report.at("models").at(1).at("detail") == "cancelled by alice");
  CHECK(report.at("verdict_counts") == nlohmann::json{{"error", 1}, {"performance_regression", 1}});
  const std::string summary = report.at("summary");
  CHECK(summary.starts_with("kiln nightly nightly-9: ERROR (candidate 3dbff4cc0123)\n  cancelled by alice\n"
                            "  2 model runs: "));
  CHECK(summary.find("FAIL mlp on revision a") != std::string::npos);
  // The report reads back whole.
  CHECK(q::report_outline_from_json(report).has_value());
}

TEST_CASE("a run refused before any job is an error, its summary naming what is wrong") {
  q::RunReport refused;
  refused.run_id = "smoke-1";
  refused.tier = q::Tier::smoke;
  refused.candidate_bundle_id = "555ff449";
  refused.finished = true;
  nlohmann::json report = q::to_json(refused);
  CHECK(q::run_verdict(report).word == "failed");
  q::end_with_error(report, "cannot run: change c99 is not recorded", "", 10);
  CHECK(q::run_verdict(report).word == "error");
  CHECK(q::run_verdict(report).reason == "cannot run: change c99 is not recorded");
  CHECK(report.at("could_not_run") == true);
  CHECK_FALSE(report.contains("cancelled_by"));
  CHECK(report.at("summary") ==
        "kiln smoke smoke-1: ERROR (candidate 555ff449)\n  cannot run: change c99 is not recorded\n");
}

TEST_CASE("the summary's first word is the verdict: a run whose failing models all errored is ERROR") {
  q::RunReport report = running_nightly();
  report.finished = true;
  report.models[1].verdict = q::ModelVerdict::passed;
  CHECK(q::summary_text(report).starts_with("kiln nightly nightly-9: FAILED"));
  report.models[0].verdict = q::ModelVerdict::error;
  CHECK(q::summary_text(report).starts_with("kiln nightly nightly-9: ERROR"));
  report.models[0].verdict = q::ModelVerdict::passed;
  report.passed = true;
  CHECK(q::summary_text(report).starts_with("kiln nightly nightly-9: passed"));
}

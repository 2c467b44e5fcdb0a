#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "common/stability/report.h"

namespace kiln::stability {

namespace {

nlohmann::json workload_result(const StabilityMonitor& monitor, std::uint32_t chips, double hours, std::string node,
                               std::uint32_t rank) {
  return {{"schema", "kiln.workload-result/1"},
          {"job", {{"node_id", std::move(node)}, {"rank", rank}}},
          {"stability", rank_section(monitor, chips, hours)}};
}

}  // namespace

TEST_CASE("a clean run reports zero failures with an upper bound from its exposure") {
  StabilityMonitor a{StabilityCriteria{}}, b{StabilityCriteria{}};
  std::vector<RankRun> ranks;
  for (auto [monitor, node, rank] : {std::tuple{&a, "n1", 0u}, std::tuple{&b, "n2", 1u}}) {
    auto run = rank_run_from_result(workload_result(*monitor, 8, 125.0, node, rank));
    REQUIRE(run);
    ranks.push_back(*run);
  }
  const StabilityReport report = make_report("train-tiny", 16, 125, StabilityCriteria{}, ranks);
  CHECK(report.chip_hours == doctest::Approx(2000.0));
  CHECK(report.complete);
  CHECK(report.passed);
  CHECK(report.total.failures == 0);
  CHECK(report.total.upper == doctest::Approx(3.6889 / 2).epsilon(1e-3));  // per 1000 chip-hours
  CHECK(report.kinds.size() == 6);
  const nlohmann::json json = to_json(report);
  CHECK(json["total"]["failures"] == 0);
  CHECK(json["kinds"].contains("hang"));
  CHECK(json["passed"] == true);
  CHECK(to_text(report).find("PASSED") != std::string::npos);
}

TEST_CASE("failures are counted per kind and carry their rank's node") {
  StabilityMonitor hung{StabilityCriteria{}};
  hung.check_progress(31 * 60, 5u);
  StabilityMonitor clean{StabilityCriteria{}};
  std::vector<RankRun> ranks;
  ranks.push_back(*rank_run_from_result(workload_result(hung, 8, 0.5, "n1", 0)));
  ranks.push_back(*rank_run_from_result(workload_result(clean, 8, 10, "n2", 1)));
  const StabilityReport report = make_report("train-tiny", 16, 10, StabilityCriteria{}, ranks);
  CHECK_FALSE(report.passed);
  CHECK(report.chip_hours == doctest::Approx(84.0));
  CHECK(report.total.failures == 1);
  for (const auto& k : report.kinds) CHECK(k.rate.failures == (k.kind == FailureKind::hang ? 1u : 0u));
  const nlohmann::json json = to_json(report);
  REQUIRE(json["failures"].size() == 1);
  CHECK(json["failures"][0]["kind"] == "hang");
  CHECK(json["failures"][0]["node_id"] == "n1");
  CHECK(json["failures"][0]["chip"] == 5);
}

TEST_CASE("a rank without a stability object makes the report incomplete") {
  CHECK_FALSE(rank_run_from_result(nlohmann::json{{"schema", "kiln.workload-result/1"}}));
  RankRun lost;
  lost.problem = "job 7 ended timed_out";
  const StabilityReport report = make_report("train-tiny", 8, 1, StabilityCriteria{}, {lost});
  CHECK_FALSE(report.complete);
  CHECK_FALSE(report.passed);
  CHECK(to_text(report).find("job 7 ended timed_out") != std::string::npos);
}

}  // namespace kiln::stability

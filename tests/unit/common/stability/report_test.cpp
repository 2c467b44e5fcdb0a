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
  CHECK(report.total.count == 0);
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
  CHECK(report.total.count == 1);
  CHECK(report.occurrences == 1);
  for (const auto& k : report.kinds) CHECK(k.rate.count == (k.kind == FailureKind::hang ? 1u : 0u));
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

TEST_CASE("a periodic fault firing 46 times on one chip is one episode: the rate and interval count episodes") {
  // A loss spike every 200 steps on n1's rank for 46 spikes, an ECC storm on chip 3 of n2's rank
  // seen twice, and one on chip 5 of the same rank: three episodes, 49 failures.
  RankRun spiky;
  spiky.reported = true;
  spiky.rank = 0;
  spiky.job_id = 10;
  spiky.node_id = "n1";
  spiky.chips = 8;
  spiky.run_hours = 24;
  for (std::uint64_t k = 1; k <= 46; ++k) {
    spiky.failures.push_back({FailureKind::loss_spike, 200 * k, 1000.0 * k, std::nullopt, 9, 4, "spike"});
  }
  RankRun storm = spiky;
  storm.rank = 1;
  storm.job_id = 11;
  storm.node_id = "n2";
  storm.failures = {{FailureKind::ecc, 50, 250, 3u, 2, 0, "ecc"},
                    {FailureKind::ecc, 90, 450, 3u, 4, 0, "ecc"},
                    {FailureKind::ecc, 95, 475, 5u, 1, 0, "ecc"}};
  const StabilityReport report = make_report("train-tiny", 16, 24, StabilityCriteria{}, {spiky, storm});
  REQUIRE(report.episodes.size() == 3);
  CHECK(report.episodes[0].kind == FailureKind::loss_spike);
  CHECK(report.episodes[0].occurrences == 46);
  CHECK(report.episodes[0].first_step == 200);
  CHECK(report.episodes[0].last_step == 9200);
  CHECK(report.episodes[1].chip == 3u);
  CHECK(report.episodes[1].occurrences == 2);
  CHECK(report.episodes[2].chip == 5u);
  CHECK(report.occurrences == 49);
  CHECK(report.total.count == 3);
  // The interval is the one of 3 events, not of 49: Garwood's 95% upper bound for 3 is 8.767.
  CHECK(report.total.upper == doctest::Approx(8.7673 * 1000 / 384).epsilon(1e-3));
  CHECK(report.total.upper == doctest::Approx(garwood_interval(3, 0.95).upper * 1000 / 384));
  for (const auto& k : report.kinds) {
    if (k.kind == FailureKind::loss_spike) {
      CHECK(k.rate.count == 1);
      CHECK(k.occurrences == 46);
    }
  }
  const nlohmann::json json = to_json(report);
  CHECK(json["total"]["episodes"] == 3);
  CHECK(json["total"]["failures"] == 49);
  CHECK(json["kinds"]["loss_spike"]["episodes"] == 1);
  CHECK(json["kinds"]["loss_spike"]["failures"] == 46);
  CHECK(json["episodes"][0]["occurrences"] == 46);
  CHECK(json["episodes"][0]["chip"].is_null());
  const std::string text = to_text(report);
  CHECK(text.find("loss_spike on n1 rank 0 fired 46 times, steps 200 to 9200: one cause, counted once") !=
        std::string::npos);
  CHECK(text.find("FAILED: 49 failures in 3 episodes") != std::string::npos);
}

TEST_CASE("the rate of counts given: episodes in chip-hours with their interval") {
  const nlohmann::json none = rate_to_json(0, 8, 0.95);
  CHECK(none["schema"] == "kiln.stability-rate/1");
  CHECK(none["lower"] == 0.0);
  CHECK(none["upper"].get<double>() == doctest::Approx(3688.9 / 8).epsilon(1e-4));
  const nlohmann::json two = rate_to_json(2, 4000, 0.9);
  CHECK(two["per_1000_chip_hours"].get<double>() == doctest::Approx(0.5));
  CHECK(two["upper"].get<double>() == doctest::Approx(garwood_interval(2, 0.9).upper / 4));
  CHECK(rate_to_text(1, 100, 0.95).find("1 episode in 100 chip-hours: 10.00 per 1000 chip-hours (95% CI 0.25 to "
                                        "55.72)") != std::string::npos);
}

}  // namespace kiln::stability

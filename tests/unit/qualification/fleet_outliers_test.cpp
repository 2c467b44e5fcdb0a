// Slow nodes: a node's throughput against its revision's other nodes on the same bundle and model.
// A node at half speed passes every candidate-against-baseline comparison (both on its own chips);
// this is what sends it to diagnostics, and noise alone must never do so.
#include <doctest/doctest.h>

#include <algorithm>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/stats/rng.h"
#include "qualification/fleet_outliers.h"

using namespace kiln;
namespace q = kiln::qualification;

namespace {

// A fleet of one revision measuring `models` on two bundles, `count` samples per node and
// bundle: each node's chips have a level of their own (device-to-device variation, about 2.5%,
// bounded as the simulator bounds it), each sample 1% run-to-run noise and now and then an
// iteration 5% to 25% slower (the simulator's outliers). `speed` scales one node.
struct FleetShape {
  int nodes = 4;
  int models = 2;
  int count = 10;
  std::string slow_node;
  double speed = 1.0;
  double device_sigma = 0.025;
};

std::vector<q::NodeThroughput> measure(const FleetShape& shape, std::uint64_t seed) {
  stats::Rng rng(seed);
  std::vector<q::NodeThroughput> batches;
  for (int n = 0; n < shape.nodes; ++n) {
    const std::string node = "n" + std::to_string(n + 1);
    const double level = (1.0 + shape.device_sigma * std::clamp(rng.normal(), -3.5, 3.5)) * (node == shape.slow_node ? shape.speed : 1.0);
    for (int m = 0; m < shape.models; ++m) {
      for (const char* bundle : {"candidate", "baseline"}) {
        q::NodeThroughput batch{"a", bundle, "model-" + std::to_string(m), node, {}};
        const double nominal = 1000.0 * (m + 1);
        for (int i = 0; i < shape.count; ++i) {
          double value = nominal * level * (1.0 + 0.01 * rng.normal());
          if (rng.bernoulli(0.05)) value /= 1.05 + 0.2 * rng.uniform01();
          batch.samples.push_back(value);
        }
        batches.push_back(std::move(batch));
      }
    }
  }
  return batches;
}

}  // namespace

TEST_CASE("a node at half speed among four is found, with each model's median against the fleet's") {
  const auto findings = q::find_slow_nodes(measure({4, 2, 10, "n3", 0.5}, 11), q::FleetOutlierOptions{});
  REQUIRE(findings.slow_nodes.size() == 1);
  const q::SlowNode& slow = findings.slow_nodes[0];
  CHECK(slow.node_id == "n3");
  CHECK(slow.revision == "a");
  CHECK(slow.effect == doctest::Approx(-0.5).epsilon(0.1));
  CHECK(slow.models_judged == 2);
  CHECK(slow.slow.size() == 4);  // two models on two bundles
  for (const q::NodeComparison& c : slow.slow) {
    CHECK(c.node_median < 0.6 * c.fleet_median);
    CHECK(c.node_samples == 10);
    CHECK(c.fleet_samples == 30);
    CHECK(c.fleet_nodes == 3);
    CHECK(c.p_value <= 0.001);
  }
  CHECK(slow.samples_counted == 4 * 40);
  CHECK(findings.pairs_judged == 4);
  CHECK(findings.nodes_compared == 4);
  CHECK(findings.samples_counted == 4 * 4 * 10);
  const std::string line = slow.describe();
  CHECK(line.find("node n3 (revision a)") != std::string::npos);
  CHECK(line.find("model-0") != std::string::npos);
  CHECK(line.find("model-1") != std::string::npos);
  CHECK(line.find("10 samples against 30 from 3 other nodes") != std::string::npos);
  const auto document = q::fleet_findings_json(findings);
  CHECK(document.at("slow_nodes").at(0).at("node_id") == "n3");
  CHECK(document.at("slow_nodes").at(0).at("evidence").size() == 4);
  CHECK(q::fleet_findings_text(findings).find("SLOW node n3") != std::string::npos);
}

TEST_CASE("a slow node is found in large fleets too, and only that node") {
  for (std::uint64_t seed = 1; seed <= 50; ++seed) {
    const auto findings = q::find_slow_nodes(measure({12, 3, 10, "n7", 0.5}, seed), q::FleetOutlierOptions{});
    REQUIRE_MESSAGE(findings.slow_nodes.size() == 1, "--seed=", seed);
    CHECK(findings.slow_nodes[0].node_id == "n7");
  }
}

TEST_CASE("noise alone never sends a node away: device-to-device spread, run noise and slow iterations") {
  for (std::uint64_t seed = 1; seed <= 400; ++seed) {
    FleetShape shape;
    shape.nodes = 4 + static_cast<int>(seed % 9);
    shape.models = 2 + static_cast<int>(seed % 3);
    shape.count = 5 + static_cast<int>(seed % 11);
    const auto findings = q::find_slow_nodes(measure(shape, seed), q::FleetOutlierOptions{});
    CHECK_MESSAGE(findings.slow_nodes.empty(), "--seed=", seed, ": ",
                  findings.slow_nodes.empty() ? "" : findings.slow_nodes[0].describe());
    CHECK(findings.pairs_judged == static_cast<std::size_t>(2 * shape.models));
  }
}

TEST_CASE("a node 8% slower than identical peers is within the effect floor: it stays up however sure the test is") {
  for (std::uint64_t seed = 1; seed <= 50; ++seed) {
    const auto findings = q::find_slow_nodes(measure({6, 3, 30, "n2", 0.92, 0.0}, seed), q::FleetOutlierOptions{});
    CHECK_MESSAGE(findings.slow_nodes.empty(), "--seed=", seed);
  }
  // 12% slower: called.
  const auto findings = q::find_slow_nodes(measure({6, 3, 30, "n2", 0.88, 0.0}, 1), q::FleetOutlierOptions{});
  REQUIRE(findings.slow_nodes.size() == 1);
  CHECK(findings.slow_nodes[0].node_id == "n2");
}

TEST_CASE("too few nodes or samples: nothing is called, and the report says why") {
  q::FleetOutlierOptions options;
  SUBCASE("three nodes, one at half speed: which one is slow is not asked of three") {
    const auto findings = q::find_slow_nodes(measure({3, 2, 10, "n1", 0.5}, 3), options);
    CHECK(findings.slow_nodes.empty());
    CHECK(findings.pairs_judged == 0);
    REQUIRE(findings.not_judged.size() == 4);
    CHECK(findings.not_judged[0].find("3 nodes with at least 5 samples, 4 needed") != std::string::npos);
    CHECK(q::fleet_findings_text(findings).find("not judged: ") != std::string::npos);
  }
  SUBCASE("four nodes with four samples each") {
    const auto findings = q::find_slow_nodes(measure({4, 2, 4, "n1", 0.5}, 3), options);
    CHECK(findings.slow_nodes.empty());
    CHECK(findings.pairs_judged == 0);
  }
  SUBCASE("the half-speed node's own samples are too few: it is not judged, the others are") {
    auto batches = measure({5, 2, 10, "n1", 0.5}, 3);
    for (auto& batch : batches) {
      if (batch.node_id == "n1") batch.samples.resize(2);
    }
    const auto findings = q::find_slow_nodes(batches, options);
    CHECK(findings.slow_nodes.empty());
    CHECK(findings.pairs_judged == 4);
    CHECK(findings.nodes_compared == 4);
  }
}

TEST_CASE("evidence is combined across models: one model slow on one node is not a hardware verdict") {
  auto batches = measure({6, 3, 10, "", 1.0}, 5);
  for (auto& batch : batches) {
    if (batch.node_id == "n4" && batch.model == "model-1") {
      for (double& value : batch.samples) value *= 0.5;
    }
  }
  CHECK(q::find_slow_nodes(batches, q::FleetOutlierOptions{}).slow_nodes.empty());
  // Slow on two of three models: called, with the two as its evidence.
  for (auto& batch : batches) {
    if (batch.node_id == "n4" && batch.model == "model-2") {
      for (double& value : batch.samples) value *= 0.5;
    }
  }
  const auto findings = q::find_slow_nodes(batches, q::FleetOutlierOptions{});
  REQUIRE(findings.slow_nodes.size() == 1);
  CHECK(findings.slow_nodes[0].node_id == "n4");
  CHECK(findings.slow_nodes[0].models_judged == 3);
  CHECK(findings.slow_nodes[0].slow.size() == 4);
}

TEST_CASE("a node faster than its peers is not sent to diagnostics") {
  CHECK(q::find_slow_nodes(measure({5, 2, 10, "n2", 1.6}, 9), q::FleetOutlierOptions{}).slow_nodes.empty());
}

TEST_CASE("nodes are compared within their revision only") {
  auto batches = measure({4, 2, 10, "", 1.0}, 13);
  // Revision b's nodes are half as fast by design: no node of either revision is slow.
  auto other = measure({4, 2, 10, "", 1.0}, 14);
  for (auto& batch : other) {
    batch.revision = "b";
    batch.node_id = "b-" + batch.node_id;
    for (double& value : batch.samples) value *= 0.5;
  }
  batches.insert(batches.end(), other.begin(), other.end());
  const auto findings = q::find_slow_nodes(batches, q::FleetOutlierOptions{});
  CHECK(findings.slow_nodes.empty());
  CHECK(findings.nodes_compared == 8);
}

TEST_CASE("the options refuse a fleet of two and an effect floor of nothing") {
  q::FleetOutlierOptions options;
  CHECK(q::validate(options).has_value());
  options.min_nodes = 2;
  CHECK_FALSE(q::validate(options).has_value());
  options = {};
  options.min_slowdown_percent = 0;
  CHECK_FALSE(q::validate(options).has_value());
  options = {};
  options.max_p_value = 1;
  const auto refused = q::validate(options);
  REQUIRE_FALSE(refused.has_value());
  CHECK(refused.error().message.find("which one is slow?") != std::string::npos);
}

TEST_CASE("the fleet check measures again the cheapest models that ran correctly on one node, per revision") {
  q::ModelSet set;
  const auto add_model = [&set](const std::string& name, int chips, int minutes) {
    q::QualificationModel model;
    model.name = name;
    model.chips = chips;
    model.minutes = minutes;
    set.models.push_back(model);
  };
  add_model("big", 8, 30);
  add_model("small", 1, 5);
  add_model("broken", 1, 1);
  add_model("wide", 16, 1);
  add_model("medium", 2, 5);
  q::RunReport report;
  const auto add_report = [&report](const std::string& model, const std::string& revision, q::ModelVerdict verdict,
                                    int nodes) {
    q::ModelReport m;
    m.model = model;
    m.revision = revision;
    m.verdict = verdict;
    m.measure_job = q::MeasuredJob{};
    m.measure_job->job_id = report.models.size() + 1;
    if (nodes > 1) m.measure_job->rank_job_ids = {m.measure_job->job_id, 100};
    report.models.push_back(m);
  };
  for (const char* revision : {"a", "b"}) {
    add_report("big", revision, q::ModelVerdict::passed, 1);
    add_report("small", revision, q::ModelVerdict::performance_regression, 1);
    add_report("broken", revision, q::ModelVerdict::correctness_regression, 1);
    add_report("wide", revision, q::ModelVerdict::passed, 2);
    add_report("medium", revision, q::ModelVerdict::improved, 1);
  }
  report.models.back().measure_job.reset();  // medium on b did not run
  const auto picks = q::fleet_check_picks(report, set, 2);
  REQUIRE(picks.size() == 4);
  CHECK(picks[0].revision == "a");
  CHECK(picks[0].model == "small");
  CHECK(picks[1].model == "medium");
  CHECK(picks[2].revision == "b");
  CHECK(picks[2].model == "small");
  CHECK(picks[3].model == "big");
  CHECK(picks[0].job.job_id == 2);
  CHECK(q::fleet_check_picks(report, set, 0).empty());
}

// Health end to end: the agent's probes, quarantine at the coordinator, diagnostics through
// the coordinator, installs verified before they run, and benchmarks with their report.
#include <doctest/doctest.h>

#include <filesystem>
#include <thread>
#include <fstream>

#include <nlohmann/json.hpp>

#include "common/protocol/messages.h"
#include "tests/integration/fleet_fixture.h"
#include "tests/integration/fleet_queries.h"

using namespace kiln;
using namespace kiln::protocol;
using namespace kiln::testing;
using namespace std::chrono_literals;


TEST_CASE("an injected fault fails the health probe, the node is quarantined, and passing diagnostics return it") {
  Fleet fleet("health");
  fleet.add_key("dev", "developer");
  fleet.add_key("lab1", "lab");
  fleet.add_agent({"n01", "a"});
  fleet.start_coordinator();
  fleet.start_agent("n01");
  auto dev = fleet.client("dev");
  auto lab = fleet.client("lab1");
  REQUIRE(Fleet::eventually([&] {
    auto n = node(*dev, "n01");
    return n && n->state == NodeState::up && n->health == HealthStatus::pass;
  }, 15s));

  REQUIRE(fleet.sim_chip("n01", {"inject", "--chip", "3", "--fault", "ecc_storm"}) == 0);
  REQUIRE(Fleet::eventually([&] {
    auto n = node(*dev, "n01");
    return n && n->state == NodeState::quarantined;
  }, 15s));
  auto n = node(*dev, "n01");
  CHECK(n->health == HealthStatus::fail);
  CHECK(n->quarantine_reason.find("ecc chip 3 fail: ecc_uncorrected") != std::string::npos);
  CHECK(n->quarantine_owner == "lab");

  // Regular work waits while the node is quarantined.
  SubmitJob smoke;
  smoke.workload = "smoke";
  const auto waiting = submit(*dev, smoke);
  std::this_thread::sleep_for(1s);
  CHECK(job(*dev, waiting)->job.state == JobState::queued);

  // Remote diagnostics read as the agent's own report: the verdict, a chip x check table, each
  // result that did not pass expanded with its reason and what to do; exit 1 for a failure.
  std::string text;
  CHECK(fleet.kiln("lab1", {"diag", "n01"}, &text) == 1);
  CHECK_MESSAGE(text.find("kiln diagnostics level 1 on node n01, revision a: FAIL") != std::string::npos, text);
  CHECK(text.find("  chip") != std::string::npos);
  CHECK(text.find("  ecc  ") != std::string::npos);
  CHECK(text.find("FAIL  ecc [chip 3]") != std::string::npos);
  CHECK(text.find("reason ecc_uncorrected, category memory") != std::string::npos);
  CHECK(text.find("action: ") != std::string::npos);

  // The lab clears the fault (a repair) and runs level 2 diagnostics through the coordinator.
  REQUIRE(fleet.sim_chip("n01", {"clear"}) == 0);
  std::string out;
  std::string progress;
  REQUIRE(fleet.kiln_split("lab1", {"--json", "diag", "n01", "--level", "2"}, &out, &progress) == 0);
  CHECK(progress.find("job ") != std::string::npos);  // progress on stderr, the report alone on stdout
  auto report = nlohmann::json::parse(out);
  CHECK(report["level"] == 2);
  CHECK(report["verdict"] != "fail");
  CHECK(report["results"].size() > 8);
  // A developer may not run diagnostics.
  CHECK(fleet.kiln("dev", {"diag", "n01", "--level", "1"}, &out) == 3);
  REQUIRE(Fleet::eventually([&] { return node(*dev, "n01")->state == NodeState::up; }, 10s));
  REQUIRE(Fleet::eventually([&] { return job(*dev, waiting)->job.state == JobState::succeeded; }, 20s));
}

TEST_CASE("a tampered package is refused before it runs; a benchmark job reports its samples") {
  Fleet fleet("install");
  fleet.add_key("ops1", "ops");
  fleet.add_key("dev", "developer");
  fleet.add_agent({"n01", "b"});
  fleet.start_coordinator();
  fleet.start_agent("n01");
  auto ops = fleet.client("ops1");
  REQUIRE(Fleet::eventually([&] {
    auto n = node(*ops, "n01");
    return n && n->state == NodeState::up;
  }, 15s));

  const auto image = fleet.dir() / "firmware-2.0.0.bin";
  std::ofstream(image) << "firmware image 2.0.0";
  SubmitJob install;
  install.workload = std::string(kInstallWorkload);
  install.node_id = "n01";
  install.args = {"--kind", "firmware", "--version", "2.0.0", "--sha256", std::string(64, 'a'), image.string()};
  const auto install_id = submit(*ops, install);
  REQUIRE(Fleet::eventually([&] { return job_ended(*ops, install_id); }, 60s));
  auto detail = job(*ops, install_id);
  CHECK(detail->job.state == JobState::failed);
  auto report = nlohmann::json::parse(detail->result);
  CHECK(report["outcome"] == "refused");
  CHECK(report["fit_for_work"] == true);
  CHECK(node(*ops, "n01")->chips.at(0).firmware_version == "1.0.0");

  // A developer may not install.
  auto dev = fleet.client("dev");
  auto refused = dev->request(install);
  REQUIRE_FALSE(refused.has_value());
  CHECK(refused.error().code == Errc::unauthorized);

  SubmitJob bench;
  bench.workload = "model";
  bench.args = {"--model", "mlp-bf16"};
  bench.chips = 1;
  bench.benchmark.repeats = 10;
  bench.benchmark.warmup_min = 3;
  bench.benchmark.warmup_max = 60;
  const auto bench_id = submit(*dev, bench);
  REQUIRE(Fleet::eventually([&] { return job_ended(*dev, bench_id); }, 60s));
  auto bench_detail = job(*dev, bench_id);
  REQUIRE_MESSAGE(bench_detail->job.state == JobState::succeeded, bench_detail->job.detail);
  auto bench_report = nlohmann::json::parse(bench_detail->result);
  CHECK(bench_report["timed_samples"] == 10);
  CHECK(bench_report["median_throughput"].get<double>() > 0);

  // The same from the command line.
  std::string out;
  CHECK(fleet.kiln("dev", {"--json", "submit", "--workload", "model", "--repeats", "7", "--warmup-min", "3", "--wait",
                           "--", "--model", "transformer-block-fp8"},
                   &out) == 0);
  auto cli_detail = nlohmann::json::parse(out);
  CHECK(nlohmann::json::parse(cli_detail["result"].get<std::string>())["timed_samples"] == 7);
}

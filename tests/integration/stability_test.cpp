// kiln stability with the real binaries on loopback: a gang of four simulated nodes trains
// train-tiny for simulated hours in seconds. A clean run reports no failure with an interval
// from its chip-hours; each failure kind the simulated chip injects (a loss spike and a
// throughput decay, which the run survives; NaN, a hang, a lost link and uncorrected ECC errors,
// injected while the run goes, which end a rank) is caught with its kind and evidence.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "tests/integration/documented_fields.h"
#include "tests/integration/fleet_fixture.h"
#include "tests/support/text.h"

using namespace kiln::testing;
using namespace std::chrono_literals;

namespace {

const std::vector<std::string> kNodes = {"n01", "n02", "n03", "n04"};

// 1200 run-clock seconds a wall second: an hour in 3 s, a hang after 1.5 s without a step.
constexpr const char* kCriteria = R"([run]
time_scale = 1200
[hang]
minutes = 30
)";

void start_fleet(Fleet& fleet) {
  fleet.add_key("ci", "ci");
  for (const auto& node : kNodes) fleet.add_agent({node, "a"}, "chip_count=2");
  fleet.start_coordinator();
  for (const auto& node : kNodes) fleet.start_agent(node);
  std::string out;
  REQUIRE(Fleet::eventually([&] { return fleet.kiln("ci", {"nodes"}, &out) == 0 && contains(out, "n04"); }, 20s));
  std::ofstream(fleet.dir() / "stability.toml") << kCriteria;
}

nlohmann::json run_json(Fleet& fleet, const std::string& duration, int expected_exit) {
  std::string out;
  std::string err;
  const int code = fleet.kiln_split("ci",
                                    {"stability", "--model", "train-tiny", "--chips", "8", "--duration", duration,
                                     "--criteria", (fleet.dir() / "stability.toml").string(), "--json"},
                                    &out, &err, 120s);
  INFO(out);
  INFO(err);
  REQUIRE(code == expected_exit);
  return nlohmann::json::parse(out);
}

// The failures of a report by node.
std::map<std::string, std::vector<nlohmann::json>> failures_by_node(const nlohmann::json& report) {
  std::map<std::string, std::vector<nlohmann::json>> by_node;
  for (const auto& f : report.at("failures")) by_node[f.at("node_id").get<std::string>()].push_back(f);
  return by_node;
}

void inject(Fleet& fleet, const std::string& node, int chip, const std::string& fault) {
  REQUIRE(fleet.sim_chip(node, {"inject", "--chip", std::to_string(chip), "--fault", fault}) == 0);
}

}  // namespace

TEST_CASE("kiln stability: a clean run, then each failure kind injected on the simulated chip and caught") {
  Fleet fleet("stability");
  start_fleet(fleet);

  // Clean: four ranks of 2 chips for an hour each, 8 chip-hours, no failure.
  const nlohmann::json clean = run_json(fleet, "1h", 0);
  CHECK(clean.at("passed") == true);
  CHECK(clean.at("complete") == true);
  CHECK(clean.at("ranks").size() == 4);
  const double chip_hours = clean.at("chip_hours").get<double>();
  CHECK(chip_hours == doctest::Approx(8.0).epsilon(0.01));
  CHECK(clean.at("total").at("failures") == 0);
  CHECK(clean.at("total").at("lower") == 0.0);
  // Garwood: no failure in T chip-hours bounds the rate by 3.689 / T at 95%.
  CHECK(clean.at("total").at("upper").get<double>() == doctest::Approx(3688.9 / chip_hours).epsilon(0.001));
  for (const auto& [kind, rate] : clean.at("kinds").items()) CHECK(rate.at("failures") == 0);
  // What docs/cli.md lists of its JSON is what it prints.
  CHECK(difference(clean, documented_fields("stability")) == "");

  // A loss spike every 200 steps on n01, a throughput decay on n02: recorded, the run goes on.
  inject(fleet, "n01", 0, "loss_spike");
  inject(fleet, "n02", 1, "throughput_decay");
  const nlohmann::json survived = run_json(fleet, "1h", 1);
  CHECK(survived.at("complete") == true);
  CHECK(survived.at("passed") == false);
  auto by_node = failures_by_node(survived);
  CHECK(by_node.size() == 2);
  REQUIRE(by_node["n01"].size() >= 1);
  for (const auto& f : by_node["n01"]) {
    CHECK(f.at("kind") == "loss_spike");
    CHECK(f.at("step").get<int>() % 200 < 5);  // within the smoothing of a spike's start
    CHECK(f.at("value").get<double>() > f.at("threshold").get<double>());
  }
  REQUIRE(by_node["n02"].size() == 1);
  CHECK(by_node["n02"][0].at("kind") == "throughput_decay");
  CHECK(by_node["n02"][0].at("value").get<double>() < by_node["n02"][0].at("threshold").get<double>());
  CHECK(contains(by_node["n02"][0].at("detail").get<std::string>(), "below the first 10 minutes'"));
  CHECK(survived.at("kinds").at("throughput_decay").at("failures") == 1);
  for (const auto& rank : survived.at("ranks")) CHECK(rank.at("ended_early") == false);
  for (const auto& node : {"n01", "n02"}) REQUIRE(fleet.sim_chip(node, {"clear"}) == 0);

  // NaN on n01, a hang on n02, a lost link on n03 and uncorrected ECC errors on n04, injected
  // once every rank trains: each ends its rank, with its evidence.
  const auto log = fleet.dir() / "stability-fatal.log";
  auto run = fleet.start_kiln("ci",
                              {"stability", "--model", "train-tiny", "--chips", "8", "--duration", "3h", "--criteria",
                               (fleet.dir() / "stability.toml").string()},
                              log);
  std::string jobs;
  REQUIRE(Fleet::eventually(
      [&] {
        if (fleet.kiln("ci", {"jobs", "--active", "--json"}, &jobs) != 0) return false;
        const auto list = nlohmann::json::parse(jobs, nullptr, false);
        int running = 0;
        for (const auto& job : list) running += job.value("state", "") == "running" ? 1 : 0;
        return running == 4;
      },
      30s));
  inject(fleet, "n01", 1, "nan_loss");
  inject(fleet, "n02", 0, "hang");
  inject(fleet, "n03", 1, "link_down");
  inject(fleet, "n04", 0, "ecc_storm");
  const int status = run->wait(120s);
  const std::string out = fleet.log_of(log.stem().string());
  INFO(out);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 1);
  CHECK(contains(out, "\n  nan on n01 rank "));
  CHECK(contains(out, "is NaN"));
  CHECK(contains(out, "\n  hang on n02 rank "));
  CHECK(contains(out, "the run was waiting on chip 0"));
  CHECK(contains(out, "\n  link on n03 rank "));
  CHECK(contains(out, " chip 1 at step "));
  CHECK(contains(out, "\n  ecc on n04 rank "));
  CHECK(contains(out, "chip 0 reported "));
  CHECK(contains(out, "uncorrected ECC error"));
  CHECK(contains(out, "FAILED: 4 failures"));
}

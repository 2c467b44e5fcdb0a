// kiln stability with the real binaries on loopback: a gang of four simulated nodes trains
// train-tiny for simulated hours in seconds. A clean run reports no failure with an interval
// from its chip-hours; each failure kind the simulated chip injects (a loss spike and a
// throughput decay, which the run survives; NaN, a hang, a lost link and uncorrected ECC errors,
// injected while the run goes, which end a rank) is caught with its kind and evidence. The runs
// of the shipped set's train-tiny-large-01 are recorded with their gates: the shipped register's
// stability risks get a verdict, a failing one pages its team, and an approver's waiver covers it.
// A periodic fault's firings on one chip are one episode: the rates count episodes.
#include <doctest/doctest.h>

#include <filesystem>

#include <fmt/format.h>
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

// The shipped register and its set; the coordinator checks waivers against the register, the
// qualifier judges its gates (and drives runs of the same set).
void start_fleet(Fleet& fleet) {
  namespace fs = std::filesystem;
  const fs::path data = fs::path(KILN_SOURCE_DIR) / "qualification/data";
  for (const char* file : {"risks.toml", "qualification-set.toml"}) fs::copy_file(data / file, fleet.dir() / file);
  fs::copy_file(data / "qualification-set.toml", fleet.dir() / "models.toml");
  fs::create_directories(fleet.dir() / "golden");
  const std::string golden = std::string(KILN_BIN_DIR) + "/kiln-workload-model --model train-tiny --data-seed 1 " +
                             "--write-golden " + (fleet.dir() / "golden").string() + " >/dev/null";
  REQUIRE(std::system(golden.c_str()) == 0);
  fleet.add_key("ci", "ci");
  fleet.add_key("sam", "developer");  // an approver of the runtime team
  fleet.add_coordinator_settings("risk_register = \"risks.toml\"\n");
  fleet.add_qualifier("qualifier", {{"risk_register", "\"risks.toml\""}});
  for (const auto& node : kNodes) fleet.add_agent({node, "a"}, "chip_count=2");
  fleet.start_coordinator();
  for (const auto& node : kNodes) fleet.start_agent(node);
  fleet.start_qualifier("qualifier");
  std::string out;
  REQUIRE(Fleet::eventually([&] { return fleet.kiln("ci", {"nodes"}, &out) == 0 && contains(out, "n04"); }, 20s));
  std::ofstream(fleet.dir() / "stability.toml") << kCriteria;
}

// A run of the register's gate model, recorded as RUN_ID.
nlohmann::json run_json(Fleet& fleet, const std::string& duration, int expected_exit, const std::string& run_id) {
  std::string out;
  std::string err;
  const int code = fleet.kiln_split("ci",
                                    {"stability", "--model", "train-tiny-large-01", "--chips", "8", "--duration",
                                     duration, "--criteria", (fleet.dir() / "stability.toml").string(), "--register",
                                     (fleet.dir() / "risks.toml").string(), "--run-id", run_id, "--json"},
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

const std::vector<std::string> kStabilityRisks = {"runtime-allocator-leak", "hardware-thermal-derating"};

// `kiln risks` on the shipped register: its risks by id. It exits 1: the register's other
// tiers have not run here.
std::map<std::string, nlohmann::json> risks_by_id(Fleet& fleet) {
  std::string out;
  std::string err;
  REQUIRE(fleet.kiln_split("ci", {"risks", "--register", (fleet.dir() / "risks.toml").string(), "--json"}, &out,
                           &err) == 1);
  std::map<std::string, nlohmann::json> by_id;
  const auto listed = nlohmann::json::parse(out);
  for (const auto& risk : listed.at("risks")) by_id[risk.at("id").get<std::string>()] = risk;
  for (const auto& id : kStabilityRisks) REQUIRE_MESSAGE(by_id.count(id) == 1, out);
  return by_id;
}

std::string verdict_of(const nlohmann::json& risk) {
  return risk.at("latest").is_null() ? "never judged" : risk.at("latest").at("verdict").get<std::string>();
}

}  // namespace

TEST_CASE("kiln stability: a clean run, then each failure kind injected on the simulated chip and caught") {
  Fleet fleet("stability");
  start_fleet(fleet);

  // Before any stability run, the register's stability risks are gaps.
  for (const auto& id : kStabilityRisks) {
    const auto risk = risks_by_id(fleet).at(id);
    CHECK(verdict_of(risk) == "never judged");
    CHECK(risk.at("gaps")[0].at("kind") == "never_run");
  }

  // Clean: four ranks of 2 chips for an hour each, 8 chip-hours, no failure.
  const nlohmann::json clean = run_json(fleet, "1h", 0, "stability-clean");
  CHECK(clean.at("recorded") == true);
  CHECK(clean.at("run_id") == "stability-clean");
  CHECK(clean.at("model") == "train-tiny-large-01");
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
  // Its gates are the stability risks' verdicts now: passed, with no gap.
  const auto after_clean = risks_by_id(fleet);
  for (const auto& id : kStabilityRisks) {
    INFO(after_clean.at(id).dump());
    CHECK(verdict_of(after_clean.at(id)) == "passed");
    CHECK(after_clean.at(id).at("latest").at("run_id") == "stability-clean");
    CHECK(after_clean.at(id).at("gaps").empty());
  }

  // A loss spike every 200 steps on n01, a throughput decay on n02: recorded, the run goes on.
  inject(fleet, "n01", 0, "loss_spike");
  inject(fleet, "n02", 1, "throughput_decay");
  const nlohmann::json survived = run_json(fleet, "1h", 1, "stability-spiky");
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
  // The periodic spike fired several times on n01's rank: one cause, one episode with its
  // occurrences. The rates and intervals count the two episodes, not every firing.
  REQUIRE(by_node["n01"].size() >= 2);
  CHECK(survived.at("kinds").at("loss_spike").at("episodes") == 1);
  CHECK(survived.at("kinds").at("loss_spike").at("failures") == by_node["n01"].size());
  CHECK(survived.at("total").at("episodes") == 2);
  CHECK(survived.at("total").at("failures") == by_node["n01"].size() + 1);
  REQUIRE(survived.at("episodes").size() == 2);
  for (const auto& episode : survived.at("episodes")) {
    if (episode.at("kind") != "loss_spike") continue;
    CHECK(episode.at("node_id") == "n01");
    CHECK(episode.at("occurrences") == by_node["n01"].size());
  }
  // The same interval as two episodes counted on the command line in the run's chip-hours.
  const double spiky_chip_hours = survived.at("chip_hours").get<double>();
  std::string rate_out;
  std::string rate_err;
  REQUIRE(fleet.kiln_split("ci",
                           {"stability", "--episodes", "2", "--chip-hours", fmt::format("{:.17g}", spiky_chip_hours),
                            "--json"},
                           &rate_out, &rate_err) == 0);
  const auto rate = nlohmann::json::parse(rate_out);
  CHECK(rate.at("schema") == "kiln.stability-rate/1");
  CHECK(rate.at("upper").get<double>() == doctest::Approx(survived.at("total").at("upper").get<double>()));
  CHECK(rate.at("lower").get<double>() == doctest::Approx(survived.at("total").at("lower").get<double>()));
  // Garwood's 95% upper bound of 2 events is 7.2247, per 1000 chip-hours of exposure.
  CHECK(rate.at("upper").get<double>() == doctest::Approx(7224.7 / spiky_chip_hours).epsilon(1e-3));
  std::string text_out;
  REQUIRE(fleet.kiln("ci", {"stability", "--episodes", "0", "--chip-hours", "8"}, &text_out) == 0);
  CHECK(contains(text_out, "0 episodes in 8 chip-hours: 0.00 per 1000 chip-hours (95% CI 0.00 to 461.11)"));
  CHECK(fleet.kiln("ci", {"stability", "--episodes", "2"}, &text_out) == 2);
  CHECK(contains(text_out, "--episodes and --chip-hours go together"));
  for (const auto& rank : survived.at("ranks")) CHECK(rank.at("ended_early") == false);
  for (const auto& node : {"n01", "n02"}) REQUIRE(fleet.sim_chip(node, {"clear"}) == 0);

  // The spike fails the allocator-leak risk's loss curve, the decay the thermal risk's
  // throughput; the qualifier pages each risk's team with its severity.
  const auto after_spike = risks_by_id(fleet);
  for (const auto& id : kStabilityRisks) CHECK(verdict_of(after_spike.at(id)) == "failed");
  CHECK(contains(after_spike.at("runtime-allocator-leak").at("latest").at("detail").get<std::string>(), "loss_spike"));
  CHECK(contains(after_spike.at("hardware-thermal-derating").at("latest").at("detail").get<std::string>(),
                 "throughput_decay"));
  std::map<std::string, nlohmann::json> pages;
  REQUIRE_MESSAGE(Fleet::eventually(
      [&] {
        std::string tickets;
        if (fleet.kiln("ci", {"tickets", "--json"}, &tickets) != 0) return false;
        const auto listed = nlohmann::json::parse(tickets);
        for (const auto& ticket : listed) {
          if (ticket.at("kind") == "risk_gate") pages[ticket.at("culprit").get<std::string>()] = ticket;
        }
        return pages.size() == 2;
      },
      20s),
      fleet.log_of("qualifier"));
  REQUIRE(pages.count("risk:runtime-allocator-leak@stability-spiky") == 1);
  CHECK(pages.at("risk:runtime-allocator-leak@stability-spiky").at("team") == "runtime");
  CHECK(pages.at("risk:runtime-allocator-leak@stability-spiky").at("severity") == "sev2");
  REQUIRE(pages.count("risk:hardware-thermal-derating@stability-spiky") == 1);
  CHECK(pages.at("risk:hardware-thermal-derating@stability-spiky").at("team") == "hardware");

  // An approver of the runtime team waives the run's loss-curve failure: the qualifier judges the
  // run again, and the risk reads waived; the thermal risk, not waived, still fails.
  std::string waived;
  REQUIRE(fleet.kiln("sam",
                     {"waive", "stability-spiky", "--model", "train-tiny-large-01", "--metric", "loss_curve",
                      "--reason", "spikes from the injected fault", "--expires", "1h"},
                     &waived) == 0);
  INFO(waived);
  REQUIRE(Fleet::eventually([&] { return verdict_of(risks_by_id(fleet).at("runtime-allocator-leak")) == "waived"; },
                            20s));
  const auto after_waiver = risks_by_id(fleet);
  CHECK(contains(after_waiver.at("runtime-allocator-leak").at("latest").at("waiver").get<std::string>(),
                 "waived by sam until "));
  CHECK(verdict_of(after_waiver.at("hardware-thermal-derating")) == "failed");

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

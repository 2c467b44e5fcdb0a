// kiln plan with the real binary and no coordinator (docs/strategy.md): the statement's matrix
// offline, the state file across nights, and the answers to a wrong matrix or state file.
#include <doctest/doctest.h>

#include <fstream>
#include <sstream>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "tests/integration/run_command.h"
#include "tests/support/temp_dir.h"

namespace {

using kiln::testing::bin;
using kiln::testing::contains;
using kiln::testing::run;
using kiln::testing::TempDir;

const std::string kExampleMatrix = std::string(KILN_SOURCE_DIR) + "/qualification/data/matrix.toml";

std::string plan_command(const std::string& tail) {
  return bin("kiln") + " --config /nonexistent/client.toml plan --offline " + tail;
}

// The JSON document of an output that has the command's "kiln: ..." lines of stderr in it too.
nlohmann::json document_of(const std::string& output) {
  std::istringstream lines(output);
  std::string json;
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("kiln: ", 0) != 0) json += line + "\n";
  }
  return nlohmann::json::parse(json);
}

}  // namespace

TEST_CASE("kiln plan offline: the statement's matrix on 2000 chip-hours covers every pair within the budget") {
  const auto ran = run(plan_command("--matrix " + kExampleMatrix + " --budget-chip-hours 2000 --top 3"));
  INFO(ran.output);
  REQUIRE(ran.status == 0);
  CHECK(contains(ran.output, "kiln: offline (--offline): costs and risks from the matrix file alone"));
  CHECK(contains(ran.output, "pairs covered: 653 of 653 (100.0%, 100.0% of their risk weight)"));
  CHECK(contains(ran.output, "skipped, the riskiest 3 of "));
  CHECK(contains(ran.output, "rotation: a full rotation takes 16 nights"));

  const auto json = run(plan_command("--matrix " + kExampleMatrix + " --budget-chip-hours 2000 --json"));
  REQUIRE(json.status == 0);
  const auto plan = document_of(json.output);
  CHECK(plan.at("chip_hours").get<double>() <= 2000.0);
  CHECK(plan.at("pairs_covered") == 653);
  CHECK(plan.at("cells_total") == 17280);
  CHECK(plan.at("sources").at(0) == "offline (--offline): costs and risks from the matrix file alone");
}

// The statement's 15 x 12 x 3 x 8 x 4 matrix: a pairwise cover needs a cell for each of the 180
// model x config pairs, and 180 cells suffice. The cheapest cover costs 211.47 chip-hours: the
// exact optimum of the covering programme (17,280 binary cells, 653 pair constraints), found by
// GLPK's glpsol in 170 s (docs/strategy.md, "How good the cover is").
constexpr double kCheapestCoverChipHours = 211.47015;

TEST_CASE("kiln plan offline: the pairwise cover reaches 180 cells and comes within 2% of the cheapest cover") {
  for (const char* seed : {"1", "2", "3"}) {
    // At 225 chip-hours a night holds the cover and a few cells by risk, and no rotation.
    const auto ran = run(plan_command("--matrix " + kExampleMatrix + " --budget-chip-hours 225 --json --seed " + seed));
    INFO(ran.output);
    REQUIRE(ran.status == 0);
    const auto plan = document_of(ran.output);
    CHECK(plan.at("pairs_covered") == 653);
    CHECK(plan.at("missing_pairs").empty());
    int pairwise = 0;
    for (const auto& cell : plan.at("cells")) pairwise += cell.at("reason") == "pairwise" ? 1 : 0;
    CHECK(pairwise == 180);
    CHECK(plan.at("pairwise_chip_hours").get<double>() <= 1.02 * kCheapestCoverChipHours);
    CHECK(plan.at("full_cover_chip_hours").get<double>() <= 1.02 * kCheapestCoverChipHours);
    CHECK(plan.at("full_cover_chip_hours").get<double>() >= kCheapestCoverChipHours - 1e-6);
  }
}

TEST_CASE("kiln plan offline: a budget short of a full cover names the pairs it misses and never reads 100%") {
  const auto ran = run(plan_command("--matrix " + kExampleMatrix + " --budget-chip-hours 200 --json"));
  INFO(ran.output);
  REQUIRE(ran.status == 0);
  const auto plan = document_of(ran.output);
  const std::size_t missing = 653 - plan.at("pairs_covered").get<std::size_t>();
  REQUIRE(missing > 0);
  REQUIRE(plan.at("missing_pairs").size() == missing);
  CHECK(plan.at("pair_weight_covered").get<double>() < plan.at("pair_weight_total").get<double>());
  const std::string heaviest = plan.at("missing_pairs")[0].at("pair").get<std::string>();
  CHECK(contains(heaviest, " x "));
  // Heaviest first.
  for (std::size_t k = 1; k < missing; ++k) {
    CHECK(plan.at("missing_pairs")[k].at("weight").get<double>() <=
          plan.at("missing_pairs")[k - 1].at("weight").get<double>());
  }
  const auto text = run(plan_command("--matrix " + kExampleMatrix + " --budget-chip-hours 200"));
  REQUIRE(text.status == 0);
  INFO(text.output);
  CHECK(contains(text.output, fmt::format("pairs covered: {} of 653 (", 653 - missing)));
  CHECK_FALSE(contains(text.output, "(100.0% of their risk weight)"));
  CHECK_FALSE(contains(text.output, ", 100.0% of their risk weight)"));
  CHECK(contains(text.output, fmt::format("{} pair{} missing: {}", missing, missing == 1 ? " is" : "s are", heaviest)));
}

TEST_CASE("kiln plan --state --record: the nights go forward and the cells ran last night are older tonight") {
  TempDir dir("kiln-plan");
  const std::string state = (dir.path() / "state.json").string();
  const std::string base = "--matrix " + kExampleMatrix + " --budget-chip-hours 2000 --state " + state;
  REQUIRE(run(plan_command(base + " --record")).status == 0);
  const auto second = run(plan_command(base + " --record --json"));
  REQUIRE(second.status == 0);
  const auto plan = document_of(second.output);
  CHECK(plan.at("night") == 2);
  CHECK(plan.at("rotation").at("due_unpaid_chip_hours") == 0.0);
  std::ifstream file(state);
  const auto recorded = nlohmann::json::parse(file);
  CHECK(recorded.at("first_night") == 1);
  CHECK(recorded.at("last_night") == 2);

  const auto back = run(plan_command(base + " --record --night 2"));
  CHECK(back.status == 2);
  CHECK(contains(back.output, state + " has night 2 recorded already; nights go forward: give --night 3 or more"));
  const auto no_state = run(plan_command("--matrix " + kExampleMatrix + " --budget-chip-hours 10 --record"));
  CHECK(no_state.status == 2);
  CHECK(contains(no_state.output, "--record needs --state FILE"));
}

TEST_CASE("kiln plan refuses a wrong matrix file with every problem at its line, exit 2") {
  TempDir dir("kiln-plan-bad");
  const std::string path = (dir.path() / "matrix.toml").string();
  std::ofstream(path) << "base_chip_hours = 0\n[[factor]]\nname = \"model\"\nvalues = [\"a\"]\nrisk = { \"b\" = 2.0 }\n";
  const auto ran = run(plan_command("--matrix " + path + " --budget-chip-hours 10"));
  CHECK(ran.status == 2);
  CHECK(contains(ran.output, path + ":1:19: base_chip_hours must be a number above 0"));
  CHECK(contains(ran.output, path + ":5:10: 'b' in risk of factor 'model' is not one of its values; did you mean 'a'?"));
  CHECK(contains(ran.output, path + ": the matrix needs two [[factor]] tables at least"));
  const auto missing = run(plan_command("--matrix " + path + ".nope --budget-chip-hours 10"));
  CHECK(missing.status == 2);
  CHECK(contains(missing.output, "cannot read the matrix file"));
}

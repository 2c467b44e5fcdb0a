// kiln plan with the real binary and no coordinator (docs/strategy.md): the statement's matrix
// offline, the state file across nights, and the answers to a wrong matrix or state file.
#include <doctest/doctest.h>

#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "tests/integration/run_command.h"
#include "tests/support/temp_dir.h"

namespace {

using kiln::testing::bin;
using kiln::testing::contains;
using kiln::testing::run;
using kiln::testing::TempDir;

const std::string kExampleMatrix = std::string(KILN_SOURCE_DIR) + "/coordinator/qualification/data/matrix.toml";

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
  CHECK(contains(ran.output, "pairs covered: 653 of 653 (100.0%)"));
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

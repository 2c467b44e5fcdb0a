// `kiln unit` with the real binaries: the unit tier of a bundle's change on the CPU and sim
// backends (summary, JUnit, exit code), and the qualifier's gate that refuses the hardware smoke
// of a change the unit tier rejected before any job.
#include <doctest/doctest.h>

#include <filesystem>

#include <nlohmann/json.hpp>

#include "tests/integration/fleet_fixture.h"
#include "tests/integration/qualification_fleet.h"

using namespace kiln::testing;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

namespace {

std::string build_at(Fleet& fleet, const std::string& change) {
  std::string out;
  REQUIRE(fleet.kiln("ci", {"bundle", "build", "--at", change, "--rev", "a", "--bundle-dir",
                            (fleet.dir() / "bundles").string()},
                     &out) == 0);
  const std::string bundle = first_word_after(out, "bundle ");
  REQUIRE(bundle.size() == 64);
  return bundle;
}

}  // namespace

TEST_CASE("kiln unit runs the change's kernel tests on both backends; the smoke of a rejected change takes no chip") {
  Fleet fleet("unit-tier");
  start_two_nodes(fleet);
  const fs::path dir = fleet.dir();
  std::string out;
  REQUIRE(fleet.kiln("ci", {"change", "import", (dir / "history.toml").string()}, &out) == 0);
  const std::string gelu = build_at(fleet, "k2");    // kernels: gelu
  const std::string broken = build_at(fleet, "k5");  // kernels: breaks gemm-bf16

  // k2 touches gelu: its one test passes on the sim chip and the CPU backend.
  CHECK(fleet.kiln("ci", {"unit", "--bundle", gelu.substr(0, 10), "--junit", (dir / "unit-k2.xml").string()}, &out) ==
        0);
  CHECK(out.find("unit tier of change k2: PASSED") != std::string::npos);
  CHECK(out.find("selects gelu") != std::string::npos);
  CHECK(out.find("2 of 2 test runs passed on sim, cpu") != std::string::npos);
  const std::string passed_xml = read(dir / "unit-k2.xml");
  CHECK(passed_xml.find("<testsuites name=\"kiln.unit k2\" tests=\"2\" failures=\"0\" errors=\"0\"") !=
        std::string::npos);
  CHECK(passed_xml.find("<testsuite name=\"kiln.unit backend cpu\" tests=\"1\"") != std::string::npos);

  // k5 breaks gemm-bf16: both its tests fail on both backends; exit 1, a line per failure.
  CHECK(fleet.kiln("ci", {"unit", "--bundle", broken, "--junit", (dir / "unit-k5.xml").string()}, &out) == 1);
  INFO(out);
  CHECK(out.find("unit tier of change k5: FAILED") != std::string::npos);
  for (const char* line : {"FAIL gemm-bf16 on sim", "FAIL gemm-bf16 on cpu", "FAIL gemm-bf16-transposed on sim",
                           "FAIL attention-head on cpu"}) {
    CHECK_MESSAGE(out.find(line) != std::string::npos, line);
  }
  const std::string failed_xml = read(dir / "unit-k5.xml");
  CHECK(failed_xml.find("<testsuites name=\"kiln.unit k5\" tests=\"6\" failures=\"6\"") != std::string::npos);
  CHECK(failed_xml.find("<testcase name=\"gemm-bf16\" classname=\"kiln.unit\"") != std::string::npos);
  CHECK(failed_xml.find("<failure message=") != std::string::npos);

  // A driver change of the same bundle runs no unit test and passes, saying so; JSON on request.
  CHECK(fleet.kiln("ci", {"unit", "--bundle", broken, "--change", "k4", "--json"}, &out) == 0);
  const auto document = nlohmann::json::parse(out);
  CHECK(document.at("schema") == "kiln.unit-tier/1");
  CHECK(document.at("cases").empty());
  CHECK(document.at("selection").get<std::string>().find("no unit test covers") != std::string::npos);

  // Usage errors: both ways of choosing tests (2), a change not in the bundle (5).
  CHECK(fleet.kiln("ci", {"unit", "--bundle", broken, "--all", "--change", "k2"}, &out) == 2);
  CHECK(fleet.kiln("ci", {"unit", "--bundle", gelu, "--change", "k5"}, &out) == 5);
  CHECK(out.find("change k5 is not in bundle") != std::string::npos);

  // The smoke of k5 is refused by the qualifier's unit-tier gate: failed, with no job started.
  REQUIRE(fleet.kiln("ci", {"jobs", "--json"}, &out) == 0);
  const std::size_t jobs_before = nlohmann::json::parse(out).size();
  fleet.start_qualifier("qualifier");
  CHECK(fleet.kiln("ci", {"smoke", "--bundle", broken, "--wait", "--run-id", "smoke-k5"}, &out, 240s) == 1);
  CHECK(out.find("change k5 was rejected by the unit tier (gemm-bf16 on sim") != std::string::npos);
  REQUIRE(fleet.kiln("ci", {"run", "smoke-k5", "--json"}, &out) == 1);  // a failed run
  const auto run = nlohmann::json::parse(out);
  CHECK(run.at("passed") == false);
  CHECK(run.at("jobs_started") == 0);
  REQUIRE(fleet.kiln("ci", {"jobs", "--json"}, &out) == 0);
  CHECK(nlohmann::json::parse(out).size() == jobs_before);
}

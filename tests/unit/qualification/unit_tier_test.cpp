// The unit tier's pure parts: which tests a change selects, how a result is judged and reported,
// and the gate that keeps a change the unit tier rejected away from the hardware smoke.
#include "qualification/unit_tier.h"

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

namespace kiln::qualification {
namespace {

Change change(std::string id, Layer layer, std::vector<std::string> components) {
  Change c;
  c.id = std::move(id);
  c.layer = layer;
  c.owner_team = "team";
  c.components = std::move(components);
  return c;
}

std::vector<std::string> names(const UnitSelection& selection) {
  std::vector<std::string> out;
  for (const UnitTest* t : selection.tests) out.push_back(t->name);
  return out;
}

UnitCaseResult run_case(const UnitTest& test, const std::set<std::string>& broken) {
  const auto launch = unit_test_launch(test);
  const auto golden = numerics::run_kernel(numerics::KernelContext{true, {}}, launch);
  const auto actual = numerics::run_kernel(numerics::KernelContext{false, broken}, launch);
  REQUIRE(golden);
  REQUIRE(actual);
  return judge_unit_case(test, "cpu", *golden, *actual);
}

TEST_CASE("a kernels change selects the unit tests of the kernels it touched") {
  const auto selection = select_unit_tests(change("c08", Layer::kernels, {"softmax"}), unit_tests());
  CHECK(names(selection) == std::vector<std::string>{"softmax", "softmax-causal", "attention-head"});
  CHECK(selection.why.find("c08") != std::string::npos);
}

TEST_CASE("a compiler change selects the compiler's tests of its components; none named selects them all") {
  CHECK(names(select_unit_tests(change("c04", Layer::compiler, {"gemm-fp8"}), unit_tests())) ==
        std::vector<std::string>{"gemm-fp8"});
  const auto all = select_unit_tests(change("c99", Layer::compiler, {}), unit_tests());
  CHECK(all.tests.size() == 4);  // the gemms and attention
}

TEST_CASE("a change in a layer no unit test covers runs none and says why") {
  for (const Layer layer : {Layer::model, Layer::framework, Layer::runtime, Layer::driver, Layer::firmware}) {
    const auto selection = select_unit_tests(change("c06", layer, {}), unit_tests());
    CHECK(selection.tests.empty());
    CHECK(selection.why.find("no unit test covers") != std::string::npos);
  }
  const auto off = select_unit_tests(change("c30", Layer::kernels, {"rmsnorm"}), unit_tests());
  CHECK(off.tests.empty());
  CHECK(off.why.find("rmsnorm") != std::string::npos);
  UnitTierReport empty{"b1", "c06", off.why, {"sim", "cpu"}, {}};
  CHECK(empty.passed());
  CHECK(unit_summary_text(empty).find("passed without running any") != std::string::npos);
}

TEST_CASE("every unit test passes against its golden with the chip's numerics") {
  for (const UnitTest& test : unit_tests()) {
    CAPTURE(test.name);
    const auto result = run_case(test, {});
    CHECK_MESSAGE(result.passed, result.detail);
  }
}

TEST_CASE("a broken kernel fails every unit test that runs it") {
  for (const UnitTest& test : unit_tests()) {
    CAPTURE(test.name);
    for (const auto& component : test.components) {
      CAPTURE(component);
      const auto result = run_case(test, {component});
      CHECK_FALSE(result.passed);
      CHECK(result.detail.find("outside") != std::string::npos);
    }
  }
}

TEST_CASE("the unit tier's summary and JUnit name each failing test and backend") {
  const UnitTest& gemm = unit_tests().front();
  UnitTierReport report{"b1", "c12", "change c12 selects gemm-bf16", {"sim", "cpu"}, {}};
  for (const std::string backend : {"sim", "cpu"}) {
    auto result = run_case(gemm, {"gemm-bf16"});
    result.backend = backend;
    report.cases.push_back(result);
  }
  CHECK_FALSE(report.passed());
  const std::string text = unit_summary_text(report);
  CHECK(text.find("unit tier of change c12: FAILED") != std::string::npos);
  CHECK(text.find("FAIL gemm-bf16 on sim") != std::string::npos);
  CHECK(text.find("FAIL gemm-bf16 on cpu") != std::string::npos);
  const std::string xml = unit_junit_xml(report);
  CHECK(xml.find("<testsuites name=\"kiln.unit c12\" tests=\"2\" failures=\"2\"") != std::string::npos);
  CHECK(xml.find("<testsuite name=\"kiln.unit backend sim\" tests=\"1\" failures=\"1\"") != std::string::npos);
  CHECK(xml.find("<failure message=") != std::string::npos);
  CHECK(to_json(report)["passed"] == false);
}

TEST_CASE("the smoke gate: a hardware-path change gets its smoke only after its unit tier passed") {
  const Change kernels = change("c12", Layer::kernels, {"gemm-bf16"});
  const UnitTest& gemm = unit_tests().front();
  UnitTierReport passed{"b1", "c12", "", {"cpu"}, {run_case(gemm, {})}};
  UnitTierReport failed{"b1", "c12", "", {"cpu"}, {run_case(gemm, {"gemm-bf16"})}};

  CHECK(admit_smoke(kernels, passed).admitted);
  const auto rejected = admit_smoke(kernels, failed);
  CHECK_FALSE(rejected.admitted);
  CHECK(rejected.reason.find("rejected by the unit tier (gemm-bf16 on cpu failed)") != std::string::npos);
  const auto missing = admit_smoke(kernels, std::nullopt);
  CHECK_FALSE(missing.admitted);
  CHECK(missing.reason.find("kiln unit --change c12") != std::string::npos);
  UnitTierReport other = passed;
  other.change_id = "c11";
  CHECK_FALSE(admit_smoke(kernels, other).admitted);
  // A driver change runs no unit test: an empty unit tier passes and lets it through.
  const Change driver = change("c06", Layer::driver, {});
  CHECK(admit_smoke(driver, UnitTierReport{"b1", "c06", "", {"cpu"}, {}}).admitted);
  // Off the hardware path the gate does not hold anything.
  CHECK(admit_smoke(change("c05", Layer::model, {}), std::nullopt).admitted);
}

}  // namespace
}  // namespace kiln::qualification

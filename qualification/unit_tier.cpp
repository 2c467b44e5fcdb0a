#include "qualification/unit_tier.h"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "common/stats/rng.h"
#include "qualification/junit.h"

namespace kiln::qualification {

using numerics::DType;

const std::vector<UnitTest>& unit_tests() {
  using enum Layer;
  // Shapes are small and odd on purpose: tails of tiles and rows are where kernels go wrong.
  static const std::vector<UnitTest> tests = {
      {"gemm-bf16", "gemm-bf16", DType::bf16, false, false, {{24, 40}, {40, 33}}, 11, {kernels, compiler},
       {"gemm-bf16"}},
      {"gemm-bf16-transposed", "gemm-bf16", DType::bf16, false, true, {{17, 64}, {29, 64}}, 12, {kernels, compiler},
       {"gemm-bf16"}},
      {"gemm-fp8", "gemm-fp8", DType::f8_e4m3, false, false, {{24, 48}, {48, 20}}, 13, {kernels, compiler},
       {"gemm-fp8", "quantize-fp8"}},
      {"softmax", "softmax", DType::bf16, false, false, {{16, 37}}, 14, {kernels}, {"softmax"}},
      {"softmax-causal", "softmax", DType::bf16, true, false, {{23, 23}}, 15, {kernels}, {"softmax"}},
      {"layernorm", "layernorm", DType::bf16, false, false, {{12, 96}}, 16, {kernels}, {"layernorm"}},
      {"gelu", "gelu", DType::bf16, false, false, {{9, 70}}, 17, {kernels}, {"gelu"}},
      {"attention-head", "attention", DType::bf16, false, false, {{32, 16}, {32, 16}, {32, 16}}, 18,
       {compiler, kernels}, {"attention", "gemm-bf16", "softmax"}},
  };
  return tests;
}

numerics::KernelLaunch unit_test_launch(const UnitTest& test) {
  numerics::KernelLaunch launch{test.kernel, test.causal, test.transpose_b, {}};
  std::uint64_t stream = 0;
  for (const auto& [rows, cols] : test.input_shapes) {
    stats::Rng rng(stats::derive_seed(test.seed, stream++));
    numerics::Matrix m(rows, cols);
    for (auto& x : m.data) x = static_cast<float>(rng.uniform(-1.0, 1.0));
    launch.inputs.push_back(std::move(m));
  }
  return launch;
}

namespace {

bool shares_component(const Change& change, const UnitTest& test) {
  return std::any_of(change.components.begin(), change.components.end(),
                     [&](const std::string& c) { return test.components.count(c) > 0; });
}

std::vector<std::string> names_of(const std::vector<const UnitTest*>& tests) {
  std::vector<std::string> names;
  for (const UnitTest* t : tests) names.push_back(t->name);
  return names;
}

}  // namespace

UnitSelection select_unit_tests(const Change& change, const std::vector<UnitTest>& registry) {
  UnitSelection out;
  bool layer_covered = false;
  for (const UnitTest& test : registry) {
    if (test.layers.count(change.layer) == 0) continue;
    layer_covered = true;
    if (change.components.empty() || shares_component(change, test)) out.tests.push_back(&test);
  }
  if (!layer_covered) {
    out.why = fmt::format("change {} is in the {} layer, which no unit test covers (kernels and compiler only): "
                          "nothing to run",
                          change.id, to_string(change.layer));
  } else if (out.tests.empty()) {
    out.why = fmt::format("change {} touches {}, which no unit test of the {} layer exercises: nothing to run",
                          change.id, fmt::join(change.components, ", "), to_string(change.layer));
  } else {
    out.why = fmt::format("change {} ({} layer{}{}) selects {}", change.id, to_string(change.layer),
                          change.components.empty() ? ", every test of it" : ": ",
                          fmt::join(change.components, ", "), fmt::join(names_of(out.tests), ", "));
  }
  return out;
}

UnitSelection all_unit_tests(const std::vector<UnitTest>& registry) {
  UnitSelection out;
  for (const UnitTest& test : registry) out.tests.push_back(&test);
  out.why = fmt::format("every unit test: {}", fmt::join(names_of(out.tests), ", "));
  return out;
}

UnitCaseResult judge_unit_case(const UnitTest& test, std::string backend, const numerics::Matrix& golden,
                               const numerics::Matrix& actual) {
  UnitCaseResult result{test.name, std::move(backend), false, false, "", 0};
  const numerics::Tensor expected = numerics::to_tensor(golden, DType::f32);
  const numerics::KernelTolerance rule = numerics::kernel_output_tolerance(numerics::is_fp8(test.dtype));
  numerics::CompareOptions options;
  options.dtype = DType::bf16;  // every kernel stores its results in bf16
  options.tolerance = numerics::Tolerance{rule.rtol, rule.atol_rms_fraction * numerics::rms(expected), 0.0};
  options.max_reported = 1;
  auto report = numerics::compare(expected, numerics::to_tensor(actual, DType::bf16), options);
  if (!report) {
    result.error = true;
    result.detail = report.error().message;
    return result;
  }
  result.passed = report->passed;
  result.detail = result.passed
                      ? fmt::format("within tolerance (max abs error {:.3g})", report->max_abs_error)
                      : fmt::format("{} of {} values outside rtol {} atol {:.3g} (max abs error {:.3g})",
                                    report->mismatch_count, report->element_count, report->tolerance_used.rtol,
                                    report->tolerance_used.atol, report->max_abs_error);
  return result;
}

bool UnitTierReport::passed() const {
  return std::all_of(cases.begin(), cases.end(), [](const UnitCaseResult& c) { return c.passed; });
}

std::string unit_summary_text(const UnitTierReport& report) {
  const std::string subject = report.change_id.empty() ? fmt::format("bundle {}", report.bundle_id.substr(0, 12))
                                                        : fmt::format("change {}", report.change_id);
  const auto passed = std::count_if(report.cases.begin(), report.cases.end(), [](const auto& c) { return c.passed; });
  std::string out = fmt::format("unit tier of {}: {}\n  {}\n", subject, report.passed() ? "PASSED" : "FAILED",
                                report.selection);
  if (report.cases.empty()) return out + "  no unit test covers what it touched: passed without running any\n";
  out += fmt::format("  {} of {} test runs passed on {}\n", passed, report.cases.size(),
                     fmt::join(report.backends, ", "));
  for (const UnitCaseResult& c : report.cases) {
    if (c.passed) continue;
    out += fmt::format("  FAIL {} on {}: {}{}\n", c.test, c.backend, c.error ? "could not run: " : "", c.detail);
  }
  return out;
}

std::string unit_junit_xml(const UnitTierReport& report) {
  using Outcome = JunitCase::Outcome;
  std::vector<JunitSuite> suites;
  for (const std::string& backend : report.backends) {
    JunitSuite suite{fmt::format("kiln.unit backend {}", backend), {}};
    for (const UnitCaseResult& c : report.cases) {
      if (c.backend != backend) continue;
      const Outcome outcome = c.passed ? Outcome::passed : c.error ? Outcome::error : Outcome::failed;
      suite.cases.push_back({c.test, "kiln.unit", c.duration_ms, outcome, c.passed ? "" : c.detail,
                             c.passed ? "" : "golden_mismatch", c.detail + "\n"});
    }
    suites.push_back(std::move(suite));
  }
  const std::string subject = report.change_id.empty() ? report.bundle_id : report.change_id;
  return junit_xml(fmt::format("kiln.unit {}", subject), suites);
}

nlohmann::json to_json(const UnitTierReport& report) {
  nlohmann::json cases = nlohmann::json::array();
  for (const UnitCaseResult& c : report.cases) {
    cases.push_back({{"test", c.test},
                     {"backend", c.backend},
                     {"passed", c.passed},
                     {"error", c.error},
                     {"detail", c.detail},
                     {"duration_ms", c.duration_ms}});
  }
  return {{"schema", "kiln.unit-tier/1"},     {"bundle_id", report.bundle_id},
          {"change_id", report.change_id},    {"selection", report.selection},
          {"backends", report.backends},      {"cases", cases},
          {"passed", report.passed()}};
}

SmokeAdmission admit_smoke(const Change& change, const std::optional<UnitTierReport>& unit_tier) {
  if (!is_hardware_path(change.layer)) {
    return {true, fmt::format("change {} is in the {} layer, off the hardware path: the unit-tier gate does not "
                              "apply",
                              change.id, to_string(change.layer))};
  }
  if (!unit_tier) {
    return {false, fmt::format("change {} has no unit-tier result; run `kiln unit --change {}` first", change.id,
                               change.id)};
  }
  if (unit_tier->change_id != change.id) {
    return {false, fmt::format("the unit-tier result is of change {}, not {}; run `kiln unit --change {}`",
                               unit_tier->change_id.empty() ? "(none)" : unit_tier->change_id, change.id, change.id)};
  }
  if (!unit_tier->passed()) {
    std::vector<std::string> failed;
    for (const UnitCaseResult& c : unit_tier->cases) {
      if (!c.passed) failed.push_back(fmt::format("{} on {}", c.test, c.backend));
    }
    return {false, fmt::format("change {} was rejected by the unit tier ({} failed): no chip is spent on it",
                               change.id, fmt::join(failed, ", "))};
  }
  return {true, fmt::format("change {} passed its unit tier ({} test runs)", change.id, unit_tier->cases.size())};
}

}  // namespace kiln::qualification

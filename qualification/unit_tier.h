// The unit tier (DESIGN.md: every change, on CPUs and simulators): kernel and compiler tests.
// Each test launches one kernel through the driver ABI on deterministic inputs and compares the
// result with its golden, the same kernel in fp32 (common/numerics/kernels.h with `reference`),
// within the tolerance of its dtype. It runs on every backend given (the simulated chip and the
// CPU reference); no chip of the pool is needed. Which tests a change runs, whether a change may
// go on to its hardware smoke and the report are decided here; loading the drivers is the
// shell's (shell/unit_runner.h). Pure.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "common/numerics/formats.h"
#include "common/numerics/kernels.h"
#include "common/time.h"
#include "records/change.h"

namespace kiln::qualification {

struct UnitTest {
  std::string name;                   // "gemm-bf16-tall"
  std::string kernel;                 // a kernel of numerics::kernel_names()
  numerics::DType dtype = numerics::DType::bf16;  // what the kernel computes in: its tolerance
  bool causal = false;
  bool transpose_b = false;
  std::vector<std::pair<int, int>> input_shapes;  // rows, cols of each input
  std::uint64_t seed = 1;             // of the inputs
  std::set<Layer> layers;             // the layers whose changes it tests
  std::set<std::string> components;   // the kernels (components) it exercises
};

// The registry: every kernel of the chip, alone, and the compiler's fused attention; a few
// seconds on one core in all.
const std::vector<UnitTest>& unit_tests();

// The launch of a test: its kernel and flags and its inputs, uniform in [-1, 1) from its seed.
numerics::KernelLaunch unit_test_launch(const UnitTest& test);

// A test runs for a change when it covers the change's layer and, when the change names
// components, shares one of them. `why` says what was selected, or why nothing was.
struct UnitSelection {
  std::vector<const UnitTest*> tests;
  std::string why;
};
UnitSelection select_unit_tests(const Change& change, const std::vector<UnitTest>& registry);
UnitSelection all_unit_tests(const std::vector<UnitTest>& registry);

// One test on one backend.
struct UnitCaseResult {
  std::string test;
  std::string backend;          // "sim", "cpu"
  bool passed = false;
  bool error = false;           // the kernel could not be run (a driver error), not a wrong result
  std::string detail;           // the comparison's verdict line, or the error
  DurationMs duration_ms = 0;
};

// Compares a backend's result with the golden: bf16 kernels with the bf16 rtol, fp8 ones with
// one E4M3 ulp (2^-3) as rtol, both with an atol from the golden's RMS (as the model checks do).
UnitCaseResult judge_unit_case(const UnitTest& test, std::string backend, const numerics::Matrix& golden,
                               const numerics::Matrix& actual);

struct UnitTierReport {
  std::string bundle_id;
  std::string change_id;        // "" when every test ran
  std::string selection;        // UnitSelection::why
  std::vector<std::string> backends;
  std::vector<UnitCaseResult> cases;
  bool passed() const;          // no case failed or errored; true when none ran
};

// "unit tier of change c12 on sim, cpu: 4 of 6 test runs passed" and a line per failure.
std::string unit_summary_text(const UnitTierReport& report);
// JUnit for CI: one testsuite per backend, one testcase per test (classname kiln.unit), with
// the writer the other tiers use (junit.h).
std::string unit_junit_xml(const UnitTierReport& report);
nlohmann::json to_json(const UnitTierReport& report);

// The gate before the hardware smoke: a change on the hardware path gets its smoke only after
// its unit tier passed, so no chip is spent on what a CPU rejects; one whose unit tier has not
// run is refused until it has. Changes off the hardware path are not held by this gate.
struct SmokeAdmission {
  bool admitted = false;
  std::string reason;
};
SmokeAdmission admit_smoke(const Change& change, const std::optional<UnitTierReport>& unit_tier);

}  // namespace kiln::qualification

// kiln's own verdict on a workload's outputs (docs/workloads.md, "Outputs kiln judges"): each
// output the result document lists is compared with the golden of the same name through
// common/numerics/compare.h, and that verdict is joined with the workload's own `passed`, kept
// as a second opinion: when the two disagree the job fails and says so. Pure: the tensors were
// read by the shell (agent/shell/job_outputs.h); a file that could not be read is an Error here.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "common/numerics/compare.h"
#include "common/numerics/tensor.h"

namespace kiln::agent::bench {

// One entry of the result document's `outputs`: a tensor the workload wrote, by the golden's
// name, in a file relative to its work dir (KILN_WORK_DIR).
struct DeclaredOutput {
  std::string name;
  std::string file;
  std::optional<numerics::DType> dtype;  // the format it was computed in; absent: the document's
};

// Checks the optional `outputs` array of a result document (absent or empty: none). A file
// outside the work dir (absolute, or with "..") is refused.
Result<std::vector<DeclaredOutput>> parse_declared_outputs(const nlohmann::json& document);

// How the golden says to compare one output: `tolerances.<name>` of a .golden.json
// ({"dtype", "rtol", "atol", "ulps", "saturate"}, each optional; rtol and atol together).
struct GoldenTolerance {
  std::optional<numerics::DType> dtype;
  std::optional<numerics::Tolerance> tolerance;
  bool saturate = false;
};
Result<GoldenTolerance> parse_golden_tolerance(const nlohmann::json& entry, const std::string& output);

// The format an output is compared in: the golden's say first (a workload cannot loosen its own
// check), then the entry's, then the document's `dtype`; absent: the actual file's own format.
std::optional<numerics::DType> compared_dtype(const GoldenTolerance& golden, const DeclaredOutput& output,
                                              std::optional<numerics::DType> document_dtype);

// The compare options in that format, with the golden's tolerance or the dtype's default.
numerics::CompareOptions compare_options_for(const GoldenTolerance& golden, numerics::DType dtype);

struct OutputUnderJudgement {
  DeclaredOutput declared;
  Result<numerics::Tensor> golden;  // an Error: no golden of this name, or it could not be read
  Result<numerics::Tensor> actual;  // an Error: the file is missing or not a tensor
  numerics::CompareOptions options;
};

struct OutputsVerdict {
  bool outputs_passed = false;  // kiln's comparison: every output within its golden's tolerance
  bool passed = false;          // the job's verdict: kiln's comparison and the workload's agree on pass
  std::string detail;           // why it failed; empty when it passed
  nlohmann::json document;      // the result's "kiln_verdict" object (docs/workloads.md)
};

inline constexpr std::size_t kWorstElementsKept = 5;

OutputsVerdict judge_outputs(const std::vector<OutputUnderJudgement>& outputs, bool workload_passed);

}  // namespace kiln::agent::bench

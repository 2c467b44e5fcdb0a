// Golden comparison: is a tensor a chip produced in agreement with a trusted reference, within
// the tolerance of the format it was computed in? Never bitwise (DESIGN.md principle 4).
//
// An element passes when |actual - expected| <= atol + rtol*|expected| + ulps*ulp(expected),
// where ulp is the spacing of the compared format at the expected value. Non-finite values are
// decided explicitly: +inf matches only +inf, -inf only -inf, NaN matches NaN only when
// equal_nan is set, and a NaN or infinity against a finite number is a mismatch.
//
// Defaults (torch.testing.assert_close): fp32 rtol 1.3e-6 atol 1e-5, fp16 1e-3 / 1e-5,
// bf16 1.6e-2 / 1e-5; fp64 1e-7 / 1e-7. fp8 (no default there) follows docs/numerics.md:
// the golden is first rounded to the same fp8 format with the same saturation, then one ulp
// of that format at the rounded value is allowed, plus atol = half an ulp at the golden's RMS.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "common/error.h"
#include "common/numerics/formats.h"
#include "common/numerics/tensor.h"

namespace kiln::numerics {

struct Tolerance {
  double rtol = 0.0;
  double atol = 0.0;
  double ulps = 0.0;  // allowance in units in the last place of the compared format
};

// The per-dtype default. For fp8 the atol part depends on the golden's scale and is filled in
// by compare(); this returns its fixed part {rtol 0, atol 0, ulps 1}.
Tolerance default_tolerance(DType dtype);

struct CompareOptions {
  DType dtype = DType::f32;                // the format the actual tensor was computed in
  std::optional<Tolerance> tolerance;      // overrides the default for dtype
  Saturation saturation = Saturation::non_saturating;  // fp8: how the golden is rounded
  int top_k = 0;                           // > 0: logits, last dimension is the vocabulary
  size_t max_reported = 10;                // worst elements kept in the report
  bool equal_nan = false;                  // as torch.testing.assert_close: NaN fails by default
};

struct Mismatch {
  size_t flat_index = 0;
  std::vector<int64_t> index;  // multi-index into the shape, C order
  double expected = 0.0;       // the golden value compared against (rounded, for fp8)
  double actual = 0.0;
  double abs_error = 0.0;      // |actual - expected|; inf or NaN when a value is not finite
  double allowed_error = 0.0;  // what the tolerance allowed at this element
};

struct CompareReport {
  DType dtype = DType::f32;
  std::vector<int64_t> shape;
  size_t element_count = 0;
  size_t mismatch_count = 0;
  size_t nonfinite_mismatch_count = 0;  // mismatches where a NaN or infinity is involved
  double max_abs_error = 0.0;           // over elements where both values are finite
  double max_rel_error = 0.0;           // same, over elements with a nonzero expected value
  double cosine_similarity = 1.0;       // same elements; 1 when both are all zero
  std::optional<double> topk_agreement; // mean over rows of |top-k(golden) ∩ top-k(actual)| / k
  int top_k = 0;
  std::vector<Mismatch> worst;          // largest excess over the allowed error first
  bool passed = true;                   // no element outside the tolerance
  Tolerance tolerance_used;
  bool golden_rounded = false;          // fp8: the golden was rounded to the format first
  Saturation saturation = Saturation::non_saturating;
  bool equal_nan = false;
};

// Shapes must be equal (an Error otherwise); dtypes of the two tensors may differ (a bf16
// result against an fp32 golden is the usual case).
Result<CompareReport> compare(const Tensor& golden, const Tensor& actual, const CompareOptions& options);

// Verdict line first, then the metrics, then the worst elements and by how much they exceed.
std::string format_report_text(const CompareReport& report);
// Its first line ("PASS: ..." or "FAIL: N of M elements ..."), and one worst element's line,
// each without the line break.
std::string report_verdict_line(const CompareReport& report);
std::string mismatch_text(const Mismatch& mismatch);

// Non-finite numbers appear as the strings "nan", "inf", "-inf".
nlohmann::json report_to_json(const CompareReport& report);

}  // namespace kiln::numerics

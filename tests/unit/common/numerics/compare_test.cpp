#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <limits>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "common/numerics/compare.h"
#include "common/numerics/compare_cli.h"
#include "common/numerics/tensor_io.h"
#include "tests/support/temp_dir.h"
#include "tests/support/text.h"

using namespace kiln::numerics;

namespace {

const double qnan = std::numeric_limits<double>::quiet_NaN();
const double inf = std::numeric_limits<double>::infinity();

Tensor vec(std::vector<double> values, DType dtype = DType::f32) {
  const int64_t n = static_cast<int64_t>(values.size());
  return Tensor{dtype, {n}, std::move(values)};
}

CompareReport run(const Tensor& golden, const Tensor& actual, CompareOptions options) {
  auto report = compare(golden, actual, options);
  REQUIRE(report.has_value());
  return *report;
}

CompareOptions for_dtype(DType dtype) {
  CompareOptions options;
  options.dtype = dtype;
  return options;
}

using kiln::testing::contains;

}  // namespace

TEST_CASE("default tolerances are torch.testing.assert_close's") {
  CHECK(default_tolerance(DType::f32).rtol == 1.3e-6);
  CHECK(default_tolerance(DType::f32).atol == 1e-5);
  CHECK(default_tolerance(DType::f16).rtol == 1e-3);
  CHECK(default_tolerance(DType::f16).atol == 1e-5);
  CHECK(default_tolerance(DType::bf16).rtol == 1.6e-2);
  CHECK(default_tolerance(DType::bf16).atol == 1e-5);
  CHECK(default_tolerance(DType::f8_e4m3).ulps == 1.0);
}

TEST_CASE("fp32: |a-e| <= atol + rtol*|e|, inclusive at the edge") {
  const Tensor golden = vec({1.0, 100.0, 0.0});
  auto report = run(golden, vec({1.0 + 1e-5, 100.0 + 1.3e-4, 1e-5}), for_dtype(DType::f32));
  CHECK(report.passed);
  CHECK(report.mismatch_count == 0);
  CHECK(report.element_count == 3);

  report = run(golden, vec({1.0, 100.0, 2e-5}), for_dtype(DType::f32));
  CHECK_FALSE(report.passed);
  REQUIRE(report.mismatch_count == 1);
  REQUIRE(report.worst.size() == 1);
  CHECK(report.worst[0].flat_index == 2);
  CHECK(report.worst[0].allowed_error == doctest::Approx(1e-5));
  CHECK(report.worst[0].abs_error == doctest::Approx(2e-5));
  CHECK(report.max_abs_error == doctest::Approx(2e-5));
  CHECK(report.max_rel_error == 0.0);  // the only error is at expected 0, which has no relative error
}

TEST_CASE("bf16: hand-computed errors, cosine similarity and the failing element") {
  const Tensor golden = vec({1.0, -2.0, 0.5, 4.0});
  const Tensor actual = vec({1.015, -2.04, 0.5, 4.0}, DType::bf16);
  auto report = run(golden, actual, for_dtype(DType::bf16));
  // allowed at 1.0: 1e-5 + 0.016 = 0.01601 >= 0.015; at -2.0: 1e-5 + 0.032 = 0.03201 < 0.04
  CHECK_FALSE(report.passed);
  CHECK(report.mismatch_count == 1);
  REQUIRE(report.worst.size() == 1);
  CHECK(report.worst[0].index == std::vector<int64_t>{1});
  CHECK(report.worst[0].expected == -2.0);
  CHECK(report.worst[0].actual == -2.04);
  CHECK(report.worst[0].allowed_error == doctest::Approx(0.03201));
  CHECK(report.max_abs_error == doctest::Approx(0.04));
  CHECK(report.max_rel_error == doctest::Approx(0.02));
  // 21.345 / sqrt(21.25 * 21.441825)
  CHECK(report.cosine_similarity == doctest::Approx(0.9999673461335374).epsilon(1e-12));
  CHECK(report.tolerance_used.rtol == 1.6e-2);
}

TEST_CASE("explicit tolerance overrides the default") {
  CompareOptions options = for_dtype(DType::bf16);
  options.tolerance = Tolerance{0.0, 0.05};
  CHECK(run(vec({1.0, -2.0}), vec({1.015, -2.04}), options).passed);
  options.tolerance = Tolerance{0.0, 0.01};
  CHECK(run(vec({1.0, -2.0}), vec({1.015, -2.04}), options).mismatch_count == 2);
  options.tolerance = Tolerance{-0.1, 0.01};
  CHECK_FALSE(compare(vec({1.0}), vec({1.0}), options).has_value());
}

TEST_CASE("NaN and infinities are decided explicitly") {
  const Tensor golden = vec({qnan, inf, -inf, 1.0, qnan, 2.0});
  const Tensor actual = vec({qnan, inf, inf, inf, 1.0, 2.0});
  auto report = run(golden, actual, for_dtype(DType::f32));
  // NaN vs NaN (equal_nan off), -inf vs +inf, 1 vs inf, NaN vs 1 fail; +inf vs +inf, 2 vs 2 match.
  CHECK(report.mismatch_count == 4);
  CHECK(report.nonfinite_mismatch_count == 4);
  CHECK(report.max_abs_error == 0.0);  // only finite pairs count
  CHECK(report.cosine_similarity == doctest::Approx(1.0));
  CompareOptions equal_nan = for_dtype(DType::f32);
  equal_nan.equal_nan = true;
  report = run(golden, actual, equal_nan);
  CHECK(report.mismatch_count == 3);
  const std::string text = format_report_text(report);
  CHECK(contains(text, "NaN against a number"));
  CHECK(contains(text, "infinity matches only the same infinity"));
  const auto json = report_to_json(report);
  bool saw_nan_string = false;
  for (const auto& m : json["worst"]) {
    saw_nan_string = saw_nan_string || m["expected"] == "nan" || m["actual"] == "nan";
  }
  CHECK(saw_nan_string);
  CHECK(json.dump().find("null") == std::string::npos);
}

TEST_CASE("shape and size mismatches are errors, not reports") {
  auto shape = compare(vec({1.0, 2.0}), Tensor{DType::f32, {2, 1}, {1.0, 2.0}}, for_dtype(DType::f32));
  REQUIRE_FALSE(shape.has_value());
  CHECK(contains(shape.error().message, "golden [2], actual [2, 1]"));
  auto broken = compare(Tensor{DType::f32, {3}, {1.0}}, Tensor{DType::f32, {3}, {1.0}}, for_dtype(DType::f32));
  CHECK_FALSE(broken.has_value());
}

TEST_CASE("worst elements: multi-index, ordered by excess, bounded") {
  Tensor golden{DType::f32, {2, 3}, {0, 0, 0, 0, 0, 0}};
  Tensor actual{DType::f32, {2, 3}, {0, 1, 0, 0, 5, 3}};
  CompareOptions options = for_dtype(DType::f32);
  options.max_reported = 2;
  auto report = run(golden, actual, options);
  CHECK(report.mismatch_count == 3);
  REQUIRE(report.worst.size() == 2);
  CHECK(report.worst[0].index == std::vector<int64_t>{1, 1});
  CHECK(report.worst[0].actual == 5.0);
  CHECK(report.worst[1].index == std::vector<int64_t>{1, 2});
  const std::string text = format_report_text(report);
  CHECK(text.rfind("FAIL: 3 of 6 elements", 0) == 0);  // verdict first
  CHECK(contains(text, "[1, 1] expected 0, actual 5"));
  CHECK(contains(text, "exceeds by 4.99999"));
  CHECK(contains(text, "... and 1 more"));
  const auto json = report_to_json(report);
  CHECK(json["passed"] == false);
  CHECK(json["mismatch_count"] == 3);
  CHECK(json["worst"][0]["index"] == nlohmann::json::array({1, 1}));
  CHECK(json["worst"][0]["flat_index"] == 4);
}

TEST_CASE("a passing report says so first") {
  auto report = run(vec({1.0}), vec({1.0}), for_dtype(DType::f32));
  CHECK(format_report_text(report).rfind("PASS: all 1 elements within tolerance for fp32", 0) == 0);
  CHECK(report_to_json(report)["passed"] == true);
}

TEST_CASE("top-k agreement over the last dimension") {
  Tensor golden{DType::f32, {2, 5}, {0.1, 0.9, 0.5, 0.3, 0.7, 5, 4, 3, 2, 1}};
  Tensor actual{DType::f32, {2, 5}, {0.1, 0.9, 0.8, 0.3, 0.2, 5, 4, 3, 2, 1}};
  CompareOptions options = for_dtype(DType::f32);
  options.top_k = 2;
  // Row 0: {1, 4} vs {1, 2} share 1 of 2; row 1: identical.
  auto report = run(golden, actual, options);
  REQUIRE(report.topk_agreement.has_value());
  CHECK(*report.topk_agreement == doctest::Approx(0.75));
  CHECK(contains(format_report_text(report), "top-2 agreement"));
  options.top_k = 1;
  CHECK(*run(golden, actual, options).topk_agreement == 1.0);
  options.top_k = 6;
  CHECK_FALSE(compare(golden, actual, options).has_value());
  options.top_k = 0;
  CHECK_FALSE(run(golden, actual, options).topk_agreement.has_value());
}

TEST_CASE("fp8: golden rounded to the format, one ulp plus half an ulp at the RMS") {
  // E4M3 rounding of the golden: 0.9 -> 0.875, 1.1 -> 1.125, -1 -> -1, 0.3 -> 0.3125.
  // RMS of those is 0.884, in [0.5, 1) where the E4M3 ulp is 1/16: atol = 1/32.
  const Tensor golden = vec({0.9, 1.1, -1.0, 0.3});
  auto report = run(golden, vec({0.875, 1.125, -1.0, 0.3125}, DType::f8_e4m3), for_dtype(DType::f8_e4m3));
  CHECK(report.passed);
  CHECK(report.golden_rounded);
  CHECK(report.max_abs_error == 0.0);  // the exact fp8 image of the golden has no error
  CHECK(report.tolerance_used.atol == 0.03125);
  CHECK(report.tolerance_used.ulps == 1.0);
  // allowed: 0.875 -> 1/32 + 1/16; 1.125 and -1 -> 1/32 + 1/8; 0.3125 -> 1/32 + 1/32
  CHECK(run(golden, vec({0.9375, 1.25, -1.125, 0.375}), for_dtype(DType::f8_e4m3)).passed);
  report = run(golden, vec({1.0, 1.125, -1.0, 0.4375}), for_dtype(DType::f8_e4m3));
  CHECK(report.mismatch_count == 2);
  REQUIRE(report.worst.size() == 2);
  CHECK(report.worst[0].flat_index == 3);  // exceeds 0.0625 by 0.0625
  CHECK(report.worst[0].expected == 0.3125);
  CHECK(report.worst[0].allowed_error == 0.0625);
  CHECK(report.worst[1].flat_index == 0);  // exceeds 0.09375 by 0.03125
  CHECK(contains(format_report_text(report), "golden rounded to fp8_e4m3 non-saturating"));
}

TEST_CASE("fp8: the golden overflows the way the chip does") {
  const Tensor golden = vec({500.0, 1.0});
  const Tensor actual = vec({448.0, 1.0}, DType::f8_e4m3);
  CompareOptions options = for_dtype(DType::f8_e4m3);
  options.saturation = Saturation::saturating;
  CHECK(run(golden, actual, options).passed);
  options.saturation = Saturation::non_saturating;  // golden becomes NaN: 448 does not match it
  auto report = run(golden, actual, options);
  CHECK(report.mismatch_count == 1);
  CHECK(std::isnan(report.worst[0].expected));
  options = for_dtype(DType::f8_e5m2);  // E5M2 overflows to inf, which the actual must reproduce
  CHECK(run(vec({70000.0}), vec({inf}, DType::f8_e5m2), options).passed);
  CHECK_FALSE(run(vec({70000.0}), vec({57344.0}, DType::f8_e5m2), options).passed);
}

TEST_CASE("compare-tensors: exit codes, text and JSON") {
  const kiln::testing::TempDir dir("kiln-numerics-cli");
  const std::string golden = (dir / "golden.npy").string();
  const std::string close = (dir / "close.safetensors").string();
  const std::string far = (dir / "far.npy").string();
  const std::string raw = (dir / "raw_bf16.npy").string();
  REQUIRE(write_npy_file(golden, vec({1.0, -2.0, 0.5, 4.0})).has_value());
  REQUIRE(write_safetensors_file(close, {{"out", vec({1.0, -2.0, 0.5, 4.0}, DType::bf16)}}).has_value());
  REQUIRE(write_npy_file(far, vec({1.0, -2.5, 0.5, 4.0})).has_value());
  REQUIRE(write_npy_file(raw, vec({1.0, -2.0, 0.5, 4.0}, DType::bf16)).has_value());

  std::ostringstream out;
  std::ostringstream err;
  CompareTensorsArgs args;
  args.golden_path = golden;
  args.actual_path = close;
  CHECK(run_compare_tensors(args, out, err) == compare_exit_pass);
  CHECK(out.str().rfind("PASS", 0) == 0);

  args.actual_path = far;
  args.dtype = "bf16";
  args.json = true;
  out.str("");
  CHECK(run_compare_tensors(args, out, err) == compare_exit_mismatch);
  const auto json = nlohmann::json::parse(out.str());
  CHECK(json["passed"] == false);
  CHECK(json["dtype"] == "bf16");
  CHECK(json["worst"][0]["flat_index"] == 1);

  args.json = false;
  args.actual_path = raw;
  args.dtype = "";
  err.str("");
  CHECK(run_compare_tensors(args, out, err) == compare_exit_input_error);
  CHECK(contains(err.str(), "--dtype bf16"));
  args.dtype = "bf16";
  CHECK(run_compare_tensors(args, out, err) == compare_exit_pass);

  args.rtol = 0.1;
  err.str("");
  CHECK(run_compare_tensors(args, out, err) == compare_exit_input_error);
  CHECK(contains(err.str(), "--rtol and --atol"));
  args.atol = 0.0;
  CHECK(run_compare_tensors(args, out, err) == compare_exit_pass);

  args.actual_path = (dir / "missing.npy").string();
  err.str("");
  CHECK(run_compare_tensors(args, out, err) == compare_exit_input_error);
  CHECK(contains(err.str(), "missing.npy"));

  args.actual_path = close;
  args.dtype = "int4";
  CHECK(run_compare_tensors(args, out, err) == compare_exit_input_error);
}

// kiln's own verdict on a workload's outputs: the listed outputs compared with their goldens by
// common/numerics/compare.h, joined with the workload's `passed` as a second opinion.
#include <doctest/doctest.h>

#include "agent/bench/outputs.h"

namespace b = kiln::agent::bench;
namespace n = kiln::numerics;
using kiln::Errc;
using nlohmann::json;

namespace {

n::Tensor tensor(n::DType dtype, std::vector<double> values) {
  return n::Tensor{dtype, {static_cast<std::int64_t>(values.size())}, std::move(values)};
}

b::OutputUnderJudgement judged(const std::string& name, n::Tensor golden, n::Tensor actual, n::DType as) {
  return {b::DeclaredOutput{name, "out/" + name + ".npy", std::nullopt}, std::move(golden), std::move(actual),
          b::compare_options_for({}, as)};
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("outputs: the result document's list is read, and a file outside the work dir is refused") {
  auto none = b::parse_declared_outputs(json{{"passed", true}});
  REQUIRE(none);
  CHECK(none->empty());
  auto listed = b::parse_declared_outputs(
      json{{"outputs", {{{"name", "logits"}, {"file", "out/logits.npy"}, {"dtype", "bf16"}}, {{"name", "h"}, {"file", "h.safetensors"}}}}});
  REQUIRE(listed);
  REQUIRE(listed->size() == 2);
  CHECK(listed->at(0).name == "logits");
  CHECK(listed->at(0).dtype == n::DType::bf16);
  CHECK_FALSE(listed->at(1).dtype.has_value());
  for (const char* file : {"/etc/passwd", "../x.npy", "out/../../x.npy"}) {
    auto escaped = b::parse_declared_outputs(json{{"outputs", {{{"name", "x"}, {"file", file}}}}});
    REQUIRE_FALSE(escaped);
    CHECK(contains(escaped.error().message, "inside the job's work dir"));
  }
  CHECK_FALSE(b::parse_declared_outputs(json{{"outputs", {{{"name", "x"}}}}}));
  CHECK_FALSE(b::parse_declared_outputs(json{{"outputs", {{{"name", "x"}, {"file", "a"}}, {{"name", "x"}, {"file", "b"}}}}}));
  CHECK_FALSE(b::parse_declared_outputs(json{{"outputs", {{{"name", "x"}, {"file", "a"}, {"dtype", "int7"}}}}}));
}

TEST_CASE("outputs: the golden's dtype and tolerance rule over what the workload says") {
  auto golden = b::parse_golden_tolerance(json{{"dtype", "fp8_e4m3"}, {"rtol", 0.1}, {"atol", 0.01}, {"saturate", true}}, "y");
  REQUIRE(golden);
  const b::DeclaredOutput says_fp32{"y", "y.npy", n::DType::f32};
  CHECK(b::compared_dtype(*golden, says_fp32, n::DType::bf16) == n::DType::f8_e4m3);
  CHECK(b::compared_dtype({}, says_fp32, n::DType::bf16) == n::DType::f32);
  CHECK(b::compared_dtype({}, {"y", "y.npy", std::nullopt}, n::DType::bf16) == n::DType::bf16);
  const auto options = b::compare_options_for(*golden, n::DType::f8_e4m3);
  REQUIRE(options.tolerance);
  CHECK(options.tolerance->rtol == 0.1);
  CHECK(options.saturation == n::Saturation::saturating);
  CHECK_FALSE(b::compare_options_for({}, n::DType::bf16).tolerance.has_value());
  CHECK_FALSE(b::parse_golden_tolerance(json{{"rtol", 0.1}}, "y"));
  CHECK_FALSE(b::parse_golden_tolerance(json{{"rtol", -1}, {"atol", 0}}, "y"));
  CHECK_FALSE(b::parse_golden_tolerance(json{{"dtype", "int7"}}, "y"));
}

TEST_CASE("outputs: within the bf16 tolerance both agree and the job passes") {
  // 1.0 and 1.0078125 are neighbouring bf16 values: one bf16 rounding apart.
  const auto verdict = b::judge_outputs(
      {judged("logits", tensor(n::DType::f32, {1.0, 2.0}), tensor(n::DType::bf16, {1.0078125, 2.0}), n::DType::bf16)},
      true);
  CHECK(verdict.passed);
  CHECK(verdict.outputs_passed);
  CHECK(verdict.detail.empty());
  CHECK(verdict.document.at("agree") == true);
  CHECK(verdict.document.at("outputs").at(0).at("report").at("dtype") == "bf16");
}

TEST_CASE("outputs: the workload says passed, kiln's comparison fails: the job fails naming the worst element") {
  const auto verdict = b::judge_outputs(
      {judged("logits", tensor(n::DType::f32, {1.0, 2.0, 3.0}), tensor(n::DType::f32, {1.0, 2.5, 3.0}), n::DType::f32)},
      true);
  CHECK_FALSE(verdict.passed);
  CHECK(verdict.document.at("agree") == false);
  CHECK(contains(verdict.detail, "the workload says passed but kiln's comparison fails; the two disagree"));
  CHECK(contains(verdict.detail, "output 'logits': FAIL: 1 of 3 elements"));
  CHECK(contains(verdict.detail, "worst element [1] expected 2, actual 2.5"));
  const json& worst = verdict.document.at("outputs").at(0).at("report").at("worst").at(0);
  CHECK(worst.at("index") == json::array({1}));
  CHECK(worst.at("actual") == 2.5);
}

TEST_CASE("outputs: the workload says failed, kiln's comparison passes: the job fails, saying they disagree") {
  const auto verdict = b::judge_outputs(
      {judged("y", tensor(n::DType::f32, {1.0}), tensor(n::DType::f32, {1.0}), n::DType::f32)}, false);
  CHECK_FALSE(verdict.passed);
  CHECK(verdict.outputs_passed);
  CHECK(contains(verdict.detail, "the workload says its outputs failed but kiln's comparison passes"));
}

TEST_CASE("outputs: fp8 outputs are compared in fp8, the golden rounded first") {
  // 1.1 rounds to 1.125 in E4M3: the chip's exact fp8 answer passes, one that is an ulp off fails.
  const auto right = b::judge_outputs(
      {judged("y", tensor(n::DType::f32, {1.1}), tensor(n::DType::f8_e4m3, {1.125}), n::DType::f8_e4m3)}, true);
  CHECK(right.passed);
  const auto wrong = b::judge_outputs(
      {judged("y", tensor(n::DType::f32, {1.1}), tensor(n::DType::f8_e4m3, {1.5}), n::DType::f8_e4m3)}, true);
  CHECK_FALSE(wrong.passed);
}

TEST_CASE("outputs: a missing output, a missing golden and a shape mismatch fail, saying which and what to do") {
  b::OutputUnderJudgement missing = judged("a", tensor(n::DType::f32, {1.0}), {}, n::DType::f32);
  missing.actual = kiln::fail(Errc::not_found, "cannot open out/a.npy");
  b::OutputUnderJudgement no_golden = judged("b", {}, tensor(n::DType::f32, {1.0}), n::DType::f32);
  no_golden.golden = kiln::fail(Errc::not_found, "no artifact b.npy");
  const auto shape = judged("c", tensor(n::DType::f32, {1.0, 2.0}), tensor(n::DType::f32, {1.0}), n::DType::f32);
  const auto verdict = b::judge_outputs({missing, no_golden, shape}, false);
  CHECK_FALSE(verdict.passed);
  CHECK(verdict.document.at("agree") == true);
  CHECK(contains(verdict.detail, "kiln's comparison fails: output 'a' (out/a.npy) cannot be judged: cannot open"));
  CHECK(contains(verdict.detail, "write it where the result document says"));
  CHECK(contains(verdict.detail, "output 'b' has no golden to be judged against: no artifact b.npy"));
  CHECK(contains(verdict.detail, "output 'c' does not match its golden"));
  CHECK(contains(verdict.detail, "write it in the golden's shape"));
}

// Whether a rerun reproduced its original: correctness verdicts must agree, and the throughputs
// (over each job's own baseline when both measured one) must be the same within the gate's
// min_effect; anything the gate cannot decide is inconclusive, never reproduced.
#include <doctest/doctest.h>

#include <vector>

#include <nlohmann/json.hpp>

#include "common/stats/rng.h"
#include "qualification/reproducibility.h"
#include "qualification/run_types.h"

using namespace kiln;
namespace q = kiln::qualification;

namespace {

// `count` throughputs around `level` with 1% noise, the sim's run-to-run noise.
std::vector<double> samples(double level, std::uint64_t seed, int count = 10) {
  stats::Rng rng(seed);
  std::vector<double> out;
  for (int i = 0; i < count; ++i) out.push_back(level * (1.0 + 0.01 * rng.normal()));
  return out;
}

q::JobResult measured(double candidate, double baseline, std::uint64_t seed, int count = 10) {
  q::JobResult result;
  result.candidate_samples = samples(candidate, seed, count);
  result.baseline_samples = samples(baseline, seed + 1000, count);
  return result;
}

q::ReproductionCheck check(const q::JobResult& original, const q::JobResult& rerun) {
  return q::check_reproduction(original, rerun, stats::PerfGateOptions{}, 7);
}

}  // namespace

TEST_CASE("the very same throughputs (a deterministic stack on the same chip) are reproduced") {
  const auto original = measured(100, 100, 1);
  const auto verdict = check(original, original);
  CHECK(verdict.verdict == q::Reproduction::reproduced);
  CHECK(verdict.gate.empty());
  CHECK(verdict.detail == "correct both times; the very same 10 throughputs");
}

TEST_CASE("the same job measured again with fresh noise is reproduced when 30 samples bound the interval") {
  const auto verdict = check(measured(100, 100, 1, 30), measured(100, 100, 2, 30));
  INFO(verdict.detail);
  CHECK(verdict.verdict == q::Reproduction::reproduced);
  CHECK(verdict.gate.empty());
  REQUIRE(verdict.performance);
  CHECK(verdict.performance->shift.relative == doctest::Approx(0).epsilon(0.01));
  CHECK(verdict.detail.find("correct both times; performance the same within 2%") != std::string::npos);
}

TEST_CASE("a rerun whose outputs are wrong where the original's were right is not reproduced, by correctness") {
  const auto original = measured(100, 100, 1);
  auto rerun = original;
  rerun.correct = false;
  rerun.correctness_detail = "output: 12 elements outside tolerance";
  const auto verdict = check(original, rerun);
  CHECK(verdict.verdict == q::Reproduction::not_reproduced);
  CHECK(verdict.gate == "correctness");
  CHECK(verdict.detail.find("12 elements outside tolerance") != std::string::npos);
}

TEST_CASE("a failure that fails again is reproduced") {
  auto original = measured(100, 100, 1, 30);
  original.correct = false;
  auto rerun = measured(100, 100, 2, 30);
  rerun.correct = false;
  CHECK(check(original, rerun).verdict == q::Reproduction::reproduced);
}

TEST_CASE("a rerun 5% slower against its own baseline is not reproduced, by performance") {
  const auto verdict = check(measured(100, 100, 1), measured(95, 100, 2));
  CHECK(verdict.verdict == q::Reproduction::not_reproduced);
  CHECK(verdict.gate == "performance");
  REQUIRE(verdict.performance);
  CHECK(verdict.performance->shift.relative == doctest::Approx(-0.05).epsilon(0.2));
  CHECK(verdict.detail.find("slower") != std::string::npos);
}

TEST_CASE("a rerun on a chip 4% slower is reproduced: its baseline ran on the same slower chip") {
  const auto verdict = check(measured(100, 100, 1, 30), measured(96, 96, 2, 30));
  CHECK(verdict.verdict == q::Reproduction::reproduced);
  CHECK(verdict.detail.find("relative to its baseline") != std::string::npos);
}

TEST_CASE("without baselines the throughputs are compared as they are") {
  auto original = measured(100, 100, 1, 30);
  auto rerun = measured(96, 96, 2, 30);
  original.baseline_samples.clear();
  rerun.baseline_samples.clear();
  CHECK(check(original, rerun).verdict == q::Reproduction::not_reproduced);
}

TEST_CASE("too few samples to bound the 99.9% interval is inconclusive, not reproduced") {
  const auto verdict = check(measured(100, 100, 1, 5), measured(100, 100, 2, 5));
  CHECK(verdict.verdict == q::Reproduction::inconclusive);
  CHECK(verdict.gate.empty());
  CHECK(verdict.detail.find("neither the same nor different within 2%") != std::string::npos);
}

TEST_CASE("a rerun that did not run, or samples on one side only, is inconclusive") {
  const auto original = measured(100, 100, 1);
  q::JobResult lost;
  lost.ran = false;
  lost.detail = "job 9 lost: node n02 went silent";
  auto verdict = check(original, lost);
  CHECK(verdict.verdict == q::Reproduction::inconclusive);
  CHECK(verdict.detail.find("node n02 went silent") != std::string::npos);

  auto unmeasured = original;
  unmeasured.candidate_samples.clear();
  CHECK(check(original, unmeasured).verdict == q::Reproduction::inconclusive);
}

TEST_CASE("correctness-only jobs that agree are reproduced") {
  q::JobResult original;
  CHECK(check(original, original).verdict == q::Reproduction::reproduced);
}

TEST_CASE("the check's JSON names the verdict, the gate and the comparison") {
  const auto json = q::to_json(check(measured(100, 100, 1), measured(95, 100, 2)));
  CHECK(json.at("verdict") == "not_reproduced");
  CHECK(json.at("gate") == "performance");
  CHECK(json.at("performance").at("n_candidate") == 10);
}

TEST_CASE("a job with no kiln result is held to its outcome: exit and result document") {
  const q::JobEnding succeeded{"succeeded", 0, R"({"tokens": 512})"};
  const auto same = q::check_outcome_reproduction(succeeded, succeeded);
  CHECK(same.verdict == q::Reproduction::reproduced);
  CHECK(same.detail == "both succeeded with exit code 0, with the very same result document");

  const auto failed = q::check_outcome_reproduction(succeeded, q::JobEnding{"failed", 3, ""});
  CHECK(failed.verdict == q::Reproduction::not_reproduced);
  CHECK(failed.gate == "outcome");
  CHECK(failed.detail == "the original succeeded with exit code 0, the rerun failed with exit code 3");
  CHECK(q::check_outcome_reproduction(q::JobEnding{"failed", 3, ""}, q::JobEnding{"failed", 4, ""}).verdict ==
        q::Reproduction::not_reproduced);

  const auto differs = q::check_outcome_reproduction(succeeded, q::JobEnding{"succeeded", 0, R"({"tokens": 511})"});
  CHECK(differs.verdict == q::Reproduction::inconclusive);
  CHECK(differs.gate.empty());
}

#include "qualification/reproducibility.h"

#include <algorithm>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "qualification/run_evidence.h"
#include "qualification/run_types.h"

namespace kiln::qualification {

namespace {

double median(std::vector<double> values) {
  const std::size_t middle = values.size() / 2;
  std::nth_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(middle), values.end());
  const double upper = values[middle];
  if (values.size() % 2 == 1) return upper;
  return (upper + *std::max_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(middle))) / 2;
}

// A job's throughputs over its own baseline's median when both jobs measured one: the two jobs
// may run on chips of different speed, and each job's baseline ran on its own chips.
std::vector<double> comparable_samples(const JobResult& result, bool relative) {
  if (!relative) return result.candidate_samples;
  const double reference = median(result.baseline_samples);
  std::vector<double> ratios;
  ratios.reserve(result.candidate_samples.size());
  for (double sample : result.candidate_samples) ratios.push_back(sample / reference);
  return ratios;
}

std::string correctness_text(const JobResult& result) {
  return result.correct ? "correct" : "incorrect (" + result.correctness_detail + ")";
}

}  // namespace

ReproductionCheck check_reproduction(const JobResult& original, const JobResult& rerun,
                                     const stats::PerfGateOptions& options, std::uint64_t seed) {
  ReproductionCheck check;
  if (!original.ran || !rerun.ran) {
    check.detail = !original.ran ? "the original has no result to compare: " + original.detail
                                 : "the rerun did not run: " + rerun.detail;
    return check;
  }
  if (original.correct != rerun.correct) {
    check.verdict = Reproduction::not_reproduced;
    check.gate = "correctness";
    check.detail = fmt::format("the original was {}, the rerun {}", correctness_text(original),
                               correctness_text(rerun));
    return check;
  }
  const std::string correctness = original.correct ? "correct both times" : "incorrect both times";
  const bool original_measured = !original.candidate_samples.empty();
  const bool rerun_measured = !rerun.candidate_samples.empty();
  if (!original_measured && !rerun_measured) {
    check.verdict = Reproduction::reproduced;
    check.detail = correctness + "; no performance samples to compare";
    return check;
  }
  if (original_measured != rerun_measured) {
    check.detail = fmt::format("{}; only the {} has performance samples (the other's were all taken while a chip "
                               "throttled, or it measured none)",
                               correctness, original_measured ? "original" : "rerun");
    return check;
  }
  // A deterministic stack on the same chip gives the very same numbers; no interval is needed for
  // that, and the rank interval of two equal sets is as wide as their spread.
  if (original.candidate_samples == rerun.candidate_samples && original.baseline_samples == rerun.baseline_samples) {
    check.verdict = Reproduction::reproduced;
    check.detail = fmt::format("{}; the very same {} throughputs", correctness, original.candidate_samples.size());
    return check;
  }
  const bool relative = !original.baseline_samples.empty() && !rerun.baseline_samples.empty();
  const auto before = comparable_samples(original, relative);
  const auto after = comparable_samples(rerun, relative);
  auto comparison = stats::compare(before, after, options, seed);
  if (!comparison) {
    check.detail = fmt::format("{}; the samples could not be compared: {}", correctness, comparison.error().message);
    return check;
  }
  const stats::Verdict verdict = stats::decide(*comparison, comparison->test.p_value, options.alpha, options);
  const std::string figures = fmt::format("{} the original: {}", relative ? "relative to its baseline, rerun against"
                                                                         : "rerun against",
                                          describe_comparison(*comparison, comparison->test.p_value));
  check.performance = *comparison;
  switch (verdict) {
    case stats::Verdict::no_change:
      check.verdict = Reproduction::reproduced;
      check.detail = fmt::format("{}; performance the same within {}: {}", correctness, fmt::format("{:g}%", options.min_effect * 100),
                                 figures);
      break;
    case stats::Verdict::regression:
    case stats::Verdict::improvement:
      check.verdict = Reproduction::not_reproduced;
      check.gate = "performance";
      check.detail = fmt::format("{}; performance {}: {}", correctness,
                                 verdict == stats::Verdict::regression ? "slower" : "faster", figures);
      break;
    case stats::Verdict::inconclusive:
      check.detail = fmt::format("{}; performance neither the same nor different within {}: {}", correctness,
                                 fmt::format("{:g}%", options.min_effect * 100), figures);
      break;
  }
  return check;
}

ReproductionCheck check_outcome_reproduction(const JobEnding& original, const JobEnding& rerun) {
  ReproductionCheck check;
  const auto outcome = [](const JobEnding& ending) {
    return fmt::format("{} with exit code {}", ending.state, ending.exit_code);
  };
  if (original.state != rerun.state || original.exit_code != rerun.exit_code) {
    check.verdict = Reproduction::not_reproduced;
    check.gate = "outcome";
    check.detail = fmt::format("the original {}, the rerun {}", outcome(original), outcome(rerun));
  } else if (original.result == rerun.result) {
    check.verdict = Reproduction::reproduced;
    check.detail = fmt::format("both {}, with the very same result document{}", outcome(original),
                               original.result.empty() ? " (none)" : "");
  } else {
    check.detail = fmt::format("both {}, but their result documents differ, and they are no kiln benchmark or "
                               "workload result that a gate could judge: compare them yourself",
                               outcome(original));
  }
  return check;
}

nlohmann::json to_json(const ReproductionCheck& check) {
  return {{"verdict", to_string(check.verdict)},
          {"gate", check.gate},
          {"detail", check.detail},
          {"performance", check.performance ? to_json(*check.performance) : nlohmann::json(nullptr)}};
}

}  // namespace kiln::qualification

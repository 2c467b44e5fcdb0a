// The sequential performance gate: a group-sequential one-sided test of "the candidate is worse
// by min_effect" whose repeats per side and number of looks come from the model's measured noise
// (noise.h). Designed so that a sustained drop of min_effect is reported with probability `power`
// while an unchanged model is reported with probability at most `false_alarm`, per model and run.
//
// The statistic at look k is the standardized Mann-Whitney statistic of all samples so far,
// oriented so that positive is worse. Efficacy bounds come from Hwang-Shih-DeCani alpha spending
// (gamma -4, close to O'Brien-Fleming: hard to cross early, nearly the fixed test's bound at the
// end); futility bounds from beta spending under the drop (gamma -2), non-binding, so the
// false-alarm bound holds whether or not a futility stop is taken; the maximum sample size is the
// one at which the two bounds meet at the last look (gsDesign's test.type 4). A clear regression
// crosses the efficacy bound early, an unchanged model the futility bound; the rest go on.
// Bounds are computed once per look count by numerical integration (Armitage, McPherson and Rowe
// recursion; Jennison and Turnbull ch. 19) and memoised per thread.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "common/enum_names.h"
#include "common/error.h"
#include "common/stats/noise.h"

namespace kiln::stats {

struct MannWhitneyResult;

struct SequentialOptions {
  double false_alarm = 0.001;  // per model and run: an unchanged model reported as a regression
  // A sustained drop of min_effect reported as a regression. Designed for 99.5% so that the 99%
  // target holds after the noise estimate's error and the rank test's approximations
  // (kiln-bench-detection, docs/qualification.md).
  double power = 0.995;
  double min_effect = 0.02;    // relative drop the power is for
  int max_looks = 5;           // the first measurement and up to max_looks - 1 extra rounds
  int min_repeats_per_look = 5;   // fewer is mostly warmup per process, and too few for ranks
  int max_repeats_per_side = 400; // the most one model may cost; beyond it the power target is given up
  double efficacy_spending_gamma = -4;  // Hwang-Shih-DeCani
  double futility_spending_gamma = -2;
};

Status validate(const SequentialOptions& options);

// The design for `looks` equal looks on the z scale, independent of the noise: the noise only
// scales the sample size.
struct SequentialDesign {
  int looks = 1;
  std::vector<double> efficacy_z;  // look k: regression when z >= efficacy_z[k]
  std::vector<double> futility_z;  // look k: stop without a regression when z < futility_z[k]; the last equals efficacy_z
  double inflation = 1;            // maximum sample size over the fixed-sample test's at the same error rates
  double expected_fraction_no_change = 1;    // expected sample size over the maximum, nothing changed
  double expected_fraction_at_min_effect = 1;  // ... with a drop of exactly min_effect
  double false_alarm_with_futility = 0;  // the false-alarm rate when futility stops are taken (<= false_alarm)
};

// Memoised per thread and per options. Asserts valid options and 1 <= looks <= 20.
const SequentialDesign& sequential_design(int looks, const SequentialOptions& options);

// The oracle: repeats per side a one-sided z-test needs when it knows the noise (normal, standard
// deviation relative_sigma of one repeat): n = 2 * ((z_false_alarm + z_power) * sigma / min_effect)^2.
double oracle_repeats_per_side(double relative_sigma, double min_effect, double false_alarm, double power);

// What the fixed-sample rank test needs at this noise: the oracle's, over the Mann-Whitney test's
// efficiency against it (3/pi for normal noise), and over (1 - outlier fraction)^2 because
// outliers carry no information about a shift of the rest.
double rank_test_repeats_per_side(const NoiseEstimate& noise, const SequentialOptions& options);

struct SequentialPlan {
  NoiseEstimate noise;
  int looks = 1;
  int repeats_per_look = 0;  // per side: the first measurement and each extra round
  std::vector<double> efficacy_z;
  std::vector<double> futility_z;
  double fixed_repeats_per_side = 0;          // rank_test_repeats_per_side
  double expected_repeats_no_change = 0;      // per side
  double expected_repeats_at_min_effect = 0;  // per side
  bool capped = false;  // max_repeats_per_side bound it: less power than the target

  int max_repeats_per_side() const { return looks * repeats_per_look; }
  int extra_rounds() const { return looks - 1; }
};

// The look count (up to max_looks) whose plan costs an unchanged model least, with equal groups of
// at least min_repeats_per_look, large enough for a clear regression to cross the first look's
// bound. Asserts valid options.
SequentialPlan plan_sequential(const NoiseEstimate& noise, const SequentialOptions& options);

// What a model costs per side, for a planner charging repeats to a budget.
struct SequentialCost {
  double no_change = 0;      // expected when nothing changed (most models, most nights)
  double at_min_effect = 0;  // expected with a drop of min_effect
  int maximum = 0;           // at most
};
SequentialCost expected_repeats_per_side(const NoiseEstimate& noise, const SequentialOptions& options);

enum class LookDecision { go_on, regression, improvement, no_change };
constexpr EnumTable<LookDecision, 4> enum_names(LookDecision) {
  return {{
      {LookDecision::go_on, "go_on"},
      {LookDecision::regression, "regression"},
      {LookDecision::improvement, "improvement"},
      {LookDecision::no_change, "no_change"},
  }};
}
inline std::string_view to_string(LookDecision value) { return enum_name(value); }

// The standardized Mann-Whitney statistic (continuity-corrected), positive when the candidate
// is worse: lower throughput when higher is better, higher time otherwise.
double worse_rank_z(const MannWhitneyResult& test, bool higher_is_better);

// The rule at look `look` (0-based): regression at or above the efficacy bound, improvement at or
// below its mirror, no_change below the futility bound; at the last look nothing goes on.
LookDecision decide_look(const SequentialPlan& plan, int look, double worse_z);

}  // namespace kiln::stats

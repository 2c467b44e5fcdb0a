#include "common/stats/sequential_gate.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>

#include "common/stats/mann_whitney.h"
#include "common/stats/shift.h"

namespace kiln::stats {
namespace {

double normal_cdf(double x) { return 0.5 * std::erfc(-x / std::sqrt(2.0)); }
double normal_density(double x) { return std::exp(-x * x / 2) / std::sqrt(2 * M_PI); }

// Hwang-Shih-DeCani spending: the share of `total` spent by information fraction t.
double spent(double total, double gamma, double t) {
  if (t >= 1) return total;
  return total * (1 - std::exp(-gamma * t)) / (1 - std::exp(-gamma));
}

// The sub-density of the score S_k = Z_k * sqrt(t_k) on the continuation region of look k
// (Simpson's rule on an odd number of points), or the point mass at 0 before the first look.
struct Density {
  std::vector<double> points;
  std::vector<double> weighted;  // Simpson weight * density

  static Density start() { return {{0.0}, {1.0}}; }
  double mass() const {
    double total = 0;
    for (double w : weighted) total += w;
    return total;
  }
};

constexpr int kGridHalf = 100;   // 201 points per look: errors far below the spending increments
constexpr double kFarBelow = -10;  // on the z scale: where the lower continuation region is cut

// P(S_k >= bound, continued until k-1) and P(S_k < bound, ...): S_k = S_{k-1} + N(drift * dt, dt).
double above(const Density& previous, double bound, double dt, double drift) {
  double total = 0;
  const double sd = std::sqrt(dt);
  for (std::size_t j = 0; j < previous.points.size(); ++j) {
    total += previous.weighted[j] * normal_cdf(-(bound - previous.points[j] - drift * dt) / sd);
  }
  return total;
}
double below(const Density& previous, double bound, double dt, double drift) {
  double total = 0;
  const double sd = std::sqrt(dt);
  for (std::size_t j = 0; j < previous.points.size(); ++j) {
    total += previous.weighted[j] * normal_cdf((bound - previous.points[j] - drift * dt) / sd);
  }
  return total;
}

Density advance(const Density& previous, double low, double high, double dt, double drift) {
  Density next;
  if (!(high > low)) return next;
  const int count = 2 * kGridHalf + 1;
  const double step = (high - low) / (count - 1);
  const double sd = std::sqrt(dt);
  next.points.resize(count);
  next.weighted.resize(count);
  for (int i = 0; i < count; ++i) {
    const double s = low + step * i;
    double density = 0;
    for (std::size_t j = 0; j < previous.points.size(); ++j) {
      density += previous.weighted[j] * normal_density((s - previous.points[j] - drift * dt) / sd) / sd;
    }
    const double simpson = (i == 0 || i == count - 1) ? 1.0 : (i % 2 == 1 ? 4.0 : 2.0);
    next.points[i] = s;
    next.weighted[i] = density * simpson * step / 3;
  }
  return next;
}

// The bound (on the z scale of look k) at which `probability(bound)` reaches `target`;
// probability is increasing in the bound when `increasing`, else decreasing.
template <typename F>
double solve_bound(F probability, double target, double low, double high, bool increasing) {
  for (int iteration = 0; iteration < 60; ++iteration) {
    const double middle = (low + high) / 2;
    const bool too_far = increasing ? probability(middle) > target : probability(middle) < target;
    (too_far ? high : low) = middle;
  }
  return (low + high) / 2;
}

// Efficacy bounds from alpha spending under no change, ignoring futility (non-binding).
std::vector<double> efficacy_bounds(int looks, const SequentialOptions& options) {
  std::vector<double> bounds(looks);
  Density density = Density::start();
  const double dt = 1.0 / looks;
  for (int k = 0; k < looks; ++k) {
    const double t = (k + 1) * dt;
    const double increment = spent(options.false_alarm, options.efficacy_spending_gamma, t) -
                             spent(options.false_alarm, options.efficacy_spending_gamma, k * dt);
    const double root = std::sqrt(t);
    bounds[k] = solve_bound([&](double z) { return above(density, z * root, dt, 0); }, increment, -2, 15,
                            /*increasing=*/false);
    density = advance(density, kFarBelow * root, bounds[k] * root, dt, 0);
  }
  return bounds;
}

struct Pass {
  std::vector<double> futility;
  double miss = 0;  // P(no regression) under the drift
};

// Futility bounds from beta spending under `drift` (the drop's mean of Z at t = 1); the last look's
// is the efficacy bound, so everything not stopped before ends there.
Pass futility_pass(const std::vector<double>& efficacy, double drift, const SequentialOptions& options) {
  const int looks = static_cast<int>(efficacy.size());
  const double beta = 1 - options.power;
  const double dt = 1.0 / looks;
  Pass pass;
  pass.futility.resize(looks);
  Density density = Density::start();
  for (int k = 0; k < looks; ++k) {
    const double t = (k + 1) * dt;
    const double root = std::sqrt(t);
    if (density.points.empty()) {  // everything stopped before
      pass.futility[k] = efficacy[k];
      continue;
    }
    double bound = efficacy[k];
    if (k + 1 < looks) {
      const double increment = spent(beta, options.futility_spending_gamma, t) -
                               spent(beta, options.futility_spending_gamma, k * dt);
      if (below(density, efficacy[k] * root, dt, drift) > increment) {
        bound = solve_bound([&](double z) { return below(density, z * root, dt, drift); }, increment, kFarBelow,
                            efficacy[k], /*increasing=*/true);
      }
    }
    pass.futility[k] = bound;
    pass.miss += below(density, bound * root, dt, drift);
    density = advance(density, bound * root, efficacy[k] * root, dt, drift);
  }
  return pass;
}

// Expected sample size over the maximum, and the probability of crossing the efficacy bound,
// when futility stops are taken.
struct Operating {
  double expected_fraction = 0;
  double rejection = 0;
};
Operating operate(const SequentialDesign& design, double drift) {
  const double dt = 1.0 / design.looks;
  Operating result;
  Density density = Density::start();
  double continuing = 1;
  for (int k = 0; k < design.looks; ++k) {
    const double t = (k + 1) * dt;
    const double root = std::sqrt(t);
    if (density.points.empty()) break;
    result.rejection += above(density, design.efficacy_z[k] * root, dt, drift);
    density = k + 1 < design.looks
                  ? advance(density, design.futility_z[k] * root, design.efficacy_z[k] * root, dt, drift)
                  : Density{};
    const double still = density.mass();
    result.expected_fraction += t * (continuing - still);
    continuing = still;
  }
  return result;
}

SequentialDesign compute_design(int looks, const SequentialOptions& options) {
  SequentialDesign design;
  design.looks = looks;
  design.efficacy_z = efficacy_bounds(looks, options);
  const double fixed_drift = normal_quantile(1 - options.false_alarm) + normal_quantile(options.power);
  // The drift at which the futility bounds from beta spending end exactly on the efficacy bound:
  // the miss probability falls as the drift grows.
  double low = fixed_drift * 0.8;
  double high = fixed_drift * 2;
  for (int iteration = 0; iteration < 50; ++iteration) {
    const double middle = (low + high) / 2;
    (futility_pass(design.efficacy_z, middle, options).miss > 1 - options.power ? low : high) = middle;
  }
  const double drift = high;
  design.futility_z = futility_pass(design.efficacy_z, drift, options).futility;
  design.inflation = (drift / fixed_drift) * (drift / fixed_drift);
  const Operating null_case = operate(design, 0);
  design.expected_fraction_no_change = null_case.expected_fraction;
  design.false_alarm_with_futility = null_case.rejection;
  design.expected_fraction_at_min_effect = operate(design, drift).expected_fraction;
  return design;
}

// The corrected standardized Mann-Whitney statistic when every baseline sample beats every
// candidate one, n a side: a first look smaller than this cannot stop a clear regression.
double largest_rank_z(int n) {
  const double size = n;
  return (size * size / 2 - 0.5) / std::sqrt(size * size * (2 * size + 1) / 12);
}

// The smallest group whose first look a clear regression can cross.
int smallest_crossing_group(double first_bound) {
  int n = 2;
  while (largest_rank_z(n) <= first_bound) ++n;
  return n;
}

}  // namespace

Status validate(const SequentialOptions& options) {
  if (!(options.false_alarm > 0 && options.false_alarm < 0.5)) {
    return fail(Errc::invalid_argument, "false_alarm must be between 0 and 0.5 exclusive, e.g. 0.001");
  }
  if (!(options.power > 0.5 && options.power < 1)) {
    return fail(Errc::invalid_argument, "power must be between 0.5 and 1 exclusive, e.g. 0.99");
  }
  if (!(options.min_effect > 0 && options.min_effect < 1)) {
    return fail(Errc::invalid_argument, "min_effect is a relative change between 0 and 1 exclusive, e.g. 0.02");
  }
  if (options.max_looks < 1 || options.max_looks > 20) {
    return fail(Errc::invalid_argument, "max_looks must be between 1 and 20, e.g. 5");
  }
  if (options.min_repeats_per_look < 2 || options.min_repeats_per_look > 1000) {
    return fail(Errc::invalid_argument, "min_repeats_per_look must be between 2 and 1000, e.g. 5");
  }
  if (options.max_repeats_per_side < options.min_repeats_per_look || options.max_repeats_per_side > 100000) {
    return fail(Errc::invalid_argument,
                "max_repeats_per_side must be at least min_repeats_per_look and at most 100000, e.g. 400");
  }
  if (!(options.efficacy_spending_gamma < 0 && options.efficacy_spending_gamma >= -20) ||
      !(options.futility_spending_gamma < 0 && options.futility_spending_gamma >= -20)) {
    return fail(Errc::invalid_argument,
                "the spending gammas must be negative (Hwang-Shih-DeCani) and at least -20, e.g. -4 and -2");
  }
  return {};
}

const SequentialDesign& sequential_design(int looks, const SequentialOptions& options) {
  KILN_ASSERT(validate(options).has_value(), "validate SequentialOptions before designing");
  KILN_ASSERT(looks >= 1 && looks <= 20, "a sequential design has 1 to 20 looks");
  using Key = std::tuple<int, double, double, double, double>;
  thread_local std::map<Key, SequentialDesign> designs;
  const Key key{looks, options.false_alarm, options.power, options.efficacy_spending_gamma,
                options.futility_spending_gamma};
  auto found = designs.find(key);
  if (found == designs.end()) found = designs.emplace(key, compute_design(looks, options)).first;
  return found->second;
}

double oracle_repeats_per_side(double relative_sigma, double min_effect, double false_alarm, double power) {
  const double z = normal_quantile(1 - false_alarm) + normal_quantile(power);
  const double ratio = z * relative_sigma / min_effect;
  return 2 * ratio * ratio;
}

double rank_test_repeats_per_side(const NoiseEstimate& noise, const SequentialOptions& options) {
  const double kept = 1 - std::min(noise.outlier_fraction, 0.5);
  return oracle_repeats_per_side(noise.relative_sigma, options.min_effect, options.false_alarm, options.power) *
         (M_PI / 3) / (kept * kept);
}

SequentialPlan plan_sequential(const NoiseEstimate& noise, const SequentialOptions& options) {
  KILN_ASSERT(validate(options).has_value(), "validate SequentialOptions before planning");
  SequentialPlan plan;
  plan.noise = noise;
  plan.fixed_repeats_per_side = rank_test_repeats_per_side(noise, options);
  // The look count whose plan costs an unchanged model least (most models, most nights); fewer
  // looks on a tie, since every look is a round the night waits for.
  double best_cost = 0;
  for (int looks = 1; looks <= options.max_looks; ++looks) {
    const SequentialDesign& design = sequential_design(looks, options);
    int per_look = static_cast<int>(std::ceil(design.inflation * plan.fixed_repeats_per_side / looks));
    per_look = std::max(per_look, options.min_repeats_per_look);
    if (looks > 1) per_look = std::max(per_look, smallest_crossing_group(design.efficacy_z.front()));
    const double cost = design.expected_fraction_no_change * looks * per_look;
    if (looks > 1 && cost >= best_cost) continue;
    best_cost = cost;
    plan.looks = looks;
    plan.repeats_per_look = per_look;
    plan.efficacy_z = design.efficacy_z;
    plan.futility_z = design.futility_z;
    plan.expected_repeats_no_change = cost;
    plan.expected_repeats_at_min_effect = design.expected_fraction_at_min_effect * looks * per_look;
  }
  plan.capped = plan.max_repeats_per_side() > options.max_repeats_per_side;
  if (plan.capped) {
    const double scale = static_cast<double>(options.max_repeats_per_side / plan.looks) / plan.repeats_per_look;
    plan.repeats_per_look = options.max_repeats_per_side / plan.looks;
    plan.expected_repeats_no_change *= scale;
    plan.expected_repeats_at_min_effect *= scale;
  }
  return plan;
}

SequentialCost expected_repeats_per_side(const NoiseEstimate& noise, const SequentialOptions& options) {
  const SequentialPlan plan = plan_sequential(noise, options);
  return {plan.expected_repeats_no_change, plan.expected_repeats_at_min_effect, plan.max_repeats_per_side()};
}

double worse_rank_z(const MannWhitneyResult& test, bool higher_is_better) {
  if (test.u_standard_deviation <= 0) return 0;
  const double centre = static_cast<double>(test.n_baseline) * static_cast<double>(test.n_candidate) / 2;
  // A drop in throughput puts baseline samples above candidate ones.
  const double worse_u = higher_is_better ? test.u_baseline : test.u_candidate;
  // Continuity correction towards 0: without it the normal tail overstates how rare a discrete U
  // is at the sizes of a first look, and the bounds leak false alarms.
  const double distance = worse_u - centre;
  const double corrected = distance > 0 ? std::max(0.0, distance - 0.5) : std::min(0.0, distance + 0.5);
  return corrected / test.u_standard_deviation;
}

LookDecision decide_look(const SequentialPlan& plan, int look, double worse_z) {
  KILN_ASSERT(look >= 0 && look < plan.looks, "look index outside the plan");
  const auto k = static_cast<std::size_t>(look);
  if (worse_z >= plan.efficacy_z[k]) return LookDecision::regression;
  if (-worse_z >= plan.efficacy_z[k]) return LookDecision::improvement;
  if (look + 1 == plan.looks || worse_z < plan.futility_z[k]) return LookDecision::no_change;
  return LookDecision::go_on;
}

}  // namespace kiln::stats

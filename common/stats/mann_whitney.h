// Two-sided Mann-Whitney U test (Wilcoxon rank-sum) between a baseline and a candidate sample.
#pragma once

#include <cstddef>
#include <span>
#include <string_view>
#include <vector>

#include "common/enum_names.h"
#include "common/error.h"

namespace kiln::stats {

// Both sides at most this large and no ties: exact null distribution. Otherwise the normal
// approximation with tie and continuity correction (accurate well before this size).
inline constexpr std::size_t kExactMannWhitneyMaxSampleSize = 50;

enum class MannWhitneyMethod { exact, normal_approximation };
constexpr EnumTable<MannWhitneyMethod, 2> enum_names(MannWhitneyMethod) {
  return {{
      {MannWhitneyMethod::exact, "exact"},
      {MannWhitneyMethod::normal_approximation, "normal approximation"},
  }};
}
inline std::string_view to_string(MannWhitneyMethod value) { return enum_name(value); }

struct MannWhitneyResult {
  // Pairs (baseline, candidate) with candidate > baseline, ties counting one half.
  double u_candidate = 0;
  double u_baseline = 0;  // n_baseline * n_candidate - u_candidate
  double p_value = 1;     // two-sided
  MannWhitneyMethod method = MannWhitneyMethod::exact;
  bool has_ties = false;
  double u_standard_deviation = 0;  // under the null, tie-corrected
  double z = 0;  // continuity-corrected z (sign: candidate larger is positive); 0 when exact
  std::size_t n_baseline = 0;
  std::size_t n_candidate = 0;
};

// Fails with invalid_argument when a side is empty or holds a non-finite value.
Result<MannWhitneyResult> mann_whitney_u(std::span<const double> baseline,
                                         std::span<const double> candidate);

// Exact null distribution of U for sizes (n1, n2) without ties: entry u is P(U <= u), for
// u = 0 .. n1*n2. Memoised per thread: the benchmark asks for the same sizes many times.
const std::vector<double>& exact_mann_whitney_cdf(std::size_t n1, std::size_t n2);

// Exact two-sided p-value for an integer U without ties: min(1, 2 * min(P(U<=u), P(U>=u))).
double exact_mann_whitney_p_value(std::size_t n1, std::size_t n2, double u);

}  // namespace kiln::stats

#include "common/stats/fdr.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

namespace kiln::stats {

Result<BenjaminiHochbergResult> benjamini_hochberg(std::span<const double> p_values, double q,
                                                   std::size_t family_size) {
  if (!(q > 0 && q < 1)) {
    return fail(Errc::invalid_argument,
                "the false discovery rate q must be between 0 and 1 exclusive, e.g. 0.05");
  }
  const std::size_t m = family_size == 0 ? p_values.size() : family_size;
  if (m < p_values.size()) {
    return fail(Errc::invalid_argument,
                "the family size (" + std::to_string(m) + ") is smaller than the number of p-values (" +
                    std::to_string(p_values.size()) + "); pass 0 to use the number of p-values");
  }
  for (double p : p_values) {
    if (!(p >= 0 && p <= 1)) {
      return fail(Errc::invalid_argument, "a p-value is outside [0, 1]; p-values are probabilities");
    }
  }

  BenjaminiHochbergResult result;
  const std::size_t n = p_values.size();
  result.adjusted_p_values.assign(n, 1.0);
  result.rejected.assign(n, false);
  if (n == 0) return result;

  std::vector<std::size_t> order(n);
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return p_values[a] < p_values[b]; });
  // Step-up: adjusted p at rank k is the minimum over ranks >= k of p * m / rank.
  double running_min = 1.0;
  for (std::size_t rank = n; rank >= 1; --rank) {
    const std::size_t index = order[rank - 1];
    const double scaled = p_values[index] * static_cast<double>(m) / static_cast<double>(rank);
    running_min = std::min(running_min, scaled);
    result.adjusted_p_values[index] = std::min(1.0, running_min);
  }
  for (std::size_t i = 0; i < n; ++i) {
    result.rejected[i] = result.adjusted_p_values[i] <= q;
    if (result.rejected[i]) ++result.rejection_count;
  }
  return result;
}

}  // namespace kiln::stats

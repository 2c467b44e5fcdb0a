// Benjamini-Hochberg false-discovery-rate control across the comparisons of one run.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "common/error.h"

namespace kiln::stats {

struct BenjaminiHochbergResult {
  std::vector<double> adjusted_p_values;  // same order as the input
  std::vector<bool> rejected;             // adjusted p <= q
  std::size_t rejection_count = 0;
};

// family_size: the number of hypotheses in the family; 0 means p_values.size(). A larger
// family treats the missing hypotheses as p = 1 (e.g. models whose samples are not in yet),
// which keeps the control conservative. Fails on p outside [0, 1], q outside (0, 1), or a
// family smaller than the number of p-values.
Result<BenjaminiHochbergResult> benjamini_hochberg(std::span<const double> p_values, double q,
                                                   std::size_t family_size = 0);

}  // namespace kiln::stats

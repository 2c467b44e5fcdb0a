// The kernels the simulated workloads compute with: the shared host arithmetic with the chip's
// numerics (common/numerics/kernels.h), plus what only a simulated chip does to results: silent
// data corruption.
#pragma once

#include <cstdint>

#include "common/numerics/kernels.h"

namespace kiln::sim::workloads {

using numerics::add_in_place;
using numerics::apply_kernel_fault;
using numerics::attention;
using numerics::checkpoint_weights;
using numerics::gelu;
using numerics::gemm;
using numerics::gemm_bt;
using numerics::KernelContext;
using numerics::layernorm;
using numerics::Matrix;
using numerics::quantize_fp8;
using numerics::softmax_rows;
using numerics::store_as;
using numerics::store_bf16;

// Silent data corruption: flips the top exponent bit of each element chosen with probability
// `rate` (at least one element), keyed by the seed and the element's position.
void corrupt(Matrix& m, double rate, std::uint64_t seed, std::uint64_t stream);

}  // namespace kiln::sim::workloads

// Kernels with the chip's numerics emulated on the CPU: values are computed in float and each
// stored result is rounded to the chip's storage format (kiln_numerics round_trip), reductions
// accumulate in fp32 like the hardware. The same kernels with `reference` set are the fp32
// golden: no rounding anywhere. A kernel named in `faulty_kernels` has broken rounding (the
// stack-effects file's [numerics] table): it truncates its results to 1 mantissa bit.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "common/numerics/formats.h"

namespace kiln::sim::workloads {

struct Matrix {
  int rows = 0;
  int cols = 0;
  std::vector<float> data;  // row-major

  Matrix() = default;
  Matrix(int r, int c) : rows(r), cols(c), data(static_cast<std::size_t>(r) * c, 0.0f) {}
  float& at(int r, int c) { return data[static_cast<std::size_t>(r) * cols + c]; }
  float at(int r, int c) const { return data[static_cast<std::size_t>(r) * cols + c]; }
};

struct KernelContext {
  bool reference = false;  // the fp32 golden: nothing is rounded
  std::set<std::string> faulty_kernels;

  bool faulty(std::string_view kernel) const;
};

// Rounds every element to bf16, as the chip stores activations (identity for the reference).
void store_bf16(const KernelContext& ctx, Matrix& m);
// What `kernel` does when it stores its results: bf16 rounding, or the broken rounding when
// the kernel is faulty; nothing for the reference.
void store_as(const KernelContext& ctx, std::string_view kernel, Matrix& m);
// Only the fault: for kernels that keep fp32 results (the optimizer's master weights).
void apply_kernel_fault(const KernelContext& ctx, std::string_view kernel, Matrix& m);

// Per-tensor scaled E4M3 (scale = amax / 448, saturating), dequantized: what an fp8 gemm
// sees of its input. Identity for the reference.
Matrix quantize_fp8(const KernelContext& ctx, const Matrix& m);

// The same rounding applied to a checkpoint's weights; both the chip and the golden use the
// result, as a real checkpoint ships in its format.
Matrix checkpoint_weights(const Matrix& m, numerics::DType dtype);

// a (m x k) times b (k x n), fp32 accumulation, result stored in bf16. `kernel` names the
// component ("gemm-bf16" or "gemm-fp8"); gemm-fp8 quantizes both inputs with quantize_fp8.
Matrix gemm(const KernelContext& ctx, std::string_view kernel, const Matrix& a, const Matrix& b);
// a times b transposed.
Matrix gemm_bt(const KernelContext& ctx, std::string_view kernel, const Matrix& a, const Matrix& b);

void add_in_place(const KernelContext& ctx, Matrix& acc, const Matrix& x);  // residual, bf16
void gelu(const KernelContext& ctx, Matrix& m);
void layernorm(const KernelContext& ctx, Matrix& m, float eps = 1e-5f);
// Row-wise softmax; with `causal`, column j > row i is masked out.
void softmax_rows(const KernelContext& ctx, Matrix& m, bool causal);

// Silent data corruption: flips the top exponent bit of each element chosen with probability
// `rate` (at least one element), keyed by the seed and the element's position.
void corrupt(Matrix& m, double rate, std::uint64_t seed, std::uint64_t stream);

}  // namespace kiln::sim::workloads

// The accelerator's kernels in plain host arithmetic, with the chip's numerics: values are
// computed in float and each stored result is rounded to the chip's storage format (round_trip),
// reductions accumulate in fp32 like the hardware. The same kernels with `reference` set are the
// fp32 golden: no rounding anywhere. Both driver backends (the simulated chip and the CPU
// reference, drivers/cpu) and the simulated workloads compute with these, so a kernel gives the
// same numbers on either. A kernel named in `faulty_kernels` has broken rounding (a kernel
// library with a bug; the stack-effects file's [numerics] table): it truncates its results to 1
// mantissa bit.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "common/numerics/compare.h"
#include "common/numerics/formats.h"

namespace kiln::numerics {

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
Matrix checkpoint_weights(const Matrix& m, DType dtype);

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
// One causal attention head: softmax(q kᵀ) v with the bf16 gemms, stored by the "attention"
// kernel (the compiler's fused attention).
Matrix attention(const KernelContext& ctx, const Matrix& q, const Matrix& k, const Matrix& v);

// A kernel launch by name, as a driver receives it: gemm-bf16 and gemm-fp8 (a, b; with
// `transpose_b` a times b transposed), softmax (with `causal`), layernorm, gelu (one input),
// attention (q, k, v). Wrong names, input counts or shapes are invalid_argument errors.
struct KernelLaunch {
  std::string kernel;
  bool causal = false;
  bool transpose_b = false;
  std::vector<Matrix> inputs;
};
Result<Matrix> run_kernel(const KernelContext& ctx, const KernelLaunch& launch);

// The kernel names run_kernel knows, in a stable order.
const std::vector<std::string_view>& kernel_names();
// What a kernel library can break: the kernels, and the fp8 quantizer inside gemm-fp8.
const std::vector<std::string_view>& kernel_components();

// How far a kernel's bf16-stored output may be from its fp32 golden. bf16 keeps the dtype's
// rtol; with fp8 gemm inputs the rtol is one E4M3 ulp (2^-3) because every input was rounded to
// E4M3. Both add an atol from the output's scale: elements near zero come from cancellation of
// terms of the tensor's typical magnitude, so their error is that of the typical magnitude (the
// argument of the fp8 rule in docs/numerics.md). The fractions are several times the error
// honest rounding produces, and far below what a broken kernel or corrupted data produce.
struct KernelTolerance {
  double rtol = 0.0;
  double atol_rms_fraction = 0.0;  // atol = this times the golden's RMS
};
KernelTolerance kernel_output_tolerance(bool fp8_inputs);

// Root mean square of the finite values (0 when there are none).
double rms(const Tensor& t);

// A matrix as a tensor of `dtype` for compare().
Tensor to_tensor(const Matrix& m, DType dtype);

}  // namespace kiln::numerics

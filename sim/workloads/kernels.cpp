#include "sim/workloads/kernels.h"

#include <algorithm>
#include <bit>
#include <cmath>

#include "common/error.h"
#include "sim/chip/model.h"

namespace kiln::sim::workloads {

using numerics::DType;
using numerics::Saturation;

bool KernelContext::faulty(std::string_view kernel) const {
  return !reference && faulty_kernels.count(std::string(kernel)) > 0;
}

namespace {

constexpr float kE4m3Max = 448.0f;

// The injected rounding bug: the kernel keeps 1 mantissa bit, toward zero.
float broken_round(float value) {
  const auto bits = std::bit_cast<std::uint32_t>(value);
  return std::bit_cast<float>(bits & 0xFFC00000u);
}

float store_value(const KernelContext& ctx, std::string_view kernel, float value) {
  if (ctx.reference) return value;
  if (ctx.faulty(kernel)) return broken_round(value);
  return numerics::round_trip(DType::bf16, value, Saturation::non_saturating);
}

void store_all(const KernelContext& ctx, std::string_view kernel, Matrix& m) {
  for (auto& x : m.data) x = store_value(ctx, kernel, x);
}

float amax(const Matrix& m) {
  float result = 0.0f;
  for (float x : m.data) result = std::max(result, std::abs(x));
  return result;
}

Matrix quantize_e4m3(const Matrix& m) {
  const float max_abs = amax(m);
  if (max_abs == 0.0f) return m;
  const float scale = max_abs / kE4m3Max;
  Matrix out = m;
  for (auto& x : out.data) {
    x = numerics::round_trip(DType::f8_e4m3, x / scale, Saturation::saturating) * scale;
  }
  return out;
}

Matrix multiply(const KernelContext& ctx, std::string_view kernel, const Matrix& a, const Matrix& b,
                bool b_transposed) {
  const int k_dim = a.cols;
  const int n_dim = b_transposed ? b.rows : b.cols;
  KILN_ASSERT(k_dim == (b_transposed ? b.cols : b.rows), "gemm operand shapes must agree");
  const bool fp8 = kernel == "gemm-fp8";
  const Matrix lhs = fp8 ? quantize_fp8(ctx, a) : a;
  const Matrix rhs = fp8 ? quantize_fp8(ctx, b) : b;
  Matrix c(a.rows, n_dim);
  for (int i = 0; i < a.rows; ++i) {
    for (int j = 0; j < n_dim; ++j) {
      float sum = 0.0f;  // fp32 accumulation, as the hardware's matrix units
      for (int k = 0; k < k_dim; ++k) {
        sum += lhs.at(i, k) * (b_transposed ? rhs.at(j, k) : rhs.at(k, j));
      }
      c.at(i, j) = sum;
    }
  }
  store_all(ctx, kernel, c);
  return c;
}

}  // namespace

void store_bf16(const KernelContext& ctx, Matrix& m) {
  if (ctx.reference) return;
  for (auto& x : m.data) x = numerics::round_trip(DType::bf16, x, Saturation::non_saturating);
}

void store_as(const KernelContext& ctx, std::string_view kernel, Matrix& m) { store_all(ctx, kernel, m); }

void apply_kernel_fault(const KernelContext& ctx, std::string_view kernel, Matrix& m) {
  if (!ctx.faulty(kernel)) return;
  for (auto& x : m.data) x = broken_round(x);
}

Matrix quantize_fp8(const KernelContext& ctx, const Matrix& m) {
  if (ctx.reference) return m;
  Matrix out = quantize_e4m3(m);
  if (ctx.faulty("quantize-fp8")) {
    for (auto& x : out.data) x = broken_round(x);
  }
  return out;
}

Matrix checkpoint_weights(const Matrix& m, DType dtype) {
  if (numerics::is_fp8(dtype)) return quantize_e4m3(m);
  Matrix out = m;
  for (auto& x : out.data) x = numerics::round_trip(dtype, x, Saturation::non_saturating);
  return out;
}

Matrix gemm(const KernelContext& ctx, std::string_view kernel, const Matrix& a, const Matrix& b) {
  return multiply(ctx, kernel, a, b, false);
}

Matrix gemm_bt(const KernelContext& ctx, std::string_view kernel, const Matrix& a, const Matrix& b) {
  return multiply(ctx, kernel, a, b, true);
}

void add_in_place(const KernelContext& ctx, Matrix& acc, const Matrix& x) {
  KILN_ASSERT(acc.data.size() == x.data.size(), "residual shapes must agree");
  for (std::size_t i = 0; i < acc.data.size(); ++i) acc.data[i] += x.data[i];
  store_bf16(ctx, acc);
}

void gelu(const KernelContext& ctx, Matrix& m) {
  constexpr float kSqrt2OverPi = 0.7978845608f;
  for (auto& x : m.data) {
    x = 0.5f * x * (1.0f + std::tanh(kSqrt2OverPi * (x + 0.044715f * x * x * x)));
  }
  store_all(ctx, "gelu", m);
}

void layernorm(const KernelContext& ctx, Matrix& m, float eps) {
  for (int r = 0; r < m.rows; ++r) {
    float mean = 0.0f;
    for (int c = 0; c < m.cols; ++c) mean += m.at(r, c);
    mean /= static_cast<float>(m.cols);
    float variance = 0.0f;
    for (int c = 0; c < m.cols; ++c) variance += (m.at(r, c) - mean) * (m.at(r, c) - mean);
    variance /= static_cast<float>(m.cols);
    const float inv = 1.0f / std::sqrt(variance + eps);
    for (int c = 0; c < m.cols; ++c) m.at(r, c) = (m.at(r, c) - mean) * inv;
  }
  store_all(ctx, "layernorm", m);
}

void softmax_rows(const KernelContext& ctx, Matrix& m, bool causal) {
  for (int r = 0; r < m.rows; ++r) {
    const int last = causal ? std::min(r, m.cols - 1) : m.cols - 1;
    float max_value = m.at(r, 0);
    for (int c = 1; c <= last; ++c) max_value = std::max(max_value, m.at(r, c));
    float sum = 0.0f;
    for (int c = 0; c <= last; ++c) {
      m.at(r, c) = std::exp(m.at(r, c) - max_value);
      sum += m.at(r, c);
    }
    for (int c = 0; c < m.cols; ++c) m.at(r, c) = c <= last ? m.at(r, c) / sum : 0.0f;
  }
  store_all(ctx, "softmax", m);
}

void corrupt(Matrix& m, double rate, std::uint64_t seed, std::uint64_t stream) {
  if (m.data.empty()) return;
  bool any = false;
  auto flip = [&](std::size_t i) {
    m.data[i] = std::bit_cast<float>(std::bit_cast<std::uint32_t>(m.data[i]) ^ 0x40000000u);
    any = true;
  };
  for (std::size_t i = 0; i < m.data.size(); ++i) {
    if (unit_uniform(mix_seed(seed, stream, i)) < rate) flip(i);
  }
  if (!any) flip(mix_seed(seed, stream, 0xC0FFEE) % m.data.size());
}

}  // namespace kiln::sim::workloads

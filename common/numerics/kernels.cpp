#include "common/numerics/kernels.h"

#include <algorithm>
#include <bit>
#include <cmath>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/error.h"

namespace kiln::numerics {

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
  return round_trip(DType::bf16, value, Saturation::non_saturating);
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
    x = round_trip(DType::f8_e4m3, x / scale, Saturation::saturating) * scale;
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
  for (auto& x : m.data) x = round_trip(DType::bf16, x, Saturation::non_saturating);
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
  if (is_fp8(dtype)) return quantize_e4m3(m);
  Matrix out = m;
  for (auto& x : out.data) x = round_trip(dtype, x, Saturation::non_saturating);
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

Matrix attention(const KernelContext& ctx, const Matrix& q, const Matrix& k, const Matrix& v) {
  Matrix scores = gemm_bt(ctx, "gemm-bf16", q, k);
  softmax_rows(ctx, scores, true);
  Matrix out = gemm(ctx, "gemm-bf16", scores, v);
  store_as(ctx, "attention", out);
  return out;
}

const std::vector<std::string_view>& kernel_names() {
  static const std::vector<std::string_view> names = {"gemm-bf16", "gemm-fp8", "softmax",
                                                      "layernorm", "gelu",     "attention"};
  return names;
}

const std::vector<std::string_view>& kernel_components() {
  static const std::vector<std::string_view> names = {"gemm-bf16", "gemm-fp8",  "quantize-fp8", "softmax",
                                                      "layernorm", "gelu",      "attention"};
  return names;
}

KernelTolerance kernel_output_tolerance(bool fp8_inputs) {
  if (fp8_inputs) return {0.125, 0.2};
  return {default_tolerance(DType::bf16).rtol, 0.03};
}

double rms(const Tensor& t) {
  double sum = 0;
  std::size_t n = 0;
  for (double v : t.values) {
    if (std::isfinite(v)) {
      sum += v * v;
      ++n;
    }
  }
  return n == 0 ? 0.0 : std::sqrt(sum / static_cast<double>(n));
}

Tensor to_tensor(const Matrix& m, DType dtype) {
  Tensor t;
  t.dtype = dtype;
  t.shape = {m.rows, m.cols};
  t.values.assign(m.data.begin(), m.data.end());
  return t;
}

namespace {

Status invalid(std::string message) { return fail(Errc::invalid_argument, std::move(message)); }

Status check_inputs(const KernelLaunch& launch, std::size_t count) {
  if (launch.inputs.size() != count) {
    return invalid(fmt::format("kernel {} takes {} input(s), got {}", launch.kernel, count, launch.inputs.size()));
  }
  for (std::size_t i = 0; i < count; ++i) {
    const Matrix& m = launch.inputs[i];
    if (m.rows <= 0 || m.cols <= 0 || m.data.size() != static_cast<std::size_t>(m.rows) * m.cols) {
      return invalid(fmt::format("kernel {}: input {} is {}x{} with {} values; give a non-empty matrix with "
                                 "rows*cols values",
                                 launch.kernel, i, m.rows, m.cols, m.data.size()));
    }
  }
  return {};
}

Status check_inner(const KernelLaunch& launch, int left, int right, std::string_view what) {
  if (left == right) return {};
  return invalid(fmt::format("kernel {}: {} do not agree ({} vs {})", launch.kernel, what, left, right));
}

}  // namespace

Result<Matrix> run_kernel(const KernelContext& ctx, const KernelLaunch& launch) {
  const std::string& name = launch.kernel;
  if (name == "gemm-bf16" || name == "gemm-fp8") {
    if (auto ok = check_inputs(launch, 2); !ok) return tl::unexpected(ok.error());
    const Matrix& a = launch.inputs[0];
    const Matrix& b = launch.inputs[1];
    const int inner = launch.transpose_b ? b.cols : b.rows;
    if (auto ok = check_inner(launch, a.cols, inner, "a's columns and b's inner dimension"); !ok) {
      return tl::unexpected(ok.error());
    }
    return launch.transpose_b ? gemm_bt(ctx, name, a, b) : gemm(ctx, name, a, b);
  }
  if (name == "softmax" || name == "layernorm" || name == "gelu") {
    if (auto ok = check_inputs(launch, 1); !ok) return tl::unexpected(ok.error());
    Matrix m = launch.inputs[0];
    if (name == "softmax") softmax_rows(ctx, m, launch.causal);
    if (name == "layernorm") layernorm(ctx, m);
    if (name == "gelu") gelu(ctx, m);
    return m;
  }
  if (name == "attention") {
    if (auto ok = check_inputs(launch, 3); !ok) return tl::unexpected(ok.error());
    const Matrix& q = launch.inputs[0];
    const Matrix& k = launch.inputs[1];
    const Matrix& v = launch.inputs[2];
    if (auto ok = check_inner(launch, q.cols, k.cols, "q's and k's head dimensions"); !ok) {
      return tl::unexpected(ok.error());
    }
    if (auto ok = check_inner(launch, k.rows, v.rows, "k's and v's sequence lengths"); !ok) {
      return tl::unexpected(ok.error());
    }
    return attention(ctx, q, k, v);
  }
  return fail(Errc::invalid_argument, fmt::format("unknown kernel '{}'; use one of {}", name, fmt::join(kernel_names(), ", ")));
}

}  // namespace kiln::numerics

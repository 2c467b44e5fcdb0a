#include "common/numerics/compare.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <queue>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace kiln::numerics {
namespace {

constexpr double infinity = std::numeric_limits<double>::infinity();

std::vector<int64_t> multi_index(size_t flat_index, const std::vector<int64_t>& shape) {
  std::vector<int64_t> index(shape.size(), 0);
  uint64_t rest = flat_index;
  for (size_t d = shape.size(); d-- > 0;) {
    const uint64_t dim = static_cast<uint64_t>(shape[d]);
    index[d] = static_cast<int64_t>(rest % dim);
    rest /= dim;
  }
  return index;
}

// RMS of the finite values, scaled so squares cannot overflow.
double finite_rms(const std::vector<double>& values) {
  double largest = 0.0;
  size_t count = 0;
  for (double v : values) {
    if (std::isfinite(v)) {
      largest = std::max(largest, std::fabs(v));
      ++count;
    }
  }
  if (count == 0 || largest == 0.0) {
    return 0.0;
  }
  double sum = 0.0;
  for (double v : values) {
    if (std::isfinite(v)) {
      sum += (v / largest) * (v / largest);
    }
  }
  return largest * std::sqrt(sum / static_cast<double>(count));
}

// NaN logits rank below everything, ties go to the lower index: a deterministic top-k.
std::vector<size_t> top_k_indices(const double* row, size_t vocab, size_t k, std::vector<size_t>& scratch) {
  scratch.resize(vocab);
  std::iota(scratch.begin(), scratch.end(), size_t{0});
  auto key = [row](size_t i) { return std::isnan(row[i]) ? -infinity : row[i]; };
  std::partial_sort(scratch.begin(), scratch.begin() + static_cast<std::ptrdiff_t>(k), scratch.end(),
                    [&](size_t a, size_t b) { return key(a) != key(b) ? key(a) > key(b) : a < b; });
  std::vector<size_t> top(scratch.begin(), scratch.begin() + static_cast<std::ptrdiff_t>(k));
  std::sort(top.begin(), top.end());
  return top;
}

double top_k_agreement(const std::vector<double>& golden, const std::vector<double>& actual, size_t vocab,
                       size_t k) {
  const size_t rows = golden.size() / vocab;
  if (rows == 0) {
    return 1.0;
  }
  std::vector<size_t> scratch;
  double total = 0.0;
  for (size_t r = 0; r < rows; ++r) {
    const auto expected_top = top_k_indices(golden.data() + r * vocab, vocab, k, scratch);
    const auto actual_top = top_k_indices(actual.data() + r * vocab, vocab, k, scratch);
    std::vector<size_t> common;
    std::set_intersection(expected_top.begin(), expected_top.end(), actual_top.begin(), actual_top.end(),
                          std::back_inserter(common));
    total += static_cast<double>(common.size()) / static_cast<double>(k);
  }
  return total / static_cast<double>(rows);
}

// How far past its allowance an element is: the order of the "worst" list.
double excess_of(const Mismatch& m) {
  if (!std::isfinite(m.abs_error)) {
    return infinity;
  }
  return m.abs_error - m.allowed_error;
}

std::string number(double value) {
  if (std::isnan(value)) {
    return "nan";
  }
  return fmt::format("{:.7g}", value);
}

nlohmann::json json_number(double value) {
  if (std::isnan(value)) {
    return "nan";
  }
  if (std::isinf(value)) {
    return value > 0 ? "inf" : "-inf";
  }
  return value;
}

std::string tolerance_text(const CompareReport& report) {
  const Tolerance& t = report.tolerance_used;
  std::string out;
  if (report.golden_rounded) {
    out += "golden rounded to " + std::string(to_string(report.dtype)) +
           (report.saturation == Saturation::saturating ? " saturating" : " non-saturating") + "; ";
  }
  out += "rtol " + number(t.rtol) + ", atol " + number(t.atol);
  if (t.ulps > 0) {
    out += ", " + number(t.ulps) + " ulp";
  }
  return out;
}

}  // namespace

Tolerance default_tolerance(DType dtype) {
  switch (dtype) {
    case DType::f64: return {1e-7, 1e-7, 0.0};
    case DType::f32: return {1.3e-6, 1e-5, 0.0};
    case DType::f16: return {1e-3, 1e-5, 0.0};
    case DType::bf16: return {1.6e-2, 1e-5, 0.0};
    case DType::f8_e4m3:
    case DType::f8_e5m2: return {0.0, 0.0, 1.0};
  }
  return {1.3e-6, 1e-5, 0.0};
}

Result<CompareReport> compare(const Tensor& golden, const Tensor& actual, const CompareOptions& options) {
  if (golden.shape != actual.shape) {
    return fail(Errc::invalid_argument, "shapes differ: golden " + shape_text(golden.shape) + ", actual " +
                                            shape_text(actual.shape) + "; compare tensors of the same shape");
  }
  for (const Tensor* t : {&golden, &actual}) {
    if (t->values.size() != static_cast<size_t>(element_count(t->shape))) {
      return fail(Errc::invalid_argument, std::string(t == &golden ? "golden" : "actual") + " tensor has " +
                                              std::to_string(t->values.size()) + " values for shape " +
                                              shape_text(t->shape) + "; make them agree");
    }
  }
  if (options.top_k < 0) {
    return fail(Errc::invalid_argument, "top-k must be positive (or 0 to skip it)");
  }
  if (options.top_k > 0 && (golden.shape.empty() || golden.shape.back() < options.top_k)) {
    return fail(Errc::invalid_argument,
                "top-" + std::to_string(options.top_k) + " needs logits whose last dimension (the vocabulary) "
                "has at least that many entries; shape is " + shape_text(golden.shape));
  }
  if (options.tolerance) {
    const Tolerance& t = *options.tolerance;
    if (!(t.rtol >= 0.0) || !(t.atol >= 0.0) || !(t.ulps >= 0.0)) {
      return fail(Errc::invalid_argument, "tolerance rtol, atol and ulps must be non-negative numbers");
    }
  }
  const bool round_golden = is_fp8(options.dtype);
  std::vector<double> expected = golden.values;
  if (round_golden) {
    for (double& e : expected) {
      e = round_trip(options.dtype, e, options.saturation);
    }
  }

  CompareReport report;
  report.dtype = options.dtype;
  report.shape = golden.shape;
  report.element_count = expected.size();
  report.golden_rounded = round_golden;
  report.saturation = options.saturation;
  report.equal_nan = options.equal_nan;
  report.top_k = options.top_k;
  report.tolerance_used = options.tolerance.value_or(default_tolerance(options.dtype));
  if (round_golden && !options.tolerance) {
    // Rounding error of a typical element: half an ulp at the tensor's RMS magnitude.
    report.tolerance_used.atol = 0.5 * ulp(options.dtype, finite_rms(expected));
  }
  const Tolerance tol = report.tolerance_used;

  // Scale for the cosine so squares cannot overflow.
  double largest = 0.0;
  for (size_t i = 0; i < expected.size(); ++i) {
    if (std::isfinite(expected[i]) && std::isfinite(actual.values[i])) {
      largest = std::max({largest, std::fabs(expected[i]), std::fabs(actual.values[i])});
    }
  }
  double dot = 0.0;
  double expected_norm2 = 0.0;
  double actual_norm2 = 0.0;

  auto worse_first = [](const Mismatch& a, const Mismatch& b) {
    const double ea = excess_of(a);
    const double eb = excess_of(b);
    return ea != eb ? ea > eb : a.flat_index < b.flat_index;
  };
  // Min-heap on badness keeps the max_reported worst without storing every mismatch.
  std::priority_queue<Mismatch, std::vector<Mismatch>, decltype(worse_first)> worst(worse_first);

  for (size_t i = 0; i < expected.size(); ++i) {
    const double e = expected[i];
    const double a = actual.values[i];
    Mismatch m;
    m.flat_index = i;
    m.expected = e;
    m.actual = a;
    bool match = false;
    if (std::isnan(e) || std::isnan(a)) {
      match = options.equal_nan && std::isnan(e) && std::isnan(a);
      m.abs_error = match ? 0.0 : std::numeric_limits<double>::quiet_NaN();
    } else if (std::isinf(e) || std::isinf(a)) {
      match = e == a;
      m.abs_error = match ? 0.0 : infinity;
    } else {
      m.abs_error = std::fabs(a - e);
      m.allowed_error = tol.atol + tol.rtol * std::fabs(e) + (tol.ulps > 0 ? tol.ulps * ulp(options.dtype, e) : 0.0);
      match = m.abs_error <= m.allowed_error;
      report.max_abs_error = std::max(report.max_abs_error, m.abs_error);
      if (e != 0.0) {
        report.max_rel_error = std::max(report.max_rel_error, m.abs_error / std::fabs(e));
      }
      if (largest > 0.0) {
        dot += (e / largest) * (a / largest);
        expected_norm2 += (e / largest) * (e / largest);
        actual_norm2 += (a / largest) * (a / largest);
      }
    }
    if (match) {
      continue;
    }
    ++report.mismatch_count;
    if (!std::isfinite(m.abs_error)) {
      ++report.nonfinite_mismatch_count;
    }
    if (options.max_reported == 0) {
      continue;
    }
    if (worst.size() < options.max_reported) {
      worst.push(std::move(m));
    } else if (worse_first(m, worst.top())) {
      worst.pop();
      worst.push(std::move(m));
    }
  }
  if (expected_norm2 > 0.0 && actual_norm2 > 0.0) {
    report.cosine_similarity = dot / (std::sqrt(expected_norm2) * std::sqrt(actual_norm2));
  } else {
    // Both all zero agree perfectly; one all zero is orthogonal to anything else.
    report.cosine_similarity = expected_norm2 == actual_norm2 ? 1.0 : 0.0;
  }
  while (!worst.empty()) {
    report.worst.push_back(worst.top());
    worst.pop();
  }
  std::sort(report.worst.begin(), report.worst.end(), worse_first);
  for (Mismatch& m : report.worst) {
    m.index = multi_index(m.flat_index, golden.shape);
  }
  if (options.top_k > 0) {
    report.topk_agreement = top_k_agreement(golden.values, actual.values,
                                            static_cast<size_t>(golden.shape.back()),
                                            static_cast<size_t>(options.top_k));
  }
  report.passed = report.mismatch_count == 0;
  return report;
}

std::string report_verdict_line(const CompareReport& report) {
  const std::string against = " for " + std::string(to_string(report.dtype)) + " (" + tolerance_text(report) + ")";
  if (report.passed) {
    return "PASS: all " + std::to_string(report.element_count) + " elements within tolerance" + against;
  }
  const double share = 100.0 * static_cast<double>(report.mismatch_count) /
                       static_cast<double>(std::max<size_t>(report.element_count, 1));
  return "FAIL: " + std::to_string(report.mismatch_count) + " of " + std::to_string(report.element_count) +
         " elements (" + fmt::format("{:.3g}", share) + "%) outside tolerance" + against;
}

std::string mismatch_text(const Mismatch& m) {
  std::string out = shape_text(m.index) + " expected " + number(m.expected) + ", actual " + number(m.actual);
  if (std::isnan(m.expected) && std::isnan(m.actual)) return out + ": NaN matches NaN only with equal_nan";
  if (std::isnan(m.expected) || std::isnan(m.actual)) return out + ": NaN against a number";
  if (!std::isfinite(m.abs_error)) return out + ": infinity matches only the same infinity";
  out += ", |error| " + number(m.abs_error) + " > allowed " + number(m.allowed_error) + ", exceeds by " +
         number(m.abs_error - m.allowed_error);
  if (m.allowed_error > 0.0) out += fmt::format(" ({:.3g}x allowed)", m.abs_error / m.allowed_error);
  return out;
}

std::string format_report_text(const CompareReport& report) {
  std::string out = report_verdict_line(report) + "\n";
  out += fmt::format("  {:<22}{}\n", "shape", shape_text(report.shape));
  out += fmt::format("  {:<22}{}\n", "max abs error", number(report.max_abs_error));
  out += fmt::format("  {:<22}{}\n", "max rel error", number(report.max_rel_error));
  out += fmt::format("  {:<22}{}\n", "cosine similarity", fmt::format("{:.9g}", report.cosine_similarity));
  if (report.topk_agreement) {
    out += fmt::format("  {:<22}{:.4g}%\n", "top-" + std::to_string(report.top_k) + " agreement",
                       100.0 * *report.topk_agreement);
  }
  if (report.nonfinite_mismatch_count > 0) {
    out += fmt::format("  {:<22}{}\n", "NaN/inf mismatches", report.nonfinite_mismatch_count);
  }
  if (report.worst.empty()) {
    return out;
  }
  out += "worst " + std::to_string(report.worst.size()) + " elements:\n";
  for (const Mismatch& m : report.worst) out += "  " + mismatch_text(m) + "\n";
  if (report.mismatch_count > report.worst.size()) {
    out += "  ... and " + std::to_string(report.mismatch_count - report.worst.size()) + " more\n";
  }
  return out;
}

nlohmann::json report_to_json(const CompareReport& report) {
  nlohmann::json worst = nlohmann::json::array();
  for (const Mismatch& m : report.worst) {
    worst.push_back({{"flat_index", m.flat_index},
                     {"index", m.index},
                     {"expected", json_number(m.expected)},
                     {"actual", json_number(m.actual)},
                     {"abs_error", json_number(m.abs_error)},
                     {"allowed_error", json_number(m.allowed_error)}});
  }
  nlohmann::json out = {
      {"passed", report.passed},
      {"dtype", std::string(to_string(report.dtype))},
      {"shape", report.shape},
      {"element_count", report.element_count},
      {"mismatch_count", report.mismatch_count},
      {"nonfinite_mismatch_count", report.nonfinite_mismatch_count},
      {"max_abs_error", json_number(report.max_abs_error)},
      {"max_rel_error", json_number(report.max_rel_error)},
      {"cosine_similarity", json_number(report.cosine_similarity)},
      {"tolerance",
       {{"rtol", json_number(report.tolerance_used.rtol)},
        {"atol", json_number(report.tolerance_used.atol)},
        {"ulps", json_number(report.tolerance_used.ulps)}}},
      {"golden_rounded", report.golden_rounded},
      {"saturation", report.saturation == Saturation::saturating ? "saturating" : "non_saturating"},
      {"equal_nan", report.equal_nan},
      {"worst", worst},
  };
  if (report.topk_agreement) {
    out["top_k"] = report.top_k;
    out["topk_agreement"] = *report.topk_agreement;
  }
  return out;
}

}  // namespace kiln::numerics

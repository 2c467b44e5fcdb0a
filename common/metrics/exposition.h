// Prometheus's text exposition format, version 0.0.4: what kiln's /metrics endpoints answer.
// Pure: families are declared with their HELP and TYPE, samples added under them, and text()
// writes them in that order. Names and label names are checked (a bad one is a programmer
// error); label values and help texts are escaped as the format asks.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kiln::metrics {

// The Content-Type of an answer in this format.
inline constexpr std::string_view kContentType = "text/plain; version=0.0.4; charset=utf-8";

using Labels = std::vector<std::pair<std::string, std::string>>;

// Observations counted into buckets by upper bound (inclusive), as a Prometheus histogram: the
// bounds ascend and are finite; +Inf is always the last bucket.
class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);

  void observe(double value);

  const std::vector<double>& upper_bounds() const { return upper_bounds_; }
  // Per bucket, not cumulative; one more than the bounds (the last is above every bound).
  const std::vector<std::uint64_t>& bucket_counts() const { return bucket_counts_; }
  double sum() const { return sum_; }
  std::uint64_t count() const { return count_; }

 private:
  std::vector<double> upper_bounds_;
  std::vector<std::uint64_t> bucket_counts_;
  double sum_ = 0;
  std::uint64_t count_ = 0;
};

class Exposition {
 public:
  enum class Type { counter, gauge, histogram };

  // Starts a family; the samples added next belong to it. A counter's name ends in _total; a
  // family is declared once.
  void counter(std::string_view name, std::string_view help) { family(Type::counter, name, help); }
  void gauge(std::string_view name, std::string_view help) { family(Type::gauge, name, help); }
  void histogram(std::string_view name, std::string_view help) { family(Type::histogram, name, help); }

  // A counter's or gauge's value for one set of labels.
  void sample(const Labels& labels, double value);
  // A histogram's buckets (cumulative, with le), sum and count for one set of labels.
  void sample(const Labels& labels, const Histogram& histogram);

  std::string text() const { return text_; }

 private:
  void family(Type type, std::string_view name, std::string_view help);
  void line(std::string_view name, const Labels& labels, double value);

  std::string text_;
  std::vector<std::string> names_;  // the families declared, in order
  Type type_ = Type::gauge;
};

// How the format writes a value: shortest round-trip decimal, or NaN, +Inf, -Inf.
std::string format_value(double value);
// A label value with backslash, double quote and newline escaped.
std::string escape_label_value(std::string_view value);

}  // namespace kiln::metrics

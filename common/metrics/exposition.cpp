#include "common/metrics/exposition.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "common/error.h"

namespace kiln::metrics {
namespace {

bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_name_char(char c) { return is_name_start(c) || (c >= '0' && c <= '9'); }

// [a-zA-Z_:][a-zA-Z0-9_:]*; kiln's own names use no colon (those are for recording rules).
bool valid_metric_name(std::string_view name) {
  return !name.empty() && is_name_start(name.front()) && std::all_of(name.begin(), name.end(), is_name_char);
}

// [a-zA-Z_][a-zA-Z0-9_]*, not starting with __ (reserved for Prometheus itself).
bool valid_label_name(std::string_view name) {
  return valid_metric_name(name) && !name.starts_with("__");
}

// Backslash and newline escaped, and the double quote too in a label value (HELP text keeps it).
std::string escaped(std::string_view text, bool quote) {
  std::string out;
  for (char c : text) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '"' && quote) {
      out += "\\\"";
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace

Histogram::Histogram(std::vector<double> upper_bounds)
    : upper_bounds_(std::move(upper_bounds)), bucket_counts_(upper_bounds_.size() + 1, 0) {
  KILN_ASSERT(std::is_sorted(upper_bounds_.begin(), upper_bounds_.end()) &&
                  std::adjacent_find(upper_bounds_.begin(), upper_bounds_.end()) == upper_bounds_.end(),
              "histogram bounds ascend strictly");
  KILN_ASSERT(std::all_of(upper_bounds_.begin(), upper_bounds_.end(), [](double b) { return std::isfinite(b); }),
              "histogram bounds are finite; +Inf is implied");
}

void Histogram::observe(double value) {
  const auto bucket = std::lower_bound(upper_bounds_.begin(), upper_bounds_.end(), value) - upper_bounds_.begin();
  ++bucket_counts_[static_cast<std::size_t>(bucket)];
  sum_ += value;
  ++count_;
}

std::string format_value(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  return fmt::format("{}", value);
}

std::string escape_label_value(std::string_view value) { return escaped(value, /*quote=*/true); }

void Exposition::family(Type type, std::string_view name, std::string_view help) {
  KILN_ASSERT(valid_metric_name(name), "a metric name is [a-zA-Z_][a-zA-Z0-9_]*");
  KILN_ASSERT((type == Type::counter) == name.ends_with("_total"), "counters, and only counters, end in _total");
  KILN_ASSERT(std::find(names_.begin(), names_.end(), name) == names_.end(), "a family is declared once");
  names_.emplace_back(name);
  type_ = type;
  // In format 0.0.4 HELP and TYPE name the family as its samples do, a counter's _total included.
  text_ += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, escaped(help, /*quote=*/false), name,
                       type == Type::counter ? "counter" : type == Type::gauge ? "gauge" : "histogram");
}

void Exposition::line(std::string_view name, const Labels& labels, double value) {
  text_ += name;
  if (!labels.empty()) {
    text_ += '{';
    for (std::size_t i = 0; i < labels.size(); ++i) {
      KILN_ASSERT(valid_label_name(labels[i].first), "a label name is [a-zA-Z_][a-zA-Z0-9_]*, not starting with __");
      text_ += fmt::format("{}{}=\"{}\"", i == 0 ? "" : ",", labels[i].first, escape_label_value(labels[i].second));
    }
    text_ += '}';
  }
  text_ += ' ';
  text_ += format_value(value);
  text_ += '\n';
}

void Exposition::sample(const Labels& labels, double value) {
  KILN_ASSERT(!names_.empty() && type_ != Type::histogram, "a value belongs to a declared counter or gauge");
  KILN_ASSERT(type_ != Type::counter || value >= 0, "a counter is never negative");
  line(names_.back(), labels, value);
}

void Exposition::sample(const Labels& labels, const Histogram& histogram) {
  KILN_ASSERT(!names_.empty() && type_ == Type::histogram, "buckets belong to a declared histogram");
  const std::string& name = names_.back();
  std::uint64_t cumulative = 0;
  Labels with_le = labels;
  with_le.emplace_back("le", "");
  for (std::size_t i = 0; i < histogram.bucket_counts().size(); ++i) {
    cumulative += histogram.bucket_counts()[i];
    with_le.back().second = i < histogram.upper_bounds().size() ? format_value(histogram.upper_bounds()[i]) : "+Inf";
    line(name + "_bucket", with_le, static_cast<double>(cumulative));
  }
  line(name + "_sum", labels, histogram.sum());
  line(name + "_count", labels, static_cast<double>(histogram.count()));
}

}  // namespace kiln::metrics

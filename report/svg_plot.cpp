#include "report/svg_plot.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "report/html.h"

namespace kiln::report {

namespace {

constexpr double kWidth = 640;
constexpr double kHeight = 240;
constexpr double kLeft = 72;    // room for the y ticks' labels
constexpr double kRight = 16;
constexpr double kTop = 14;
constexpr double kBottom = 44;  // room for the x ticks' labels and the axis label
constexpr double kMarkRadius = 4;

std::string coordinate(double value) { return fmt::format("{:.1f}", value); }

std::string points_attribute(const std::vector<XY>& points) {
  std::string out;
  for (const auto& [x, y] : points) {
    if (!out.empty()) out += ' ';
    out += coordinate(x) + "," + coordinate(y);
  }
  return out;
}

std::string shape_element(Shape shape, double cx, double cy, const std::string& attributes, const std::string& inner) {
  const double r = kMarkRadius;
  switch (shape) {
    case Shape::circle:
    case Shape::ring:
      return fmt::format("<circle {} cx=\"{}\" cy=\"{}\" r=\"{}\">{}</circle>", attributes, coordinate(cx),
                         coordinate(cy), r, inner);
    case Shape::square:
      return fmt::format("<rect {} x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\">{}</rect>", attributes,
                         coordinate(cx - r), coordinate(cy - r), 2 * r, 2 * r, inner);
    case Shape::diamond:
      return fmt::format("<polygon {} points=\"{}\">{}</polygon>", attributes,
                         points_attribute({{cx, cy - r - 1}, {cx + r + 1, cy}, {cx, cy + r + 1}, {cx - r - 1, cy}}),
                         inner);
    case Shape::triangle:
      return fmt::format("<polygon {} points=\"{}\">{}</polygon>", attributes,
                         points_attribute({{cx, cy - r - 1}, {cx + r + 1, cy + r}, {cx - r - 1, cy + r}}), inner);
    case Shape::cross:
      return fmt::format("<path {} d=\"M{} {}L{} {}M{} {}L{} {}\">{}</path>", attributes, coordinate(cx - r),
                         coordinate(cy - r), coordinate(cx + r), coordinate(cy + r), coordinate(cx - r),
                         coordinate(cy + r), coordinate(cx + r), coordinate(cy - r), inner);
  }
  return "";
}

std::string_view shape_class(Shape shape) {
  switch (shape) {
    case Shape::circle: return "mark filled";
    case Shape::ring: return "mark hollow";
    case Shape::square: return "mark filled";
    case Shape::diamond: return "mark filled";
    case Shape::triangle: return "mark hollow";
    case Shape::cross: return "mark stroked";
  }
  return "mark";
}

}  // namespace

std::string_view symbol(Shape shape) {
  switch (shape) {
    case Shape::circle: return "\u25CF";    // ●
    case Shape::ring: return "\u25CB";      // ○
    case Shape::square: return "\u25A0";    // ■
    case Shape::diamond: return "\u25C6";   // ◆
    case Shape::triangle: return "\u25B3";  // △
    case Shape::cross: return "\u2715";     // ✕
  }
  return "";
}

Range padded_range(const std::vector<double>& values) {
  if (values.empty()) return {0, 1};
  const auto [low, high] = std::minmax_element(values.begin(), values.end());
  double room = (*high - *low) * 0.05;
  if (room <= 0) room = std::abs(*low) > 0 ? std::abs(*low) * 0.05 : 1.0;
  return {*low - room, *high + room};
}

std::vector<Tick> round_ticks(Range range, std::size_t count) {
  std::vector<Tick> ticks;
  const double span = range.high - range.low;
  if (!(span > 0) || !std::isfinite(span) || count == 0) return ticks;
  const double raw = span / static_cast<double>(count);
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  // The finest round step that gives at most one tick more than asked for.
  double step = magnitude;
  for (const double factor : {1.0, 2.0, 5.0, 10.0}) {
    step = factor * magnitude;
    if (span / step <= static_cast<double>(count) + 1) break;
  }
  for (double value = std::ceil(range.low / step) * step; value <= range.high; value += step) {
    // A tick at -0 or at 1e-17 from rounding is zero.
    const double shown = std::abs(value) < step * 1e-9 ? 0.0 : value;
    ticks.push_back({shown, number_text(shown)});
  }
  return ticks;
}

Plot::Plot(std::string kind, std::string id, std::string title, std::string description, Range x, Range y)
    : kind_(std::move(kind)), id_(std::move(id)), title_(std::move(title)), description_(std::move(description)),
      x_(x), y_(y) {}

void Plot::set_ticks(std::vector<Tick> x, std::vector<Tick> y) {
  x_ticks_ = std::move(x);
  y_ticks_ = std::move(y);
}

void Plot::set_axis_labels(std::string x, std::string y) {
  x_label_ = std::move(x);
  y_label_ = std::move(y);
}

double Plot::px(double x) const {
  const double span = x_.high - x_.low;
  return kLeft + (span > 0 ? (x - x_.low) / span : 0.5) * (kWidth - kLeft - kRight);
}

double Plot::py(double y) const {
  const double span = y_.high - y_.low;
  return kHeight - kBottom - (span > 0 ? (y - y_.low) / span : 0.5) * (kHeight - kTop - kBottom);
}

void Plot::point(std::string_view series, Shape shape, XY at, std::string_view label, std::string_view link) {
  const std::string attributes =
      fmt::format("class=\"{} series-{}\" data-series=\"{}\"", shape_class(shape), escape(series), escape(series));
  std::string mark = shape_element(shape, px(at.first), py(at.second), attributes,
                                   fmt::format("<title>{}</title>", escape(label)));
  if (!link.empty()) mark = fmt::format("<a href=\"{}\">{}</a>", escape(link), mark);
  marks_ += mark + "\n";
}

void Plot::polyline(std::string_view css_class, const std::vector<XY>& points) {
  if (points.size() < 2) return;
  std::vector<XY> placed;
  for (const auto& [x, y] : points) placed.emplace_back(px(x), py(y));
  marks_ += fmt::format("<polyline class=\"{}\" points=\"{}\"/>\n", escape(css_class), points_attribute(placed));
}

void Plot::band(std::string_view css_class, const std::vector<XY>& low, const std::vector<XY>& high) {
  if (low.size() < 2 || low.size() != high.size()) return;
  std::vector<XY> outline;
  for (const auto& [x, y] : high) outline.emplace_back(px(x), py(y));
  for (auto it = low.rbegin(); it != low.rend(); ++it) outline.emplace_back(px(it->first), py(it->second));
  marks_ += fmt::format("<polygon class=\"{}\" points=\"{}\"/>\n", escape(css_class), points_attribute(outline));
}

void Plot::horizontal_rule(std::string_view css_class, double y, std::string_view label) {
  const double at = py(y);
  marks_ += fmt::format(
      "<g class=\"{}\"><line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\"/><text x=\"{}\" y=\"{}\">{}</text></g>\n",
      escape(css_class), coordinate(kLeft), coordinate(at), coordinate(kWidth - kRight), coordinate(at),
      coordinate(kLeft + 4), coordinate(at - 4), escape(label));
}

void Plot::vertical_rule(std::string_view css_class, double x, std::string_view label) {
  const double at = px(x);
  marks_ += fmt::format(
      "<g class=\"{}\"><line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\"/><text x=\"{}\" y=\"{}\">{}</text></g>\n",
      escape(css_class), coordinate(at), coordinate(kTop), coordinate(at), coordinate(kHeight - kBottom),
      coordinate(at + 4), coordinate(kTop + 10), escape(label));
}

std::string Plot::svg() const {
  std::string out = fmt::format(
      "<svg class=\"plot\" data-plot=\"{}\" id=\"{}\" role=\"img\" aria-labelledby=\"{}-title {}-desc\" "
      "viewBox=\"0 0 {} {}\" width=\"{}\" height=\"{}\">\n"
      "<title id=\"{}-title\">{}</title>\n<desc id=\"{}-desc\">{}</desc>\n",
      escape(kind_), escape(id_), escape(id_), escape(id_), kWidth, kHeight, kWidth, kHeight, escape(id_),
      escape(title_), escape(id_), escape(description_));
  const double bottom = kHeight - kBottom;
  out += fmt::format("<g class=\"axes\"><line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\"/>"
                     "<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\"/>\n",
                     kLeft, kTop, kLeft, bottom, kLeft, bottom, kWidth - kRight, bottom);
  for (const Tick& tick : y_ticks_) {
    const double y = py(tick.value);
    out += fmt::format("<line class=\"grid\" x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\"/>"
                       "<text class=\"tick\" x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text>\n",
                       kLeft, coordinate(y), kWidth - kRight, coordinate(y), kLeft - 6, coordinate(y + 4),
                       escape(tick.label));
  }
  for (const Tick& tick : x_ticks_) {
    const double x = px(tick.value);
    out += fmt::format("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\"/>"
                       "<text class=\"tick\" x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n",
                       coordinate(x), bottom, coordinate(x), bottom + 4, coordinate(x), bottom + 16,
                       escape(tick.label));
  }
  out += fmt::format("<text class=\"axis-label\" x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n",
                     (kLeft + kWidth - kRight) / 2, kHeight - 8, escape(x_label_));
  out += fmt::format("<text class=\"axis-label\" transform=\"translate(14 {}) rotate(-90)\" "
                     "text-anchor=\"middle\">{}</text></g>\n",
                     (kTop + bottom) / 2, escape(y_label_));
  return out + marks_ + "</svg>\n";
}

}  // namespace kiln::report

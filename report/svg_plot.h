// One inline SVG plot for the report pages: a <title> and <desc> for screen readers, axes with
// ticks, and marks. Every data point is one element with data-series="NAME" and a shape of its
// own per kind (not only a colour), so a reader without colour, and a test, can tell and count
// what the plot shows.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kiln::report {

enum class Shape { circle, ring, square, diamond, triangle, cross };

// The same shape as a character, for legends written in text.
std::string_view symbol(Shape shape);

struct Range {
  double low = 0;
  double high = 1;
};

// The values' span with 5% room on each side; a single value gets room of 5% of itself.
Range padded_range(const std::vector<double>& values);

struct Tick {
  double value = 0;
  std::string label;
};

// At most about `count` ticks at round numbers (1, 2 or 5 times a power of ten) inside the range.
std::vector<Tick> round_ticks(Range range, std::size_t count = 5);

using XY = std::pair<double, double>;

class Plot {
 public:
  // `kind` names what is plotted (data-plot="..."); `id` is unique in the page and safe as an id.
  Plot(std::string kind, std::string id, std::string title, std::string description, Range x, Range y);

  void set_ticks(std::vector<Tick> x, std::vector<Tick> y);
  void set_axis_labels(std::string x, std::string y);

  // One data point; `label` is its tooltip (escaped here), `link` a relative page to open.
  void point(std::string_view series, Shape shape, XY at, std::string_view label, std::string_view link = {});
  void polyline(std::string_view css_class, const std::vector<XY>& points);
  // The area between two lines over the same x values (a band around a curve).
  void band(std::string_view css_class, const std::vector<XY>& low, const std::vector<XY>& high);
  void horizontal_rule(std::string_view css_class, double y, std::string_view label);
  void vertical_rule(std::string_view css_class, double x, std::string_view label);

  std::string svg() const;

 private:
  double px(double x) const;
  double py(double y) const;

  std::string kind_;
  std::string id_;
  std::string title_;
  std::string description_;
  Range x_;
  Range y_;
  std::vector<Tick> x_ticks_;
  std::vector<Tick> y_ticks_;
  std::string x_label_;
  std::string y_label_;
  std::string marks_;
};

}  // namespace kiln::report

#include "report/evidence_plots.h"

#include <algorithm>
#include <cmath>
#include <map>

#include <fmt/format.h>

#include "report/html.h"
#include "report/report_fields.h"
#include "report/svg_plot.h"

namespace kiln::report {

namespace {

struct LoggedPoint {
  double step = 0;
  std::optional<double> loss;  // none: not finite
  std::string raw;             // what the report says when not finite ("nan", "inf")
};

// The points of a curve that have a step; their loss may be a number or "nan", "inf", "-inf".
std::vector<LoggedPoint> logged_points(const Json& curve) {
  std::vector<LoggedPoint> points;
  if (!curve.is_array()) return points;
  for (const Json& point : curve) {
    const Json& step = member(point, "step");
    if (!step.is_number()) continue;
    const Json& loss = member(point, "loss");
    points.push_back({step.get<double>(), finite(loss), loss.is_string() ? loss.get<std::string>() : "missing"});
  }
  return points;
}

std::string short_id(const std::string& text) { return text.size() > 12 ? text.substr(0, 11) + "\u2026" : text; }

// A candidate's index as the report gives it; a damaged one (negative, absurdly large) is none.
std::optional<std::size_t> candidate_index(const Json& object, std::string_view key) {
  const Json& value = member(object, key);
  if (!value.is_number_integer()) return std::nullopt;
  const auto index = value.get<std::int64_t>();
  if (index < 0 || index >= 1000000) return std::nullopt;
  return static_cast<std::size_t>(index);
}

}  // namespace

std::string loss_plot(const std::string& id, std::string_view model, const Json& training) {
  const auto reference = logged_points(member(training, "reference_loss_curve"));
  const auto actual = logged_points(member(training, "loss_curve"));
  if (actual.empty() && reference.empty()) return "";
  const auto band = number_of(training, "band_relative");
  const double warmup = static_cast<double>(integer_of(training, "warmup_steps"));

  std::map<double, double> reference_at;
  std::vector<double> steps;
  std::vector<double> losses;
  std::vector<XY> reference_line;
  std::vector<XY> low;
  std::vector<XY> high;
  for (const LoggedPoint& point : reference) {
    steps.push_back(point.step);
    if (!point.loss) continue;
    reference_at[point.step] = *point.loss;
    reference_line.emplace_back(point.step, *point.loss);
    losses.push_back(*point.loss);
    if (band && point.step >= warmup) {
      const double room = *band * std::abs(*point.loss);
      low.emplace_back(point.step, *point.loss - room);
      high.emplace_back(point.step, *point.loss + room);
      losses.push_back(*point.loss - room);
      losses.push_back(*point.loss + room);
    }
  }
  for (const LoggedPoint& point : actual) {
    steps.push_back(point.step);
    if (point.loss) losses.push_back(*point.loss);
  }
  const Range y = padded_range(losses);

  // Each logged point: where it is drawn, its shape, and its row in the table under the plot.
  struct Placed {
    Shape shape;
    XY at;
    std::string label;
    std::string row;
  };
  std::vector<Placed> placed;
  std::size_t outside = 0;
  std::size_t not_finite = 0;
  for (const LoggedPoint& point : actual) {
    const std::string step = number_text(point.step);
    if (!point.loss) {
      ++not_finite;
      placed.push_back({Shape::triangle, {point.step, y.high},
                        fmt::format("step {}: loss {} (not finite: fails the gate)", step, point.raw),
                        fmt::format("<td>{}</td><td></td><td>{}</td><td></td><td>not finite</td>", step,
                                    escape(point.raw))});
      continue;
    }
    const auto ref = reference_at.find(point.step);
    if (ref == reference_at.end()) {
      placed.push_back({Shape::ring, {point.step, *point.loss},
                        fmt::format("step {}: loss {} (no reference point at this step: not compared)", step,
                                    number_text(*point.loss)),
                        fmt::format("<td>{}</td><td></td><td>{}</td><td></td><td>not compared</td>", step,
                                    number_text(*point.loss))});
      continue;
    }
    const double deviation = std::abs(*point.loss - ref->second) / std::max(std::abs(ref->second), 1e-12);
    const bool out = band && point.step >= warmup && deviation > *band;
    const std::string where = point.step < warmup ? "in the warmup" : out ? "OUTSIDE the band" : "inside";
    if (out) ++outside;
    placed.push_back({out ? Shape::cross : Shape::circle, {point.step, *point.loss},
                      fmt::format("step {}: loss {}, reference {} ({} off, {})", step, number_text(*point.loss),
                                  number_text(ref->second), percent_text(deviation).substr(1), where),
                      fmt::format("<td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>", step,
                                  number_text(ref->second), number_text(*point.loss), percent_text(deviation).substr(1),
                                  where)});
  }

  const std::string band_text = band ? fmt::format("\u00B1{:g}% band", *band * 100) : "band";
  Plot plot("loss", id, fmt::format("Loss curve of {} against its reference", model),
            fmt::format("{} logged points of this run ({} outside the {}, {} not finite) against the reference curve "
                        "of {} points and its {}",
                        actual.size(), outside, band_text, not_finite, reference.size(), band_text),
            padded_range(steps), y);
  plot.set_ticks(round_ticks(padded_range(steps)), round_ticks(y));
  plot.set_axis_labels("training step", "loss");
  plot.band("band", low, high);
  plot.polyline("reference-line", reference_line);
  if (warmup > 0) plot.vertical_rule("rule", warmup, "warmup ends");
  std::string rows;
  for (const Placed& point : placed) {
    plot.point("loss", point.shape, point.at, point.label);
    rows += "<tr>" + point.row + "</tr>\n";
  }
  return plot.svg() +
         fmt::format("<p class=\"legend\">dashed: the reference curve, shaded: its {} &middot; {} this run's points "
                     "inside &middot; {} outside the band &middot; {} not finite (drawn at the top) &middot; {} not "
                     "compared</p>\n",
                     escape(band_text), symbol(Shape::circle), symbol(Shape::cross), symbol(Shape::triangle),
                     symbol(Shape::ring)) +
         fmt::format("<details><summary>The {} points as a table ({} outside the band)</summary><table><thead><tr>"
                     "<th scope=\"col\">step</th><th scope=\"col\">reference</th><th scope=\"col\">this run</th>"
                     "<th scope=\"col\">off by</th><th scope=\"col\">where</th></tr></thead><tbody>\n{}</tbody>"
                     "</table></details>\n",
                     actual.size(), outside, rows);
}

std::string bisection_plot(const std::string& id, std::string_view model, const Json& bisection) {
  struct Probed {
    std::int64_t round = 0;
    std::size_t index = 0;
    const Json* probe = nullptr;
  };
  std::vector<Probed> placed;
  const Json& probes = items(bisection, "probes");
  for (std::size_t i = 0; i < probes.size(); ++i) {
    const auto index = candidate_index(probes[i], "change_index");
    if (!index) continue;
    // Reports from before rounds were kept: each probe its own round, in arrival order.
    const std::int64_t round = integer_of(probes[i], "round") > 0 ? integer_of(probes[i], "round")
                                                                   : static_cast<std::int64_t>(i) + 1;
    placed.push_back({std::min<std::int64_t>(round, 1000000), *index, &probes[i]});
  }
  if (placed.empty()) return "";
  std::vector<std::string> candidates = texts(member(bisection, "candidates"));
  const auto culprit = candidate_index(bisection, "culprit_index");
  // Reports from before the candidates were kept: as many as the probes and the culprit show.
  std::size_t count = std::max(candidates.size(), culprit ? *culprit + 1 : 0);
  std::int64_t rounds = 0;
  for (const Probed& p : placed) {
    count = std::max(count, p.index + 1);
    rounds = std::max(rounds, p.round);
  }
  candidates.resize(count);
  for (const Probed& p : placed) {
    if (candidates[p.index].empty()) candidates[p.index] = text_of(*p.probe, "change");
  }
  const std::string outcome = text_of(bisection, "outcome");
  Plot plot("bisection", id, fmt::format("Bisection of {}: the changes probed, round by round", model),
            fmt::format("{} probes in {} rounds over {} candidate changes in merge order; {}", placed.size(), rounds,
                        count,
                        outcome == "culprit_found"
                            ? fmt::format("culprit {}", text_of(bisection, "culprit"))
                            : fmt::format("{}: no single culprit", outcome.empty() ? "unfinished" : outcome)),
            {0.4, static_cast<double>(rounds) + 0.6}, {-0.6, static_cast<double>(count) - 0.4});
  std::vector<Tick> x_ticks;
  for (std::int64_t r = 1; r <= rounds; ++r) x_ticks.push_back({static_cast<double>(r), fmt::format("{}", r)});
  std::vector<Tick> y_ticks;
  const std::size_t every = std::max<std::size_t>(1, (count + 11) / 12);
  for (std::size_t i = 0; i < count; i += every) y_ticks.push_back({static_cast<double>(i), short_id(candidates[i])});
  plot.set_ticks(std::move(x_ticks), std::move(y_ticks));
  plot.set_axis_labels("round (probes started together)", "change (merge order)");
  if (outcome == "culprit_found" && culprit) {
    plot.horizontal_rule("culprit", static_cast<double>(*culprit), "culprit " + text_of(bisection, "culprit"));
  }
  std::map<std::pair<std::int64_t, std::size_t>, int> probes_of_change;
  for (const Probed& p : placed) {
    const std::string verdict = text_of(*p.probe, "verdict");
    const Shape shape = verdict == "good" ? Shape::circle : verdict == "bad" ? Shape::cross : Shape::triangle;
    // Probes of one change in one round (a retry) sit side by side.
    const double x = static_cast<double>(p.round) + 0.12 * probes_of_change[{p.round, p.index}]++;
    std::string label = fmt::format("round {}: change {} (attempt {}): {}", p.round, text_of(*p.probe, "change"),
                                    integer_of(*p.probe, "attempt"), verdict);
    if (flag_of(*p.probe, "obsolete")) label += " (arrived after it was cancelled)";
    if (flag_of(*p.probe, "contradicts")) label += " (contradicts the others)";
    if (!text_of(*p.probe, "detail").empty()) label += ": " + text_of(*p.probe, "detail");
    plot.point("probe", shape, {x, static_cast<double>(p.index)}, label);
  }
  return plot.svg() + fmt::format("<p class=\"legend\">{} good (the bundle up to that change passes) &middot; {} bad "
                                  "&middot; {} inconclusive &middot; dashed: the culprit</p>\n",
                                  symbol(Shape::circle), symbol(Shape::cross), symbol(Shape::triangle));
}

}  // namespace kiln::report

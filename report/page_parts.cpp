#include "report/page_parts.h"

#include <algorithm>
#include <map>

#include <fmt/format.h>

#include "report/html.h"
#include "report/report_fields.h"
#include "report/svg_plot.h"

namespace kiln::report {

namespace {

constexpr std::string_view kStyle = R"(
body { font-family: system-ui, sans-serif; margin: 1.5rem auto; max-width: 90rem; padding: 0 1rem; color: #1a1a1a; line-height: 1.45; }
nav { margin-bottom: 1rem; }
h1 { font-size: 1.5rem; margin: 0 0 .4rem; }
h2 { margin-top: 2rem; border-bottom: 1px solid #ccc; }
table { border-collapse: collapse; margin: .5rem 0; }
th, td { border: 1px solid #c8c8c8; padding: .25rem .5rem; text-align: left; vertical-align: top; }
th { background: #f3f3f3; }
code, pre { font-family: ui-monospace, monospace; font-size: .9em; }
pre { background: #f6f6f6; padding: .5rem; overflow-x: auto; white-space: pre-wrap; }
.verdict { padding: .75rem 1rem; border-left: .6rem solid #777; background: #f4f4f4; }
.v-passed { border-color: #2a7d2a; background: #eef7ee; }
.v-failed { border-color: #b00020; background: #fdecee; }
.v-error { border-color: #b35c00; background: #fff4e5; }
.v-running { border-color: #1f5fa8; background: #eaf2fb; }
.why { font-size: 1.1rem; font-weight: 600; }
.mv-bad { color: #9b001c; font-weight: 600; }
.mv-look { color: #8a4b00; }
.mv-good { color: #1e6b1e; }
.changed { font-weight: 600; }
.legend { font-size: .9em; margin: 0 0 1rem; }
.graphs { display: grid; grid-template-columns: repeat(auto-fill, minmax(28rem, 1fr)); gap: 1rem; }
.graphs figure { margin: 0; }
.graphs figcaption { font-weight: 600; }
svg.plot { max-width: 100%; height: auto; background: #fff; border: 1px solid #e0e0e0; }
svg.plot text { font-size: 11px; fill: #333; }
svg.plot .axes line { stroke: #555; }
svg.plot line.grid { stroke: #ececec; }
svg.plot .mark { stroke-width: 1.2; }
svg.plot .mark.filled { stroke: #222; }
svg.plot .mark.hollow { fill: #fff; }
svg.plot .mark.stroked { fill: none; stroke-width: 2; }
svg.plot .series-history { fill: #1f5fa8; stroke: #1f5fa8; }
svg.plot .series-baseline, svg.plot .series-confirmation-baseline { fill: #777; stroke: #333; }
svg.plot .series-candidate, svg.plot .series-confirmation-candidate { fill: #d17a00; stroke: #8a4b00; }
svg.plot .series-loss.filled { fill: #1f5fa8; }
svg.plot .series-loss.stroked, svg.plot .series-loss.hollow { stroke: #b00020; }
svg.plot .series-probe.filled { fill: #2a7d2a; }
svg.plot .series-probe.stroked { stroke: #b00020; }
svg.plot .series-probe.hollow { stroke: #8a4b00; }
svg.plot polyline { fill: none; stroke-width: 1.5; }
svg.plot .history-line { stroke: #1f5fa8; }
svg.plot .reference-line { stroke: #333; stroke-dasharray: 5 3; }
svg.plot .band { fill: #1f5fa8; fill-opacity: .12; stroke: none; }
svg.plot .rule line { stroke: #333; stroke-dasharray: 6 4; }
svg.plot .culprit line { stroke: #b00020; stroke-dasharray: 6 4; }
svg.plot .rule text, svg.plot .culprit text { paint-order: stroke; stroke: #fff; stroke-width: 3px; }
)";

struct VerdictLook {
  std::string_view css;
  std::string_view symbol;
};

// Each verdict has a word, a symbol and a class: the colour only repeats what they say.
const std::map<std::string_view, VerdictLook>& model_looks() {
  static const std::map<std::string_view, VerdictLook> looks = {
      {"passed", {"mv-good", "\u2713"}},                       // ✓
      {"improved", {"mv-good", "\u25B2"}},                     // ▲
      {"performance_regression", {"mv-bad", "\u25BC"}},        // ▼
      {"correctness_regression", {"mv-bad", "\u2717"}},        // ✗
      {"hardware_suspect", {"mv-bad", "\u26A0"}},              // ⚠
      {"error", {"mv-bad", "\u26A0"}},
      {"flaky", {"mv-look", "\u223C"}},                        // ∼
      {"inconclusive", {"mv-look", "?"}},
      {"skipped", {"mv-look", "\u2013"}},                      // –
      {"pending", {"mv-look", "\u2026"}},                      // …
  };
  return looks;
}

std::string short_date(TimeMs at_ms) {
  const std::string time = utc_time(at_ms);
  return time.size() >= 10 ? time.substr(5, 5) : std::string();  // "12-03"
}

// Samples of one column spread a little sideways so that equal values stay visible.
double spread(double column, std::size_t index) { return column + (static_cast<double>(index % 5) - 2.0) * 0.03; }

}  // namespace

std::string page_start(std::string_view title) {
  return fmt::format(
      "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
      "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'\">\n"
      "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<title>{}</title>\n"
      "<style>{}</style>\n</head>\n<body>\n",
      escape(title), kStyle);
}

std::string page_end() { return "</body>\n</html>\n"; }

std::string run_verdict_class(std::string_view word) {
  if (word == "passed" || word == "failed" || word == "error" || word == "running") return fmt::format("v-{}", word);
  return "v-other";
}

std::string_view run_verdict_symbol(std::string_view word) {
  if (word == "passed") return "\u2713";
  if (word == "failed") return "\u2717";
  if (word == "error") return "\u26A0";
  return "\u2026";
}

std::string model_verdict_html(std::string_view verdict) {
  const auto it = model_looks().find(verdict);
  const VerdictLook look = it != model_looks().end() ? it->second : VerdictLook{"mv-other", "\u2022"};
  return fmt::format("<span class=\"{}\"><span aria-hidden=\"true\">{}</span> {}</span>", look.css, look.symbol,
                     escape(verdict));
}

Histories histories_of(std::span<const RunDigest> runs) {
  Histories histories;
  for (const RunDigest& run : runs) {
    for (const ModelThroughput& entry : run.throughputs) {
      histories[{entry.model, entry.revision}].push_back({run.run_id, run.started_at_ms, entry.throughput,
                                                          entry.estimated});
    }
  }
  for (auto& [pair, points] : histories) {
    std::stable_sort(points.begin(), points.end(),
                     [](const HistoryPoint& a, const HistoryPoint& b) { return a.started_at_ms < b.started_at_ms; });
    if (points.size() > kHistoryRuns) points.erase(points.begin(), points.end() - kHistoryRuns);
  }
  return histories;
}

std::string throughput_plot(const std::string& id, std::string_view model, std::string_view revision,
                            const std::vector<HistoryPoint>& history, const ThisRun* this_run) {
  const bool has_samples = this_run != nullptr && (!this_run->candidate.empty() || !this_run->baseline.empty());
  if (history.empty() && !has_samples) return "";
  const bool has_rerun = has_samples && (!this_run->confirmation_candidate.empty() ||
                                         !this_run->confirmation_baseline.empty());
  std::vector<double> values;
  for (const HistoryPoint& point : history) values.push_back(point.throughput);
  if (has_samples) {
    for (const auto* list : {&this_run->baseline, &this_run->candidate, &this_run->confirmation_baseline,
                             &this_run->confirmation_candidate}) {
      values.insert(values.end(), list->begin(), list->end());
    }
  }
  const double column = static_cast<double>(history.size());  // this run's, after the history
  const double last = column - (has_samples ? 0.0 : 1.0) + (has_rerun ? 1.0 : 0.0);

  std::string description = fmt::format("{} earlier run{} (the median of each run's candidate samples)",
                                        history.size(), history.size() == 1 ? "" : "s");
  if (has_samples) {
    description += fmt::format("; this run: {} baseline and {} candidate samples", this_run->baseline.size(),
                               this_run->candidate.size());
    if (has_rerun) {
      description += fmt::format(", confirmation rerun: {} baseline and {} candidate samples",
                                 this_run->confirmation_baseline.size(), this_run->confirmation_candidate.size());
    }
  }
  Plot plot("throughput", id, fmt::format("Throughput of {} on revision {}", model, revision), description,
            {-0.6, std::max(last, 0.0) + 0.6}, padded_range(values));

  std::vector<Tick> x_ticks;
  const std::size_t every = std::max<std::size_t>(1, (history.size() + 7) / 8);
  for (std::size_t i = 0; i < history.size(); i += every) {
    const std::string date = short_date(history[i].started_at_ms);
    x_ticks.push_back({static_cast<double>(i), date.empty() ? fmt::format("#{}", i + 1) : date});
  }
  if (has_samples) x_ticks.push_back({column, "this run"});
  if (has_rerun) x_ticks.push_back({column + 1, "rerun"});
  plot.set_ticks(std::move(x_ticks), round_ticks(padded_range(values)));
  plot.set_axis_labels("runs, oldest first", "throughput");

  std::vector<XY> line;
  for (std::size_t i = 0; i < history.size(); ++i) line.emplace_back(static_cast<double>(i), history[i].throughput);
  plot.polyline("history-line", line);
  if (has_samples && !this_run->baseline.empty()) {
    const double accepted = median(this_run->baseline);
    plot.horizontal_rule("rule", accepted,
                         fmt::format("accepted baseline {}: median {}", this_run->baseline_bundle_id.substr(0, 12),
                                     number_text(accepted)));
  }
  for (std::size_t i = 0; i < history.size(); ++i) {
    const HistoryPoint& point = history[i];
    plot.point("history", point.estimated ? Shape::ring : Shape::circle, {static_cast<double>(i), point.throughput},
               fmt::format("{}{}: {}{}", point.run_id, point.started_at_ms > 0 ? " (" + utc_time(point.started_at_ms) + ")" : "",
                           number_text(point.throughput),
                           point.estimated ? " (estimated from the comparison: that report kept no samples)" : ""),
               run_page_name(point.run_id));
  }
  if (has_samples) {
    const auto samples = [&](std::string_view series, Shape shape, double at, const std::vector<double>& list,
                             std::string_view what) {
      for (std::size_t i = 0; i < list.size(); ++i) {
        plot.point(series, shape, {spread(at, i), list[i]},
                   fmt::format("{} sample {} of {}: {}", what, i + 1, list.size(), number_text(list[i])));
      }
    };
    samples("baseline", Shape::square, column - 0.2, this_run->baseline, "baseline");
    samples("candidate", Shape::diamond, column + 0.2, this_run->candidate, "candidate");
    samples("confirmation-baseline", Shape::triangle, column + 0.8, this_run->confirmation_baseline,
            "confirmation rerun, baseline");
    samples("confirmation-candidate", Shape::cross, column + 1.2, this_run->confirmation_candidate,
            "confirmation rerun, candidate");
  }

  if (this_run == nullptr) return plot.svg();  // the index says once what its points are
  std::string legend = fmt::format("{} earlier runs (median; {} estimated from an old report's comparison)",
                                   symbol(Shape::circle), symbol(Shape::ring));
  if (has_samples) {
    legend += fmt::format(" &middot; {} baseline samples &middot; {} candidate samples &middot; dashed: the "
                          "accepted baseline's median",
                          symbol(Shape::square), symbol(Shape::diamond));
  }
  if (has_rerun) {
    legend += fmt::format(" &middot; confirmation rerun: {} baseline, {} candidate", symbol(Shape::triangle),
                          symbol(Shape::cross));
  }
  return plot.svg() + fmt::format("<p class=\"legend\">{}</p>\n", legend);
}

}  // namespace kiln::report

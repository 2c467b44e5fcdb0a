// What both pages are made of: the frame (head, style, security policy), verdict marks that do
// not rely on colour, and the throughput history plot (the index's per model, the run page's
// with this run's samples).
#pragma once

#include <map>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "report/pages.h"

namespace kiln::report {

std::string page_start(std::string_view title);
std::string page_end();

// A run's verdict word as a CSS class and a symbol; a model's verdict likewise (unknown ones
// get a neutral class: the class never carries text from the report).
std::string run_verdict_class(std::string_view word);
std::string_view run_verdict_symbol(std::string_view word);
std::string model_verdict_html(std::string_view verdict);

// Each model's throughputs in the runs, by (model, revision), in start order, the latest
// kHistoryRuns.
struct HistoryPoint {
  std::string run_id;
  TimeMs started_at_ms = 0;
  double throughput = 0;
  bool estimated = false;
};
using Histories = std::map<std::pair<std::string, std::string>, std::vector<HistoryPoint>>;
Histories histories_of(std::span<const RunDigest> runs);

// The run page's own column of the plot: the samples of its first comparison and of the
// confirmation rerun, and the accepted baseline they were compared with.
struct ThisRun {
  std::vector<double> baseline;
  std::vector<double> candidate;
  std::vector<double> confirmation_baseline;
  std::vector<double> confirmation_candidate;
  std::string baseline_bundle_id;
};

// The plot, with its legend on a run page (this_run given); "" when there is nothing to draw.
std::string throughput_plot(const std::string& id, std::string_view model, std::string_view revision,
                            const std::vector<HistoryPoint>& history, const ThisRun* this_run);

}  // namespace kiln::report

// The index: the latest runs, newest first, and each model's throughput across the runs (a
// Perfherder-style graph per model and revision, each point a link to its run's page).
#include <algorithm>

#include <fmt/format.h>

#include "report/html.h"
#include "report/page_parts.h"
#include "report/pages.h"
#include "report/svg_plot.h"

namespace kiln::report {

std::string render_index_page(std::span<const RunDigest> runs) {
  std::vector<const RunDigest*> newest_first;
  for (const RunDigest& run : runs) newest_first.push_back(&run);
  std::stable_sort(newest_first.begin(), newest_first.end(),
                   [](const RunDigest* a, const RunDigest* b) { return a->started_at_ms > b->started_at_ms; });
  const bool cut = newest_first.size() > kIndexRuns;
  if (cut) newest_first.resize(kIndexRuns);

  std::string out = page_start("kiln qualification runs");
  out += fmt::format("<h1>kiln qualification runs</h1>\n<p>{} runs, newest first{}; each model's throughput across "
                     "them <a href=\"#history\">below</a>.</p>\n",
                     cut ? fmt::format("The latest {}", kIndexRuns) : std::to_string(runs.size()),
                     cut ? " (older runs keep their pages here, named by run id)" : "");
  out += "<section id=\"runs\">\n<table>\n<thead><tr><th scope=\"col\">run</th><th scope=\"col\">kind</th>"
         "<th scope=\"col\">verdict</th><th scope=\"col\">why</th><th scope=\"col\">started</th>"
         "<th scope=\"col\">duration</th><th scope=\"col\">bundle</th></tr></thead>\n<tbody>\n";
  for (const RunDigest* run : newest_first) {
    const std::string duration = run->finished && run->started_at_ms > 0 && run->finished_at_ms >= run->started_at_ms
                                     ? duration_text(run->finished_at_ms - run->started_at_ms)
                                     : (run->finished ? "" : "running");
    out += fmt::format(
        "<tr class=\"{}\"><td><a href=\"{}\">{}</a></td><td>{}</td><td><span aria-hidden=\"true\">{}</span> {}</td>"
        "<td>{}</td><td>{}</td><td>{}</td><td><code>{}</code></td></tr>\n",
        run_verdict_class(run->verdict.word), escape(run_page_name(run->run_id)), escape(run->run_id), escape(run->tier),
        run_verdict_symbol(run->verdict.word), escape(run->verdict.word), escape(run->verdict.reason),
        escape(utc_time(run->started_at_ms)), escape(duration), escape(run->candidate_bundle_id.substr(0, 12)));
  }
  out += "</tbody>\n</table>\n</section>\n";

  const Histories histories = histories_of(runs);
  out += fmt::format("<section id=\"history\">\n<h2>Throughput history per model</h2>\n<p class=\"legend\">{} a "
                     "run's median candidate throughput ({} estimated from an old report's comparison), the last {} "
                     "runs that measured the model on the revision, oldest first; each point links to its run.</p>\n",
                     symbol(Shape::circle), symbol(Shape::ring), kHistoryRuns);
  if (histories.empty()) out += "<p>No run has measured a throughput yet.</p>\n";
  out += "<div class=\"graphs\">\n";
  std::size_t index = 0;
  for (const auto& [pair, points] : histories) {
    const auto& [model, revision] = pair;
    out += fmt::format("<figure id=\"model-{}\"><figcaption>{} on revision {}</figcaption>\n{}</figure>\n", index,
                       escape(model), escape(revision),
                       throughput_plot(fmt::format("history-{}", index), model, revision, points, nullptr));
    ++index;
  }
  return out + "</div>\n</section>\n" + page_end();
}

}  // namespace kiln::report

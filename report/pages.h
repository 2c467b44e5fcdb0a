// A qualification run's report as HTML pages a person opens in a browser: one page per run
// (the verdict first, the bundle's versions, a table per model, inline SVG plots of the
// throughput history, the loss curve against its band and the bisection's rounds, the tickets and
// evidence) and an index of every run with each model's throughput history. Pure: report JSON
// (kiln.qualification-run/1, old reports included) in, HTML text out. The pages load nothing
// (no script, font, image or style from anywhere: a Content-Security-Policy forbids it), so they
// work from a directory, offline, and over HTTP alike; they link to each other by relative file
// names (run_page_name, index.html).
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "common/time.h"
#include "qualification/run_verdict.h"

namespace kiln::report {

// A run's verdict for people, and why in one line (qualification/run_verdict.h): running, passed,
// failed or error.
using RunVerdict = qualification::RunVerdict;
RunVerdict run_verdict(const nlohmann::json& report);

// One model on one revision in one run: the median of the candidate's timed throughputs of the
// first comparison, or for a report from before samples were kept, the baseline's median plus
// the Hodges-Lehmann shift (`estimated`).
struct ModelThroughput {
  std::string model;
  std::string revision;
  std::string verdict;
  double throughput = 0;
  bool estimated = false;
};

// What the index and the history plots need of a run, so that a page needs no other report whole.
struct RunDigest {
  std::string run_id;
  std::string tier;
  RunVerdict verdict;
  bool finished = false;
  TimeMs started_at_ms = 0;
  TimeMs finished_at_ms = 0;
  std::string candidate_bundle_id;
  std::vector<ModelThroughput> throughputs;
};
RunDigest digest_of(const nlohmann::json& report);
std::vector<RunDigest> digests_of(std::span<const nlohmann::json> reports);

// The file names of a run's page and JSON beside it: the run id itself when it is made of
// letters, digits, '.', '_' and '-' (not starting with '.', and not "index"), else those
// characters with every other one as '_' and a hash of the id appended, so two ids never share
// a file and no id leaves the directory.
std::string run_page_name(std::string_view run_id);
std::string run_json_name(std::string_view run_id);

// Plots show at most this many runs of history, the latest.
constexpr std::size_t kHistoryRuns = 90;
// The index lists at most this many runs, the latest; older runs keep their pages.
constexpr std::size_t kIndexRuns = 1000;

// Of `runs`, those the pages can show: the kIndexRuns that started last, and for each model and
// revision the kHistoryRuns last to measure it. A reader that keeps only these keeps every page
// as it would be from all the runs, in memory bounded by the models measured.
std::vector<RunDigest> runs_for_pages(std::vector<RunDigest> runs);

// `history`: other runs, in any order; those that started before this one are its history.
std::string render_run_page(const nlohmann::json& report, std::span<const RunDigest> history);
// The kIndexRuns latest runs, newest first, and per model and revision its throughput across
// the runs.
std::string render_index_page(std::span<const RunDigest> runs);

}  // namespace kiln::report

// What every page shows of a run: its verdict and why, its throughputs, its files' names.
#include <algorithm>
#include <map>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "qualification/run_verdict.h"
#include "report/pages.h"
#include "report/report_fields.h"

namespace kiln::report {

namespace {

std::uint64_t fnv1a(std::string_view text) {
  std::uint64_t hash = 14695981039346656037ull;
  for (const char c : text) {
    hash ^= static_cast<unsigned char>(c);
    hash *= 1099511628211ull;
  }
  return hash;
}

bool file_safe(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
         c == '-';
}

std::string file_stem(std::string_view run_id) {
  const bool plain = !run_id.empty() && run_id.front() != '.' && run_id != "index" &&
                     std::all_of(run_id.begin(), run_id.end(), file_safe);
  if (plain) return std::string(run_id);
  std::string stem;
  for (const char c : run_id.substr(0, 64)) stem += file_safe(c) && !(stem.empty() && c == '.') ? c : '_';
  return fmt::format("{}-{:016x}", stem, fnv1a(run_id));
}

}  // namespace

RunVerdict run_verdict(const Json& report) { return qualification::run_verdict(report); }

RunDigest digest_of(const Json& report) {
  RunDigest digest;
  digest.run_id = text_of(report, "run_id");
  digest.tier = text_of(report, "tier");
  digest.verdict = run_verdict(report);
  digest.finished = flag_of(report, "finished");
  digest.started_at_ms = integer_of(report, "started_at_ms");
  digest.finished_at_ms = integer_of(report, "finished_at_ms");
  digest.candidate_bundle_id = text_of(report, "candidate_bundle_id");
  std::set<std::pair<std::string, std::string>> seen;
  for (const Json& model : items(report, "models")) {
    ModelThroughput entry{text_of(model, "model"), text_of(model, "revision"), text_of(model, "verdict"), 0, false};
    // A release's soak rounds list the models again, correctness only: the first entry counts.
    if (!seen.insert({entry.model, entry.revision}).second) continue;
    const Json& performance = member(model, "performance");
    const auto samples = finite_numbers(member(member(performance, "initial_samples"), "candidate"));
    const Json& initial = member(performance, "initial");
    const auto baseline_median = number_of(initial, "baseline_median");
    const auto shift = number_of(initial, "hodges_lehmann");
    if (!samples.empty()) {
      entry.throughput = median(samples);
    } else if (baseline_median && shift) {
      entry.throughput = *baseline_median + *shift;
      entry.estimated = true;
    } else {
      continue;
    }
    digest.throughputs.push_back(std::move(entry));
  }
  return digest;
}

std::vector<RunDigest> digests_of(std::span<const Json> reports) {
  std::vector<RunDigest> digests;
  for (const Json& report : reports) digests.push_back(digest_of(report));
  return digests;
}

std::vector<RunDigest> runs_for_pages(std::vector<RunDigest> runs) {
  std::stable_sort(runs.begin(), runs.end(),
                   [](const RunDigest& a, const RunDigest& b) { return a.started_at_ms > b.started_at_ms; });
  std::map<std::pair<std::string, std::string>, std::size_t> measured;
  std::vector<RunDigest> kept;
  for (std::size_t i = 0; i < runs.size(); ++i) {
    bool keep = i < kIndexRuns;
    for (const ModelThroughput& entry : runs[i].throughputs) {
      if (measured[{entry.model, entry.revision}]++ < kHistoryRuns) keep = true;
    }
    if (keep) kept.push_back(std::move(runs[i]));
  }
  return kept;
}

std::string run_page_name(std::string_view run_id) { return file_stem(run_id) + ".html"; }
std::string run_json_name(std::string_view run_id) { return file_stem(run_id) + ".json"; }

}  // namespace kiln::report

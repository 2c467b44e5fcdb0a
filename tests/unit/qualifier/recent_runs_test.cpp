#include <doctest/doctest.h>

#include <algorithm>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "qualifier/recent_runs.h"

namespace {

using kiln::qualifier::RecentRuns;
namespace r = kiln::report;

constexpr kiln::TimeMs kStartMs = 1'796'000'000'000;

// A run report as the qualifier records it, trimmed to what the pages and the flake ledger read.
nlohmann::json report(int index, bool finished, const std::string& verdict = "pass") {
  const kiln::TimeMs started_ms = kStartMs + index * 60'000;
  return {{"schema", "kiln.qualification-run/1"},
          {"run_id", fmt::format("presubmit-{}", index)},
          {"tier", "presubmit"},
          {"finished", finished},
          {"passed", verdict != "fail"},
          {"started_at_ms", started_ms},
          {"finished_at_ms", finished ? started_ms + 30'000 : 0},
          {"models", {{{"model", "attention-bf16"}, {"revision", "a"}, {"owner_team", "attention-team"},
                       {"verdict", verdict}}}}};
}

bool holds(const std::vector<r::RunDigest>& digests, const std::string& run_id) {
  return std::any_of(digests.begin(), digests.end(), [&](const r::RunDigest& d) { return d.run_id == run_id; });
}

}  // namespace

TEST_CASE("a run is counted in the flake ledger once, when it is first read finished") {
  RecentRuns recent;
  recent.take(report(1, false));
  CHECK(recent.unfinished() == std::vector<std::string>{"presubmit-1"});
  CHECK(recent.flake_ledger().status("attention-bf16", kStartMs + 600'000).runs == 0);
  recent.take(report(1, true, "flaky"));
  CHECK(recent.unfinished().empty());
  CHECK(recent.flake_ledger().status("attention-bf16", kStartMs + 600'000).runs == 1);
  CHECK(recent.flake_ledger().status("attention-bf16", kStartMs + 600'000).flakes == 1);
  // Read finished again (listed as new by another reader's refresh): not counted twice.
  recent.take(report(1, true, "flaky"));
  CHECK(recent.flake_ledger().status("attention-bf16", kStartMs + 600'000).runs == 1);
  // A run first read already finished counts at once.
  recent.take(report(2, true));
  CHECK(recent.flake_ledger().status("attention-bf16", kStartMs + 600'000).runs == 2);
}

TEST_CASE("what the pages need is kept, however many runs are read; a run still going is read again") {
  RecentRuns recent;
  recent.take(report(0, false));  // a long run, still going while thousands finish
  const int runs = static_cast<int>(3 * r::kIndexRuns);
  for (int i = 1; i <= runs; ++i) recent.take(report(i, true, i % 200 == 0 ? "flaky" : "pass"));
  const auto digests = recent.digests();
  CHECK(digests.size() == r::kIndexRuns);
  CHECK(holds(digests, fmt::format("presubmit-{}", runs)));
  CHECK_FALSE(holds(digests, fmt::format("presubmit-{}", runs - static_cast<int>(r::kIndexRuns))));
  CHECK(recent.unfinished() == std::vector<std::string>{"presubmit-0"});
  // Every run counted once for its flakes, though most digests were let go.
  const auto status = recent.flake_ledger().status("attention-bf16", kStartMs + (runs + 1) * 60'000);
  CHECK(status.runs == static_cast<std::size_t>(runs));
  CHECK(status.flakes == static_cast<std::size_t>(runs / 200));
  // The long run finishes: counted, and on the index page by its start.
  recent.take(report(0, true));
  CHECK(recent.unfinished().empty());
  CHECK(recent.flake_ledger().status("attention-bf16", kStartMs + (runs + 1) * 60'000).runs ==
        static_cast<std::size_t>(runs + 1));
}

TEST_CASE("a run judged again after a waiver shows its new verdict, and its runs are not counted again") {
  RecentRuns recent;
  recent.take(report(1, true, "fail"));
  CHECK(recent.digests().front().verdict.word == "failed");
  auto waived = report(1, true, "pass");
  recent.judged_again(waived);
  CHECK(recent.digests().front().verdict.word == "passed");
  CHECK(recent.flake_ledger().status("attention-bf16", kStartMs + 600'000).runs == 1);
}

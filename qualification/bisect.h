// Bisection planner: which change between the last good and the first bad bundle broke the model?
//
// The candidates are the changes the bad bundle adds on top of the good one, in merge order over
// all layers (changes_between). Candidate i stands for the bundle containing changes up to i;
// the last candidate's bundle is the known bad one, the good bundle precedes candidate 0. The
// culprit is the first candidate whose bundle is bad.
//
// k-ary search in rounds: with k free nodes, k probes split the remaining range into k + 1 parts
// of at most ceil(L / (k + 1)) candidates, so a range of n candidates takes at most
// ceil(log_{k+1}(n)) rounds (expected_rounds) when every probe answers. A round is one
// next_probes(free_nodes) that starts probes; the next round is planned only once every probe of
// this one has answered or was cancelled (a result can make running probes pointless, and the
// next plan lists them to cancel), because a round planned around a probe still running splits
// the range unevenly and takes more rounds than the bound. The verdict of a probe comes from the
// caller (repeats and the statistical test, or the correctness gate, on the model's proxy where
// one is declared). Inconclusive probes are retried in the next round up to
// max_attempts_per_change, then that change is skipped (as `git bisect skip`); when only skipped
// changes separate good from bad, the result is ambiguous and names every suspect. Every round
// with an inconclusive answer may add one round to the bound (round_bound). Pure and
// deterministic.
#pragma once

#include <cstddef>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "common/enum_names.h"
#include "common/error.h"
#include "common/stats/perf_gate.h"

namespace kiln::qualification {

enum class ProbeVerdict { good, bad, inconclusive };
constexpr EnumTable<ProbeVerdict, 3> enum_names(ProbeVerdict) {
  return {{
      {ProbeVerdict::good, "good"},
      {ProbeVerdict::bad, "bad"},
      {ProbeVerdict::inconclusive, "inconclusive"},
  }};
}
inline std::string_view to_string(ProbeVerdict value) { return enum_name(value); }

// A probe judged by the performance gate (kiln::stats::compare and decide against the good
// bundle's samples, one targeted test at alpha, after the gate's extra rounds): regression is
// bad, no_change and improvement are good, inconclusive stays inconclusive.
ProbeVerdict probe_verdict_from(stats::Verdict verdict);
// A probe judged by a correctness gate.
ProbeVerdict probe_verdict_from_correctness(bool passed);

struct BisectOptions {
  int max_attempts_per_change = 3;    // inconclusive probes of one change before it is skipped
  std::size_t max_total_probes = 200;  // all probes started; then the bisection stops, ambiguous
};

Status validate(const BisectOptions& options);

struct Probe {
  std::size_t change_index = 0;  // into the candidates
  std::string change_id;
  int attempt = 1;  // 1 for the first probe of this change
};

struct BisectPlan {
  std::vector<Probe> start;                 // new probes, at most the free nodes given
  std::vector<std::size_t> cancel;          // running probes whose answer no longer matters
  bool finished = false;
};

struct ProbeRecord {
  std::size_t change_index = 0;
  std::string change_id;
  int attempt = 1;
  ProbeVerdict verdict = ProbeVerdict::inconclusive;
  std::string detail;        // the caller's evidence: p-value, shift, failed points
  bool obsolete = false;     // arrived after its probe was cancelled
  bool contradicts = false;  // disagrees with what was known (good after a known bad, or the reverse)
  std::size_t round = 1;     // the plan (next_probes that started probes) that started it, from 1
};

enum class BisectOutcome {
  culprit_found,  // the change right after the last good bundle is bad
  ambiguous,      // skipped changes (or the probe budget) leave several suspects
};
std::string_view to_string(BisectOutcome outcome);

struct BisectResult {
  BisectOutcome outcome = BisectOutcome::culprit_found;
  std::size_t culprit_index = 0;  // the first known bad candidate
  std::string culprit_change_id;
  std::vector<std::string> suspects;  // ambiguous: every change that may be the culprit, in order
  std::vector<std::string> candidates;  // every change searched, in merge order
  std::vector<ProbeRecord> evidence;  // every probe result, in arrival order
  std::size_t probes_started = 0;
  std::size_t rounds = 0;  // plans that started probes: the rounds of the k-ary search
  // The most rounds the search may take: expected_rounds(candidates, the fewest free nodes a
  // round was offered) plus the rounds that had an inconclusive answer. rounds <= round_bound.
  std::size_t round_bound = 0;
  std::size_t probes_per_round = 0;  // the fewest free nodes a round was offered (k of the bound)
  std::size_t contradictions = 0;  // > 0: a flaky probe; rerun the culprit's neighbours to be sure
  std::string detail;
};

class Bisection {
 public:
  // Fails when there is no candidate or the change ids are not unique.
  static Result<Bisection> start(std::vector<std::string> candidate_change_ids, BisectOptions options = {});

  // The next round's probes for up to `free_nodes` nodes once no probe is running, and the
  // probes to cancel since the last plan. Empty `start` with finished false: wait for the
  // running probes (or, with no node free, for one).
  BisectPlan next_probes(std::size_t free_nodes);

  // Fails (conflict) for a change with no running or cancelled probe.
  Status on_probe_result(std::size_t change_index, ProbeVerdict verdict, std::string detail = {});

  bool finished() const;
  std::optional<BisectResult> result() const;  // once finished

  std::size_t candidate_count() const { return candidates_.size(); }
  // The culprit lies in [first_unknown(), first_bad()].
  std::size_t first_unknown() const { return good_count_; }
  std::size_t first_bad() const { return bad_index_; }
  const std::set<std::size_t>& running() const { return running_; }
  std::size_t probes_started() const { return probes_started_; }
  // Plans that started probes so far: the rounds of the k-ary search.
  std::size_t rounds() const { return rounds_; }
  // See BisectResult::round_bound; so far.
  std::size_t round_bound() const;

 private:
  Bisection(std::vector<std::string> candidates, BisectOptions options);

  bool probeable(std::size_t index) const;
  bool exhausted() const;  // nothing left to probe and nothing running
  void cancel_obsolete();

  std::vector<std::string> candidates_;
  BisectOptions options_;
  std::size_t good_count_ = 0;  // candidates [0, good_count_) are known good
  std::size_t bad_index_ = 0;   // candidate bad_index_ is known bad
  std::set<std::size_t> running_;
  std::set<std::size_t> cancelled_;
  std::vector<std::size_t> pending_cancels_;
  std::map<std::size_t, int> attempts_;  // probes started per candidate
  std::map<std::size_t, std::size_t> round_of_;  // the plan that started each candidate's latest probe
  std::size_t rounds_ = 0;                        // plans that started probes
  std::size_t fewest_offered_ = 0;                // free nodes of the round offered the fewest
  std::set<std::size_t> inconclusive_rounds_;     // rounds with an inconclusive answer
  std::set<std::size_t> skipped_;        // inconclusive max_attempts_per_change times
  std::vector<ProbeRecord> evidence_;
  std::size_t probes_started_ = 0;
  std::size_t contradictions_ = 0;
};

// Rounds a k-ary search needs for n candidates when every round runs k probes: the smallest r
// with (k + 1)^r >= n (0 for n <= 1). Also the worst case of any search that learns one of
// k + 1 outcomes per round, and the rounds Bisection takes at most when every probe answers.
std::size_t expected_rounds(std::size_t candidates, std::size_t parallel_probes);

nlohmann::json to_json(const BisectResult& result);

}  // namespace kiln::qualification

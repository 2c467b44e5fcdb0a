// Hardware or software? A failed run is rerun with the same bundle on another healthy node of the
// same hardware revision:
//
//   every rerun passes        hardware suspect: quarantine the first node, ticket to the lab
//   every rerun fails         software regression: bisect it
//   reruns disagree           flaky: count it against the test's flake budget, with its owner
//
// A flaky test that passes on the other node would look like a hardware fault after one rerun,
// so the shell should rerun more than once (min_reruns); optional reruns on the first node tell
// "the first node keeps failing" (hardware) from "it fails once in a while anywhere" (flaky).
// Pure: the shell runs the reruns and hands in the outcomes; time comes in as an argument.
#pragma once

#include <cstddef>
#include <deque>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/enum_names.h"
#include "common/error.h"
#include "common/time.h"

namespace kiln::qualification {

enum class RunOutcome { passed, failed };

struct FailedRun {
  std::string test;  // the qualification model's name
  std::string owner_team;
  std::string node_id;
  std::string revision;
  std::string bundle_id;
};

struct RerunReport {
  std::string node_id;  // the other node
  std::string revision;
  std::string bundle_id;
  bool node_healthy = true;
  std::vector<RunOutcome> outcomes;         // reruns on the other node
  std::vector<RunOutcome> origin_outcomes;  // optional reruns on the failing node
};

enum class TriageDecision { hardware_suspect, software_regression, flaky };
constexpr EnumTable<TriageDecision, 3> enum_names(TriageDecision) {
  return {{
      {TriageDecision::hardware_suspect, "hardware_suspect"},
      {TriageDecision::software_regression, "software_regression"},
      {TriageDecision::flaky, "flaky"},
  }};
}
inline std::string_view to_string(TriageDecision value) { return enum_name(value); }

struct TriageOptions {
  std::string lab_team = "lab";  // who gets hardware tickets
  std::size_t min_reruns = 1;    // on the other node; 3 tells a flaky test from a bad node better
};

struct TriageAction {
  TriageDecision decision = TriageDecision::software_regression;
  std::optional<std::string> quarantine_node;  // hardware_suspect: the first node
  std::optional<std::string> ticket_team;      // hardware_suspect: the lab; flaky: see FlakeLedger
  bool start_bisection = false;                // software_regression
  bool count_flake = false;                    // flaky: FlakeLedger::record_run(..., flaky = true)
  std::string reason;
};

// Fails (invalid_argument) when the rerun does not qualify: the same node, another revision,
// another bundle, an unhealthy node, or fewer than min_reruns outcomes.
Result<TriageAction> triage(const FailedRun& failure, const RerunReport& rerun, const TriageOptions& options = {});

struct NodeCandidate {
  std::string id;
  std::string revision;
  bool healthy = true;
  bool free = false;  // no job right now: the rerun starts at once
};

// Another healthy node of the failure's revision: a free one if any, then by id. nullopt when
// there is none (the failure waits, or is reported as unconfirmed).
std::optional<std::string> choose_rerun_node(const FailedRun& failure, std::span<const NodeCandidate> nodes);

struct FlakeBudgetOptions {
  double max_flake_rate = 0.01;                // the budget: under 1% of runs
  DurationMs window_ms = 14 * 24 * kHourMs;    // runs older than this no longer count
  // The rate is taken over at least this many runs, so a young test is not over budget for its
  // first flake (1% of 100 runs allows one).
  std::size_t min_runs_for_rate = 100;
  std::size_t max_runs_kept_per_test = 100000;  // a limit on memory, oldest dropped first
};

Status validate(const FlakeBudgetOptions& options);

struct FlakeBudgetStatus {
  std::string test;
  std::string owner_team;
  std::size_t runs = 0;    // in the window
  std::size_t flakes = 0;  // in the window
  double flake_rate = 0.0; // flakes / runs (0 without runs)
  bool over_budget = false;  // flakes > max_flake_rate x max(runs, min_runs_for_rate)
};

// Runs and flakes per test over a sliding window. Record every run of a test, with flaky set for
// runs triage called flaky.
class FlakeLedger {
 public:
  explicit FlakeLedger(FlakeBudgetOptions options = {});

  // Times should not go backwards per test; an older run is still counted while in the window.
  void record_run(std::string_view test, std::string_view owner_team, TimeMs at_ms, bool flaky);
  FlakeBudgetStatus status(std::string_view test, TimeMs now_ms) const;
  // Every test with a run in the window now, by name.
  std::vector<FlakeBudgetStatus> statuses(TimeMs now_ms) const;
  // Every test over its budget now, by name.
  std::vector<FlakeBudgetStatus> over_budget(TimeMs now_ms) const;

 private:
  struct Run {
    TimeMs at_ms = 0;
    bool flaky = false;
  };
  struct TestRuns {
    std::string owner_team;
    std::deque<Run> runs;
  };
  FlakeBudgetOptions options_;
  std::map<std::string, TestRuns, std::less<>> tests_;
};

}  // namespace kiln::qualification

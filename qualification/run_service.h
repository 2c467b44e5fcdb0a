// What the qualifier decides about the runs it is asked for, with no I/O: which requested runs
// are left to drive, a run's input from what the coordinator holds, the release's stability
// soak rounds, and what a finished run changes (the revisions whose baseline it becomes). The
// qualifier's shell (qualifier) gathers the facts and carries the decisions out.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/error.h"
#include "records/change.h"
#include "qualification/model_set.h"
#include "records/run_request.h"
#include "qualification/run_types.h"

namespace kiln::qualification {

// Requested runs (in the order they were requested) that have no finished report and that this
// qualifier is not driving already: each is claimed, and driven if the claim is granted.
std::vector<std::string> runs_to_take_up(const std::vector<RunRequest>& requests,
                                         const std::set<std::string>& finished_run_ids,
                                         const std::set<std::string>& driving);

// What the coordinator holds that a run's input is made of.
struct RunFacts {
  Bundle candidate;
  ModelSet set;
  std::vector<Change> history;
  std::map<std::string, Bundle> bundles;            // the candidate's and the baselines' bundles, by id
  std::map<std::string, std::string> accepted_ids;  // by revision: the accepted baseline's bundle id
  std::vector<std::string> fleet_revisions;  // the revisions that have registered nodes
  // The baselines an earlier driver of this run compared against (its recorded report): a run
  // taken up again keeps them, even if it had already made its candidate the new baseline.
  std::map<std::string, std::string> recorded_baseline_ids;
  BaselineHistory baseline_history;  // earlier runs' baseline samples (noise_history.h)
};

// The run's input: the tier's models (smoke: select_presubmit for the change under test, at most
// max_models; the others the set, or its first max_models), the candidate's revisions the fleet
// has (none: Errc::unavailable), each revision's baseline (not the candidate itself), the repeats
// (a release doubles them), the performance gate's rule (perf_rule_for) with the recorded baseline
// samples it sizes repeats from, and the seed of the run id.
Result<RunInput> run_input_for(const RunRequest& request, const RunFacts& facts);

// What can be known of a request when it is asked, checked by the client that asks (kiln smoke
// ...) and again by the qualifier that takes it up, so that a run that cannot be carried out is
// refused instead of started. Each is Errc::invalid_argument, naming what is wrong.
// A smoke's change under test must be recorded (`recorded`: whether it is).
Status check_change_under_test(const std::string& change_id, bool recorded);
// A candidate older than a revision's baseline cannot be compared with it (the baseline holds
// changes it lacks). `baselines`: by revision, those the run compares against.
Status check_not_older_than_baselines(const Bundle& candidate, const std::map<std::string, Bundle>& baselines);

// The candidate's revisions without nodes in the fleet: the run skips them (the shell says so).
std::vector<std::string> revisions_skipped(const Bundle& candidate, const std::vector<std::string>& fleet_revisions);

// A release's soak round after `rounds_done` rounds, once its first round finished, whatever that
// found (a waiver covers the gate it names, never the soak): the whole set again, correctness as
// the gate, under its own run id (`<id>-soak<N>`) and seed.
std::optional<RunInput> next_soak_round(const RunRequest& request, const RunInput& first, const RunReport& whole,
                                        std::uint32_t rounds_done);
// A soak round's models and tickets join the release's report, and it counts as run in its
// `soak`; the release passes only if it and every round before passed.
void add_soak_round(RunReport& whole, const RunReport& round_report, std::uint32_t round);

// The revisions a finished run makes its candidate the baseline of: a passing nightly or release
// that was not asked to keep the old one.
std::vector<std::string> revisions_to_accept(const RunRequest& request, const RunInput& input,
                                             const RunReport& whole);

// An earlier result the nightly reruns to see whether it reproduces.
struct ReproductionPick {
  std::string run_id;  // the run that measured it
  std::string model;
  std::string revision;
  MeasuredJob job;
};

// The nightly's reproducibility sample: up to `count` measure jobs of earlier finished runs (any
// tier, not `run_id` itself) whose model is still in the set and whose revision the fleet still
// has, drawn without replacement from `seed` (the run's), so a run taken up again picks the same
// ones from the same reports.
std::vector<ReproductionPick> reproducibility_sample(const std::vector<RunReport>& earlier, const std::string& run_id,
                                                     const ModelSet& set,
                                                     const std::vector<std::string>& fleet_revisions,
                                                     std::size_t count, std::uint64_t seed);

// A scheduled run's deadline (request.deadline_ms): met when its report finished by then;
// nullopt while it runs or when it has none.
std::optional<bool> met_deadline(const RunRequest& request, const RunReport& report);

}  // namespace kiln::qualification

// The values a qualification run (run.h) takes and gives: its settings and input, the jobs it
// asks the shell for and what they measured, the actions it returns and its report. Shared by
// the run's phases (run_measure.h, run_gate.h, run_triage.h, run_bisect.h, run_tickets.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "common/enum_names.h"
#include "common/stats/perf_gate.h"
#include "common/time.h"
#include "records/tier.h"
#include "qualification/bisect.h"
#include "records/change.h"
#include "qualification/correctness.h"
#include "qualification/model_set.h"
#include "qualification/reproducibility.h"
#include "qualification/ticket.h"
#include "qualification/triage.h"

namespace kiln::qualification {


struct RunSettings {
  Tier tier = Tier::nightly;
  std::string run_id;                  // the shell's name for the run: in tickets and reports
  std::vector<std::string> revisions;  // where to qualify: the candidate's revisions the fleet has
  // Timed repeats per side of a first measurement for models that declare none (model_set.h);
  // the gate's extra rounds add more. A release multiplies every model's by repeats_multiplier.
  std::uint32_t repeats_per_side = 10;
  std::uint32_t repeats_multiplier = 1;
  // perf.rule sequential: each pair's first measurement and extra rounds come from its plan
  // (input.baseline_history's noise) instead, and repeats_per_side and the multiplier do not count.
  stats::PerfGateOptions perf;
  BisectOptions bisect;
  TriageOptions triage;                 // min_reruns on the other node
  std::size_t max_jobs_in_flight = 32;  // measure, rerun and probe jobs started and not finished
  std::size_t max_probes_per_bisection = 3;  // k of the k-ary search, at most the free nodes
  int max_job_attempts = 2;  // a job that could not run (lost, crashed) is started again once
  bool bisect_regressions = true;
  std::uint64_t seed = 1;  // the perf gate's bootstrap
};

// (model, revision) -> the baseline samples of that pair's earlier jobs, one batch per job, oldest
// first: what the sequential gate estimates the pair's noise from (noise_history.h).
using BaselineHistory = std::map<std::pair<std::string, std::string>, std::vector<std::vector<double>>>;

struct RunInput {
  RunSettings settings;
  Bundle candidate;
  // Revision -> the last accepted bundle on it. A revision without one gets correctness only
  // (and the candidate may become its first baseline).
  std::map<std::string, Bundle> baselines;
  // The models to run, in order: the whole set for a nightly, select_presubmit's picks for a
  // smoke. A model needing more chips than one node has runs on several whole nodes at once; it is
  // skipped when the revision has fewer healthy nodes than it needs.
  std::vector<QualificationModel> models;
  ModelSet set;                  // proxies for bisection probes
  std::vector<Change> history;   // merged changes, in merge order: the bisection candidates
  int chips_per_node = 8;
  BaselineHistory baseline_history;  // the sequential gate's noise records (settings.perf.rule)
};

enum class JobPurpose { measure, extra_repeats, confirmation, triage_rerun, origin_rerun, bisect_probe };
constexpr EnumTable<JobPurpose, 6> enum_names(JobPurpose) {
  return {{
      {JobPurpose::measure, "measure"},
      {JobPurpose::extra_repeats, "extra_repeats"},
      {JobPurpose::confirmation, "confirmation"},
      {JobPurpose::triage_rerun, "triage_rerun"},
      {JobPurpose::origin_rerun, "origin_rerun"},
      {JobPurpose::bisect_probe, "bisect_probe"},
  }};
}
inline std::string_view to_string(JobPurpose value) { return enum_name(value); }

// A job the shell must start. Results come back with its tag.
struct JobRequest {
  std::uint64_t tag = 0;
  JobPurpose purpose = JobPurpose::measure;
  std::string model;     // the set entry it runs (the proxy for bisection probes)
  std::string revision;
  int chips = 1;  // on each node
  // > 1: a model larger than one node runs on this many whole nodes of the revision at once, all
  // or nothing, `chips` on each; its result is the nodes' results together.
  int nodes = 1;
  std::string bundle_id;           // the stack under test
  std::string baseline_bundle_id;  // measured on the same chip, interleaved; empty: no perf
  std::uint32_t repeats_per_side = 0;  // 0: not a benchmark (correctness only)
  std::string node_id;                 // empty: any node of the revision
  std::uint64_t seed = 1;              // the job's KILN_SEED
};

// What a finished job measured, as the shell read it from the result document.
struct JobResult {
  std::uint64_t tag = 0;
  std::uint64_t job_id = 0;  // the coordinator's, when one job made it (not a gang's ranks): 0 otherwise
  bool ran = true;  // false: lost, crashed, timed out or refused: the measurement is missing
  std::string node_id;
  std::vector<std::uint32_t> chips;
  bool correct = true;  // outputs within tolerance, and for training the loss-curve and eval gates
  std::string correctness_detail;  // why not, for people and tickets
  std::vector<double> baseline_samples;   // timed throughputs on the baseline bundle
  std::vector<double> candidate_samples;  // ... on the bundle under test
  std::optional<TrainingEvidence> training;  // a training model's curves and gates
  std::string detail;  // the job's own detail (why it did not run)
  // Its node's quarantine reason when the node was quarantined at the job's dispatch or before
  // it ended (the coordinator's JobSummary node_quarantined): triage does not count it.
  std::string node_quarantined;
  // The backend (sim, cpu, silicon: backends::Backend) of the node's driver when the shell read
  // the result; empty when the shell did not know the node's driver, or a gang's ranks differ.
  std::string backend;
};


namespace run_action {
struct StartJob {
  JobRequest request;
};
struct CancelJob {
  std::uint64_t tag = 0;
};
// Build the bundle containing history[0..history_index]; answer with on_bundle_built.
struct BuildBundle {
  std::size_t history_index = 0;
};
struct FileTicket {
  Ticket ticket;
};
struct QuarantineNode {
  std::string node_id;
  std::string reason;
  std::uint64_t failing_job_id = 0;  // whose wrong outputs a correct rerun there clears; 0: none known
};
struct Log {
  std::string text;
};
}  // namespace run_action

using RunAction = std::variant<run_action::StartJob, run_action::CancelJob, run_action::BuildBundle,
                               run_action::FileTicket, run_action::QuarantineNode, run_action::Log>;

enum class ModelVerdict {
  pending,                 // no verdict yet (a report of a run in progress)
  passed,                  // correct, and no confirmed performance regression
  improved,                // correct and confirmed faster
  performance_regression,  // confirmed by the rerun
  correctness_regression,  // failed on two nodes
  hardware_suspect,        // failed on one node, passed on another
  flaky,                   // reruns disagree
  inconclusive,            // the gate could not decide within its extra rounds
  skipped,                 // did not fit one node, or its revision has no node
  error,                   // its jobs could not run
};
constexpr EnumTable<ModelVerdict, 10> enum_names(ModelVerdict) {
  return {{
      {ModelVerdict::pending, "pending"},
      {ModelVerdict::passed, "passed"},
      {ModelVerdict::improved, "improved"},
      {ModelVerdict::performance_regression, "performance_regression"},
      {ModelVerdict::correctness_regression, "correctness_regression"},
      {ModelVerdict::hardware_suspect, "hardware_suspect"},
      {ModelVerdict::flaky, "flaky"},
      {ModelVerdict::inconclusive, "inconclusive"},
      {ModelVerdict::skipped, "skipped"},
      {ModelVerdict::error, "error"},
  }};
}
inline std::string_view to_string(ModelVerdict value) { return enum_name(value); }
// passed, improved, flaky, inconclusive and skipped do not fail a run: a skipped model was not
// qualified and says why (a JUnit <skipped/>); an inconclusive one is within a few percent
// either way after every extra round and is listed for a person to look at, not a regression.
// pending is never in a finished report.
bool fails_run(ModelVerdict verdict);

struct ModelReport {
  std::string model;
  std::string revision;
  std::string owner_team;
  ModelVerdict verdict = ModelVerdict::pending;
  std::string detail;  // one line for people: the shift and interval, the failing output, ...
  std::optional<stats::ModelGateOutcome> performance;
  std::optional<TriageAction> triage;
  std::optional<BisectResult> bisection;
  std::optional<TrainingEvidence> training;  // its measure job's loss curve and eval, for training models
  std::vector<std::string> ticket_ids;
  std::vector<std::string> nodes;  // where its jobs ran
  // Each node's backend when its result was made (JobResult::backend), so that a node moving
  // from the simulator to silicon does not rewrite what its earlier results measured.
  std::map<std::string, std::string> node_backends;
  DurationMs duration_ms = 0;      // first job start to verdict
  // Its measure job, for a rerun (kiln rerun, the nightly's reproducibility sample): set by the
  // shell, which knows the jobs; absent when it did not run, or ran on several nodes.
  std::optional<MeasuredJob> measure_job;
  // A recorded report's waivers that let its failure through ("waived by X until T: reason";
  // waiver.h): read back for JUnit, never set by the run itself.
  std::vector<std::string> waived;
};

// A job (or a gang's lease) a run is waiting for, so that whoever follows the run can say what is
// pending and why: set by the shell, which knows the jobs.
struct JobInFlight {
  std::uint64_t job_id = 0;    // 0: a gang still waiting for its lease
  std::uint64_t lease_id = 0;  // a gang's lease; 0 for a job on one node
  std::string model;
  std::string revision;
  JobPurpose purpose = JobPurpose::measure;
};

// A bisection under way, in the report of a run in progress: the model whose regression it looks
// for (the first one, when several share it), on which revision, and how far it got.
struct BisectionProgress {
  std::string model;
  std::string revision;
  std::size_t rounds = 0;  // plans that started probes so far
  std::size_t probes_started = 0;
};

// A release's soak rounds (run_service.h): how many it asked for and how many ran, whatever the
// first round found. Its gate needs them all, and at least one (docs/releases.md).
struct SoakRounds {
  std::uint32_t asked = 0;
  std::uint32_t run = 0;
};

struct RunReport {
  std::string run_id;
  Tier tier = Tier::nightly;
  std::string candidate_bundle_id;
  std::map<std::string, std::string> baseline_bundle_ids;  // by revision
  // The bundles themselves, for people to read their versions (absent in a report of a run that
  // never started: its bundle was not found).
  std::optional<Bundle> candidate_bundle;
  std::map<std::string, Bundle> baseline_bundles;  // by revision
  std::vector<ModelReport> models;
  std::vector<Ticket> tickets;  // filed by this run, in order
  std::size_t jobs_started = 0;
  bool finished = false;
  bool passed = false;  // finished and no model fails_run
  TimeMs started_at_ms = 0;
  TimeMs finished_at_ms = 0;
  // A nightly's reruns of earlier results: reported, never part of the verdict.
  std::vector<ReproductionReport> reproducibility;
  std::vector<JobInFlight> jobs_in_flight;  // while it runs
  // The bisections not finished yet (none once the run is).
  std::vector<BisectionProgress> bisections_running;
  std::optional<SoakRounds> soak;  // a release's only
};


}  // namespace kiln::qualification

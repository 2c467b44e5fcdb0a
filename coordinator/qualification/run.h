// One qualification run (a presubmit smoke, a nightly, a release qualification) of a candidate
// bundle, sans-IO: the shell starts it, hands in what its jobs measured, and carries out what
// poll_action() returns (start or cancel a job, build a bundle, file a ticket, quarantine a node)
// until finished(). Pure and deterministic: no sockets, clocks, files or threads.
//
// Per model and hardware revision:
//   1. measure: one job runs the model on the candidate bundle and, on the same chip, on the
//      revision's baseline bundle (the last accepted one) when there is one, and checks the
//      outputs against the golden;
//   2. correctness: a failure is rerun on another healthy node of the revision (triage):
//      hardware suspect -> quarantine the first node, ticket to the lab; software regression ->
//      bisect; flaky -> reported as flaky;
//   3. performance: every model's samples go through one stats::RunPerfGate for the run
//      (Benjamini-Hochberg across all models and revisions, extra repeats while inconclusive, a
//      confirmation rerun for a regression); a confirmed regression is bisected;
//   4. bisection (bisect.h) over the changes between the baseline and the candidate, probes as
//      jobs on the model's proxy, then one ticket to the culprit's owner (never two for the same
//      culprit and kind).
//
// Choices the shell and the reports rely on:
//   - Jobs start in poll_action(): at most max_jobs_in_flight started and neither answered nor
//     cancelled. Follow-ups (triage reruns, gate rounds, probes) go before measure jobs not yet
//     started. A job that did not run is started again (new tag, same request and seed) up to
//     max_job_attempts; then its pair is `error` (a probe: inconclusive; the optional rerun on
//     the failing node: triage goes on without it).
//   - Seeds: a measure job uses the model's seed; every other job derive_seed(model seed, tag).
//   - Revisions without a baseline: correctness only (repeats_per_side 0).
//   - A pair (model, revision) that leaves the gate without samples (failed correctness, could
//     not run, skipped) stays in the Benjamini-Hochberg family as p = 1 (conservative); the
//     gate's first evaluation waits for every pair still in it.
//   - Triage: min_reruns on choose_rerun_node's pick from set_nodes' view, plus one on the
//     failing node. With no other node known, the failure is bisected as an unconfirmed
//     software regression (its detail says so). Flaky and hardware-suspect pairs are not
//     judged for performance.
//   - Bisection once per probe model, kind and baseline bundle: a model's regression on a later
//     revision, and a larger model whose proxy it is, reuse the first bisection and its ticket
//     (their probes would be the same jobs). Parallel probes: min(max_probes_per_bisection, free
//     healthy nodes of the revision + its running probes), at least 1. Performance probes are
//     judged like a confirmation rerun (stats::decide at alpha, stats::next_step's extra
//     rounds); a bundle that fails to build makes its probes inconclusive. An ambiguous
//     bisection files no ticket: the verdict stays a regression and the detail lists suspects.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "common/error.h"
#include "common/stats/perf_gate.h"
#include "common/time.h"
#include "coordinator/qualification/bisect.h"
#include "coordinator/qualification/change.h"
#include "coordinator/qualification/correctness.h"
#include "coordinator/qualification/model_set.h"
#include "coordinator/qualification/ticket.h"
#include "coordinator/qualification/triage.h"

namespace kiln::qualification {

enum class Tier { smoke, nightly, release };
std::string_view to_string(Tier tier);
std::optional<Tier> tier_from_string(std::string_view name);

struct RunSettings {
  Tier tier = Tier::nightly;
  std::string run_id;                  // the shell's name for the run: in tickets and reports
  std::vector<std::string> revisions;  // where to qualify: the candidate's revisions the fleet has
  // Timed repeats per side of a first measurement for models that declare none (model_set.h);
  // the gate's extra rounds add more. A release multiplies every model's by repeats_multiplier.
  std::uint32_t repeats_per_side = 10;
  std::uint32_t repeats_multiplier = 1;
  stats::PerfGateOptions perf;
  BisectOptions bisect;
  TriageOptions triage;                 // min_reruns on the other node
  std::size_t max_jobs_in_flight = 32;  // measure, rerun and probe jobs started and not finished
  std::size_t max_probes_per_bisection = 3;  // k of the k-ary search, at most the free nodes
  int max_job_attempts = 2;  // a job that could not run (lost, crashed) is started again once
  bool bisect_regressions = true;
  std::uint64_t seed = 1;  // the perf gate's bootstrap
};

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
};

enum class JobPurpose { measure, extra_repeats, confirmation, triage_rerun, origin_rerun, bisect_probe };
std::string_view to_string(JobPurpose purpose);

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
  bool ran = true;  // false: lost, crashed, timed out or refused: the measurement is missing
  std::string node_id;
  std::vector<std::uint32_t> chips;
  bool correct = true;  // outputs within tolerance, and for training the loss-curve and eval gates
  std::string correctness_detail;  // why not, for people and tickets
  std::vector<double> baseline_samples;   // timed throughputs on the baseline bundle
  std::vector<double> candidate_samples;  // ... on the bundle under test
  std::string detail;  // the job's own detail (why it did not run)
};

// Reads a finished job's result into a JobResult (tag, node and ran left to the caller): either
// the workload's own document (docs/workloads.md, kiln.workload-result/1: `passed`, the timed
// samples of `benchmark` and `baseline_benchmark`) or, for a benchmark job, the agent's report on
// it (kiln.benchmark-report/1: `correctness_passed`, the unthrottled timed throughputs of the
// candidate and of `baseline`). For training models the loss-curve and eval gates run too
// (check_training against the document's reference curve, the model's eval_threshold). Fails on
// a document that is neither.
Result<JobResult> read_workload_result(std::string_view document, const QualificationModel& model);

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
std::string_view to_string(ModelVerdict verdict);
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
  std::vector<std::string> ticket_ids;
  std::vector<std::string> nodes;  // where its jobs ran
  DurationMs duration_ms = 0;      // first job start to verdict
};

struct RunReport {
  std::string run_id;
  Tier tier = Tier::nightly;
  std::string candidate_bundle_id;
  std::map<std::string, std::string> baseline_bundle_ids;  // by revision
  std::vector<ModelReport> models;
  std::vector<Ticket> tickets;  // filed by this run, in order
  std::size_t jobs_started = 0;
  bool finished = false;
  bool passed = false;  // finished and no model fails_run
  TimeMs started_at_ms = 0;
  TimeMs finished_at_ms = 0;
};

nlohmann::json to_json(const RunReport& report);
// A few lines for people: counts by verdict, each failure with its culprit and ticket.
std::string summary_text(const RunReport& report);
// JUnit XML for CI: one testsuite per revision, one testcase per model (classname = tier),
// <failure> for verdicts that fail the run, <skipped/> for skipped.
std::string to_junit_xml(const RunReport& report);

class QualificationRun {
 public:
  // Fails on an invalid input: no revision, a model with no name, a baseline whose changes are
  // not a prefix of the candidate's, a candidate change missing from the history.
  static Result<QualificationRun> start(RunInput input, TimeMs now);

  // The healthy nodes now, with their revision and whether they are free: rerun nodes for
  // triage and the number of parallel probes for bisection come from here. A non-empty list
  // with no healthy node of a revision skips that revision's models whose measure job has not
  // been started yet (an empty list says nothing: the shell may not know the fleet yet).
  // Without any set_nodes, a correctness failure has no rerun node: it is bisected as an
  // unconfirmed software regression (the detail says so).
  void set_nodes(std::vector<NodeCandidate> nodes, TimeMs now);
  // Fails (conflict) for an unknown tag, one never started or one already answered. A late
  // answer to a cancelled job is accepted and ignored.
  Status on_job_result(JobResult result, TimeMs now);
  // An error, or a bundle whose last change is not history[history_index], is a failed build:
  // the probes waiting for it are inconclusive, and it is not asked for again.
  void on_bundle_built(std::size_t history_index, Result<Bundle> bundle, TimeMs now);

  std::optional<RunAction> poll_action();
  // Every verdict is in and every action has been polled (the last tickets included).
  bool finished() const;
  const RunReport& report() const;

  QualificationRun(QualificationRun&&) noexcept;
  QualificationRun& operator=(QualificationRun&&) noexcept;
  ~QualificationRun();

 private:
  struct State;
  explicit QualificationRun(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace kiln::qualification

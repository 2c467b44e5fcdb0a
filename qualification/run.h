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
//   4. bisection (bisect.h) over the changes between the baseline and the candidate, one per
//      culprit for every model that regressed between them, probes as jobs on each model's
//      proxy, then one ticket to the culprit's owner (never two for the same culprit and kind).
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
//   - One bisection per culprit (run_bisect.h): the regressions between one baseline bundle and
//     the candidate wait until no other pair of that baseline can still regress, then share one
//     bisection whose probes measure every regressed probe model (a model's regression on another
//     revision, and a larger model whose proxy regressed, share its probe model's jobs). A probe
//     is bad when any model is bad there; the models good at the culprit go on to a follow-up
//     bisection over the changes after it. Rounds are planned one at a time with k =
//     min(max_probes_per_bisection, healthy nodes of the revision), at least 1, so n changes take
//     at most ceil(log_{k+1}(n)) rounds when every probe answers (BisectResult::round_bound).
//     Performance probes are judged like the run's gate (the sequential plan from the probe
//     model's recorded noise, or the fixed rule's confirmation); a bundle that fails to build
//     makes its probes inconclusive. A bisection that cannot pin the culprit down tickets each
//     model's owner with the suspect range (unpinned_ticket); the verdict stays a regression.
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "common/error.h"
#include "common/time.h"
#include "qualification/run_measure.h"
#include "qualification/run_report.h"
#include "qualification/run_types.h"
#include "qualification/triage.h"

namespace kiln::qualification {

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


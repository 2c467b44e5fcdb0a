// The bisection phase of a run: the regressions confirmed between one baseline bundle and the
// candidate are bisected together (bisect.h) over the changes between them. One bisection per
// culprit: its targets are every (probe model, kind) that regressed, and each probe is a job per
// target on the target's probe model (the model's proxy where one is declared) with the bundle
// at that change built on demand. A probe is bad when any target is bad there, so the search
// finds the first culprit; the targets that were good at it regressed later, and a follow-up
// bisection over the changes after it looks for theirs.
//
// Rounds: the next round is planned once every probe of the last one has answered, with
// k = min(max_probes_per_bisection, healthy nodes of the first target's revision), at least 1,
// so n changes take at most ceil(log_{k+1}(n)) rounds when every probe answers (plus one per
// round with an inconclusive answer: BisectResult::round_bound). Performance probes are judged
// like the run's gate: under the sequential rule each target's probe takes the looks and repeats
// its probe model's recorded noise plans (noise_history.h) and stops at the plan's bounds; under
// the fixed rule, stats::decide at alpha with stats::next_step's extra rounds. Correctness probes
// are judged by the golden; a bundle that fails to build makes its probes inconclusive. Pure.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/stats/sequential_gate.h"
#include "qualification/bisect.h"
#include "qualification/run_context.h"
#include "qualification/run_types.h"
#include "qualification/ticket.h"

namespace kiln::qualification {

// A confirmed regression of one pair, to be bisected.
struct Regression {
  std::size_t pair = 0;
  TicketKind kind = TicketKind::performance_regression;
  const QualificationModel* model = nullptr;
  std::string revision;
};

// What one bisection looks for: a probe model's regression of one kind, and the pairs it
// explains (the first one's model named it).
struct BisectionTarget {
  TicketKind kind = TicketKind::performance_regression;
  QualificationModel probe_model;
  std::string revision;  // its probes run there: the first pair's
  std::string model;     // the first pair's model
  std::vector<std::size_t> pairs;
  std::optional<stats::SequentialPlan> plan;  // a performance probe's looks, under the sequential rule
};

struct BisectionRun {
  std::string baseline_bundle_id;
  Bisection bisection;
  std::vector<std::size_t> history_index;  // per candidate
  std::vector<BisectionTarget> targets;
  std::optional<BisectResult> result;
  // Once finished: per target, whether the culprit explains its regression (it was not good at
  // the culprit). A target it does not explain goes on to a follow-up bisection.
  std::vector<bool> explained;

  struct TargetProbe {
    std::uint64_t tag = 0;  // the job measuring it now; 0 while its bundle is being built or once answered
    std::vector<double> baseline;
    std::vector<double> candidate;
    int looks = 0;  // jobs answered
    std::optional<ProbeVerdict> verdict;
    std::string detail;
  };
  struct Probe {
    std::vector<TargetProbe> targets;  // by target
  };
  std::map<std::size_t, Probe> probes;  // running probes by candidate
  // The targets' verdicts of the latest answered probe of each candidate.
  std::map<std::size_t, std::vector<ProbeVerdict>> verdicts;
  // Each answered probe's evidence by target, in the order of the bisection's probe records: a
  // model's report keeps only its own, so a shared bisection does not grow every report with
  // every other model's evidence.
  std::vector<std::vector<std::string>> target_details;
};

class RunBisections {
 public:
  // `finished(b)` is called as soon as bisection b has its result (its probes cancelled).
  // `progress` is kept listing the bisections without a result (the report's).
  RunBisections(const RunInput& input, JobBook& book, const FleetView& fleet,
                std::vector<BisectionProgress>& progress, std::function<void(std::size_t)> finished);

  // One bisection for every regression between `baseline_bundle_id` and the candidate (pairs of
  // the same probe model and kind share a target). Fails, with why they cannot be bisected,
  // without a baseline or changes to bisect. pump() it once the pairs refer to it.
  Result<std::size_t> start(const std::vector<Regression>& regressions, const std::string& baseline_bundle_id);
  // A bisection of the targets of finished bisection `b` that its culprit does not explain, over
  // the changes after the culprit. pump() it once the pairs refer to it.
  std::size_t follow_up(std::size_t b);

  // Starts the next round when the last one has answered; finishes it when it has its answer.
  void pump(std::size_t bisection);
  void pump_all();

  void on_probe_result(const RunJob& job, const JobResult& result);
  // The probe's job did not run after its last attempt: it is inconclusive.
  void on_probe_given_up(const RunJob& job, std::string why);
  // The probe's job is started again as `new_tag`.
  void on_probe_retried(const RunJob& job, std::uint64_t new_tag);
  // See QualificationRun::on_bundle_built.
  void on_bundle_built(std::size_t history_index, Result<Bundle> bundle);

  BisectionRun& at(std::size_t bisection) { return runs_[bisection]; }

 private:
  enum class BuildState { building, built, failed };
  struct BundleBuild {
    BuildState state = BuildState::building;
    Bundle bundle;
    std::string error;
    std::vector<std::pair<std::size_t, std::size_t>> waiting;  // (bisection, candidate)
  };

  std::size_t add(std::string baseline_bundle_id, std::vector<std::string> candidates,
                  std::vector<std::size_t> indexes, std::vector<BisectionTarget> targets);
  // The target of the probe job, or nullopt for an obsolete one.
  std::optional<std::size_t> current_target(const RunJob& job) const;
  bool start_probe(std::size_t b, std::size_t candidate);
  void launch_probe_jobs(std::size_t b, std::size_t candidate);
  void launch_probe_job(std::size_t b, std::size_t candidate, std::size_t target, std::uint32_t repeats_per_side);
  std::uint32_t first_repeats(const BisectionTarget& target) const;
  void answer_target(std::size_t b, std::size_t candidate, std::size_t target, ProbeVerdict verdict,
                     std::string detail);
  // `by_target`: the evidence of each target, when they differ (empty: `detail` for every one).
  void answer_probe(std::size_t b, std::size_t candidate, ProbeVerdict verdict, std::string detail,
                    std::vector<std::string> by_target = {});
  void judge_performance(const RunJob& job, std::size_t target, const JobResult& result);
  void finish(std::size_t b);
  // Plans and starts the next round unless probes are running; finishes the bisection when it
  // has its answer.
  void advance(std::size_t b);
  void publish_progress();

  const RunInput& input_;
  JobBook& book_;
  const FleetView& fleet_;
  std::vector<BisectionProgress>& progress_;
  std::function<void(std::size_t)> finished_;
  std::map<std::string, std::size_t> history_index_;
  std::vector<BisectionRun> runs_;
  std::map<std::size_t, BundleBuild> builds_;
};

}  // namespace kiln::qualification

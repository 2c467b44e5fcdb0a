// The bisection phase of a run: a confirmed regression is bisected (bisect.h) over the changes
// between its revision's baseline and the candidate, each probe a job on the model's proxy with
// the bundle at that change built on demand. One bisection per probe model, kind and baseline
// bundle: a model's regression on a later revision, and a larger model whose proxy it is, wait
// for the first one's result. Parallel probes: min(max_probes_per_bisection, free healthy nodes of
// the revision + its running probes), at least 1. Performance probes are judged like a
// confirmation rerun (stats::decide at alpha, stats::next_step's extra rounds), correctness probes
// by the golden; a bundle that fails to build makes its probes inconclusive. Pure.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "common/error.h"
#include "coordinator/qualification/bisect.h"
#include "coordinator/qualification/run_context.h"
#include "coordinator/qualification/run_types.h"
#include "coordinator/qualification/ticket.h"

namespace kiln::qualification {

struct BisectionRun {
  std::size_t owner_pair = 0;  // the pair that started it
  TicketKind kind = TicketKind::performance_regression;
  QualificationModel probe_model;
  std::string revision;
  std::string baseline_bundle_id;
  Bisection bisection;
  std::vector<std::size_t> history_index;  // per candidate
  std::vector<std::size_t> pairs;          // waiting for the result, the owner first
  std::optional<BisectResult> result;
  std::vector<std::string> ticket_ids;     // filed for the result
  std::string model;                       // whose regression it looks for: the owner pair's model

  struct Probe {
    std::uint64_t tag = 0;  // the job measuring it now; 0 while its bundle is being built
    std::vector<double> baseline;
    std::vector<double> candidate;
    int extra_rounds = 0;
  };
  std::map<std::size_t, Probe> probes;  // running probes by candidate
};

class RunBisections {
 public:
  // `finished(b)` is called as soon as bisection b has its result (its probes cancelled).
  // `progress` is kept listing the bisections without a result (the report's).
  RunBisections(const RunInput& input, JobBook& book, const FleetView& fleet,
                std::vector<BisectionProgress>& progress, std::function<void(std::size_t)> finished);

  struct Joined {
    std::size_t bisection = 0;
    bool started = false;  // a new bisection: pump() it once the pair refers to it
  };
  // The bisection of the pair's regression: the one of the same probe model, kind and baseline
  // if there is one (the pair waits for it unless it has its result), else a new one. Fails, with
  // why it cannot be bisected, without a baseline or changes to bisect.
  Result<Joined> join(std::size_t pair, TicketKind kind, const QualificationModel& model, const std::string& revision,
                      const std::string& baseline_bundle_id);

  // Starts the probes the bisection's free nodes allow; finishes it when it has its answer.
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

  bool current_probe(const RunJob& job) const;
  bool start_probe(std::size_t b, std::size_t candidate);
  void launch_probe_job(std::size_t b, std::size_t candidate, std::uint32_t repeats_per_side);
  void answer_probe(std::size_t b, std::size_t candidate, ProbeVerdict verdict, std::string detail);
  void finish(std::size_t b);
  // Plans and starts probes until the bisection waits for results or has its answer.
  void advance(std::size_t b);
  void publish_progress();

  const RunInput& input_;
  JobBook& book_;
  const FleetView& fleet_;
  std::vector<BisectionProgress>& progress_;
  std::function<void(std::size_t)> finished_;
  std::map<std::string, std::size_t> history_index_;
  std::vector<BisectionRun> runs_;
  std::map<std::tuple<std::string, TicketKind, std::string>, std::size_t> by_probe_;
  std::map<std::size_t, BundleBuild> builds_;
};

}  // namespace kiln::qualification

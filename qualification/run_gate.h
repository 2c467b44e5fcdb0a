// The gate phase of a run: every (model, revision) pair with a baseline goes through one
// stats::RunPerfGate (Benjamini-Hochberg across all of them, extra rounds while inconclusive, a
// confirmation rerun for a regression). The first evaluation waits until every pair still in the
// gate has its first samples; a pair that leaves without samples (failed correctness, could not
// run, skipped) stays in the family as p = 1. Pure: the run starts the jobs the gate asks for
// and acts on each pair's conclusion.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "common/stats/perf_gate.h"
#include "qualification/run_types.h"

namespace kiln::qualification {

struct GateJob {
  std::size_t pair = 0;
  JobPurpose purpose = JobPurpose::extra_repeats;  // or confirmation
  std::uint32_t repeats_per_side = 1;
};

struct GateConclusion {
  std::size_t pair = 0;
  stats::ModelGateOutcome outcome;
};

// What one step of the gate asks for (in this order): jobs to start, then pairs it has judged.
struct GateStep {
  std::vector<GateJob> jobs;
  std::vector<GateConclusion> concluded;
};

class RunGate {
 public:
  // judged[p]: pair p has a baseline, so the gate judges it. Under the sequential rule
  // plans[p] is pair p's plan (one per pair; only the judged ones' are used).
  RunGate(const std::vector<bool>& judged, const stats::PerfGateOptions& options, std::uint64_t seed,
          const std::vector<stats::SequentialPlan>& plans = {});

  bool judges(std::size_t pair) const { return member(pair).has_value(); }
  bool left(std::size_t pair) const;

  // The pair's first measurement, and later its extra repeats or confirmation rerun. Samples of a
  // pair that left are ignored.
  GateStep add_first_samples(std::size_t pair, std::span<const double> baseline, std::span<const double> candidate);
  GateStep add_more_samples(std::size_t pair, std::span<const double> baseline, std::span<const double> candidate);
  // The pair brings no more samples.
  GateStep leave(std::size_t pair);

 private:
  enum class MemberState { waiting_first, measured, concluded, left };

  std::optional<std::size_t> member(std::size_t pair) const;
  GateStep start_if_ready();
  GateStep evaluate();

  std::vector<std::optional<std::size_t>> member_of_pair_;
  std::vector<std::size_t> pair_of_member_;
  std::vector<MemberState> states_;
  std::optional<stats::RunPerfGate> gate_;
  std::size_t waiting_first_ = 0;
  bool started_ = false;
};

}  // namespace kiln::qualification

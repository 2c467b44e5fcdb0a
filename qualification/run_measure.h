// The measure phase of a run: the first job of every (model, revision) pair, what it costs the
// fleet (a model larger than a node takes whole nodes), whether the fleet can run it at all, and
// how a finished job's result document becomes what the run judges.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "common/error.h"
#include "qualification/model_set.h"
#include "qualification/run_types.h"

namespace kiln::qualification {

// Reads a finished job's result into a JobResult (tag, node and ran left to the caller): either
// the workload's own document (docs/workloads.md, kiln.workload-result/1: `passed`, the timed
// samples of `benchmark` and `baseline_benchmark`) or, for a benchmark job, the agent's report on
// it (kiln.benchmark-report/1: `correctness_passed`, the unthrottled timed throughputs of the
// candidate and of `baseline`). For training models the loss-curve and eval gates run too
// (check_training against the document's reference curve, the model's eval_threshold). Fails on
// a document that is neither.
Result<JobResult> read_workload_result(std::string_view document, const QualificationModel& model);

// How many whole nodes a model takes: 1 unless it needs more chips than one node has.
int nodes_for(const QualificationModel& model, int chips_per_node);
// A model's first measurement: its own repeats where the set declares them, else the run's.
std::uint32_t repeats_for(const QualificationModel& model, const RunSettings& settings);
// A follow-up job's seed: independent of every other job's, and within the protocol's 63 bits.
std::uint64_t job_seed(std::uint64_t model_seed, std::uint64_t tag);

// A job of `model` on `revision` for the candidate, sized for the model (its chips on one node,
// or whole nodes), without a baseline or repeats: correctness only.
JobRequest job_for_model(JobPurpose purpose, const QualificationModel& model, const std::string& revision,
                         const std::string& bundle_id, int chips_per_node);
// The pair's first job: with the revision's baseline (empty: correctness only) and the model's
// repeats, seeded with the model's seed.
JobRequest measure_job(const QualificationModel& model, const std::string& revision, const std::string& bundle_id,
                       const std::string& baseline_bundle_id, const RunSettings& settings, int chips_per_node);

// Why the pair cannot be measured with `healthy_nodes` healthy nodes of its revision (it is
// skipped), or nullopt when it can.
std::optional<std::string> skip_reason(const QualificationModel& model, const std::string& revision,
                                       long healthy_nodes, int chips_per_node);

}  // namespace kiln::qualification

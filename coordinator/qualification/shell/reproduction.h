// Reruns of measured jobs through the coordinator: `kiln rerun JOB` and the nightly's
// reproducibility sample. What is rerun and how a rerun is judged are pure
// (run_service.h reproducibility_sample, reproducibility.h check_reproduction); this submits,
// waits and reads.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "common/protocol/messages.h"
#include "coordinator/cli/client.h"
#include "coordinator/qualification/reproducibility.h"
#include "coordinator/qualification/run_service.h"
#include "coordinator/qualification/shell/run_driver.h"

namespace kiln::qualification::shell {

// The job that reruns `job`: its recorded submission again (workload, arguments, artifacts by
// digest, bundle, seed, chips, benchmark, class), on any node of its revision, under a config hash
// of its own derived from the original's and `purpose`: a driver that takes up its jobs by config
// hash never takes the original for its rerun, nor the other way round.
Result<protocol::SubmitJob> rerun_submission(const MeasuredJob& job, std::string_view purpose);

// Whether a job ended with a result document a run reads: it succeeded, or failed with exit 1 (the
// workload ran and its outputs were wrong).
bool ended_with_result(const protocol::JobSummary& job);

// A finished job's result as a run reads it (read_workload_result with `model`): `ran` is false,
// with the reason in `detail`, unless it succeeded or failed with a result document (exit 1:
// its outputs were wrong).
JobResult read_job_result(const protocol::JobDetail& detail, const QualificationModel& model);

// The model a measured job's result is read against again: its name and eval threshold.
QualificationModel model_of(const std::string& name, const MeasuredJob& job);

// Reruns every pick (taking up a rerun submitted before for this run, by its config hash), waits
// for them and checks each against its original with `perf` (seeded per job from `seed`).
// `progress` gets the reruns so far whenever one changes. Stops early, the reruns running on, when
// options.stop is set or options.may_continue fails.
Result<std::vector<ReproductionReport>> rerun_sample(
    cli::Client& client, const std::vector<ReproductionPick>& picks, const std::string& run_id,
    const stats::PerfGateOptions& perf, std::uint64_t seed, const DriverOptions& options,
    const std::function<void(const std::vector<ReproductionReport>&)>& progress);

}  // namespace kiln::qualification::shell

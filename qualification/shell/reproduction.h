// Reruns of measured jobs through the coordinator: `kiln rerun JOB` and the nightly's
// reproducibility sample. What is rerun and how a rerun is judged are pure
// (run_service.h reproducibility_sample, reproducibility.h check_reproduction); this submits,
// waits and reads.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "common/protocol/messages.h"
#include "client/client.h"
#include "client/job_watcher.h"
#include "qualification/reproducibility.h"
#include "qualification/run_service.h"
#include "qualification/shell/run_driver.h"

namespace kiln::qualification::shell {

// The job that reruns `job`: its recorded submission again (workload, arguments, artifacts by
// digest, bundle, seed, chips, benchmark, class), on any node of its revision, under a config hash
// of its own derived from the original's and `purpose`: a driver that takes up its jobs by config
// hash never takes the original for its rerun, nor the other way round.
Result<protocol::SubmitJob> rerun_submission(const MeasuredJob& job, std::string_view purpose);

// A rerun under way: its one job, or the ranks of a gang once the lease of its nodes is granted.
struct RerunInFlight {
  std::uint64_t original_job_id = 0;
  protocol::SubmitJob submission;  // rerun_submission of the original (a gang's, before rank_job)
  std::string revision;
  int nodes = 1;
  std::uint64_t lease_id = 0;          // a gang's, while it waits and runs
  std::vector<std::uint64_t> job_ids;  // the job, or the ranks; empty while a gang waits for its lease

  std::uint64_t first_job_id() const { return job_ids.empty() ? 0 : job_ids.front(); }
};

// Starts the rerun of `original`, measured on `revision`: takes up the one submitted before for
// the same purpose (its config hashes in `submitted_before`), or submits the job, or requests the
// lease of whole nodes a gang waits for. An error for_now() is the coordinator's "not now"; any
// other says why the rerun cannot start.
Result<RerunInFlight> start_rerun(cli::Client& client, const MeasuredJob& original, const std::string& revision,
                                  std::string_view purpose,
                                  const std::map<std::string, std::uint64_t>& submitted_before);

// The config hashes of the jobs the coordinator lists, to take up reruns submitted before.
std::map<std::string, std::uint64_t> listed_config_hashes(cli::Client& client);

// Follows reruns with one JobWatcher (watch_jobs): their jobs, and the leases their gangs wait
// for, so that a rerun costs a request per change of it rather than per poll, whatever its length.
class RerunFollower {
 public:
  // `wait_ms`: how long one wait may last; `poll_interval`: between polls of an older coordinator.
  RerunFollower(cli::Client& client, std::uint32_t wait_ms, std::chrono::milliseconds poll_interval)
      : client_(client), watcher_(client, wait_ms, poll_interval) {}

  // Follows the rerun's jobs, or its gang's lease while it waits for it.
  void follow(const RerunInFlight& rerun);
  void set_wait_ms(std::uint32_t wait_ms) { watcher_.set_wait_ms(wait_ms); }
  // Waits for a change of a rerun followed (at most the wait; at once for one not heard of yet).
  Status wait();
  // Moves a rerun on from what was heard: a gang's ranks are submitted once its lease is granted.
  // Its result (the ranks combined, the lease released) once every job was heard to end, nullopt
  // until then. A gang whose lease ended before it ran, or whose ranks were refused, gives a result
  // that did not run, saying why.
  Result<std::optional<JobResult>> advance(RerunInFlight& rerun, const QualificationModel& model);

 private:
  void forget(const RerunInFlight& rerun);

  cli::Client& client_;
  cli::JobWatcher watcher_;
  std::map<std::uint64_t, protocol::JobState> jobs_;             // followed jobs, as last heard
  std::map<std::uint64_t, protocol::LeaseSummary> leases_;       // followed leases, as last heard
};

// Gives up a rerun: its jobs cancelled, its lease released.
void cancel_rerun(cli::Client& client, const RerunInFlight& rerun);

// The original measurement's result as a run read it: its job's, or its ranks' combined.
Result<JobResult> measured_result(cli::Client& client, const MeasuredJob& original, const QualificationModel& model);

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

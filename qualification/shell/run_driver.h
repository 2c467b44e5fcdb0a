// The shell of a qualification run: carries out what QualificationRun asks (jobs through the
// coordinator, bundles through a builder, tickets through a sink, quarantines) and feeds back
// what the jobs measured, until the run has its verdict. The run's report is handed to `record`
// as it goes (the qualifier records it on the coordinator, so `kiln run ID` shows progress from
// anywhere).
#pragma once

#include <atomic>
#include <filesystem>
#include <functional>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include "common/enum_names.h"
#include "common/error.h"
#include "client/client.h"
#include "qualification/run.h"
#include "qualification/shell/bundle_builder.h"
#include "qualification/ticket.h"

namespace kiln::qualification::shell {

// How a job's files (stack files, goldens) reach the agents: uploaded to the coordinator and
// named by digest, fetched and verified by each agent; or by path on a mount every agent shares.
enum class ArtifactMode { digest, shared_mount };
constexpr EnumTable<ArtifactMode, 2> enum_names(ArtifactMode) {
  return {{{ArtifactMode::digest, "digest"}, {ArtifactMode::shared_mount, "shared_mount"}}};
}

// A job's files as uploaded artifacts (ArtifactMode::digest): the job names them by digest.
struct ShippedFiles {
  std::optional<protocol::ArtifactRef> stack;
  std::optional<protocol::ArtifactRef> baseline_stack;
  std::vector<protocol::ArtifactRef> golden;  // the model's golden files, by their file names
};

struct DriverOptions {
  std::filesystem::path bundle_dir;  // the bundles' stack files (the sim builder writes them)
  std::filesystem::path golden_dir;  // the models' golden references, readable by the agents
  std::string workload = "model";    // the agents' [workloads] name of kiln-workload-model
  ArtifactMode artifacts = ArtifactMode::shared_mount;
  DurationMs poll_interval_ms = 500;
  DurationMs record_interval_ms = 5000;  // how often the report is handed to `record`
  std::ostream* progress = nullptr;      // one line per event; nullptr: quiet
  const std::atomic<bool>* stop = nullptr;  // set (by a signal): return, leaving the run's jobs running
  std::function<void(const RunReport&)> record;  // the report so far, and at the end
  // Asked every turn: an error stops driving as `stop` does (the qualifier lost its claim).
  std::function<Status()> may_continue;
  // Asked every turn: who cancelled the run (kiln run cancel), or empty. A cancelled run's jobs
  // and leases are cancelled at the coordinator, and drive_run returns Errc::conflict saying so.
  std::function<std::string()> cancelled_by;
};

// The coordinator did not answer, or is full for now: a request refused this way was not refused
// for what it asked, and is asked again once the run is driven again.
bool for_now(const Error& error);

// The priority class of a run's jobs of this purpose: the tier's class, bisect for bisection probes.
protocol::PriorityClass class_for(JobPurpose purpose, Tier tier);

// The job a request becomes: workload, arguments, chips, class, benchmark, bundle and config
// hash. The hash covers the run id too, so it names this run's job for this request and no
// other run's. Fails for a model the set does not have or one without a workload. With
// `shipped`, the job names its files as artifacts ({artifact:NAME}) instead of by path.
Result<protocol::SubmitJob> job_for(const JobRequest& request, const std::string& run_id, Tier tier,
                                    const ModelSet& set, const DriverOptions& options,
                                    const ShippedFiles* shipped = nullptr);

// The files a job for `request` reads: what ArtifactMode::digest uploads. Golden files that do
// not exist are left out (a training model's golden has no tensors).
struct JobFiles {
  std::filesystem::path stack;
  std::filesystem::path baseline_stack;  // empty: none
  std::vector<std::filesystem::path> golden;
};
Result<JobFiles> job_files(const JobRequest& request, const ModelSet& set, const DriverOptions& options);

// Every stack file the run's jobs read (the candidate's and its baselines', in bundle_dir), checked
// before its first job: a missing one is Errc::not_found naming the file and what to do, as the
// jobs could not run without it.
Status check_stack_files(const RunInput& input, const std::filesystem::path& bundle_dir);

// Runs until the run finishes, or `stop` is set or may_continue fails: then its jobs keep
// running for whoever drives the run next, and the error says so; or until it is cancelled.
// Resumes: a request whose job this run already submitted (the same config hash, among the
// coordinator's newest 1000 jobs) that is queued, running or ended with a result is taken up
// instead of started again, so running a run's command again with its --run-id after the
// driving process died measures nothing twice.
// `history` is the run input's history (bundles for bisection are built from it).
Result<RunReport> drive_run(cli::Client& client, QualificationRun& run, const ModelSet& set,
                            const std::vector<Change>& history, BundleBuilder& builder, TicketSink& tickets,
                            const DriverOptions& options);

}  // namespace kiln::qualification::shell

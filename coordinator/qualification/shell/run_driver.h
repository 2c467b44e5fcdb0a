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
#include <string>

#include "common/error.h"
#include "coordinator/cli/client.h"
#include "coordinator/qualification/run.h"
#include "coordinator/qualification/shell/bundle_builder.h"
#include "coordinator/qualification/ticket.h"

namespace kiln::qualification::shell {

struct DriverOptions {
  std::filesystem::path bundle_dir;  // the bundles' stack files (the sim builder writes them)
  std::filesystem::path golden_dir;  // the models' golden references, readable by the agents
  std::string workload = "model";    // the agents' [workloads] name of kiln-workload-model
  DurationMs poll_interval_ms = 500;
  DurationMs record_interval_ms = 5000;  // how often the report is handed to `record`
  std::ostream* progress = nullptr;      // one line per event; nullptr: quiet
  const std::atomic<bool>* stop = nullptr;  // set (by a signal): return, leaving the run's jobs running
  std::function<void(const RunReport&)> record;  // the report so far, and at the end
  // Asked every turn: an error stops driving as `stop` does (the qualifier lost its claim).
  std::function<Status()> may_continue;
};

// The priority class of a run's jobs of this purpose: the tier's class, bisect for bisection probes.
protocol::PriorityClass class_for(JobPurpose purpose, Tier tier);

// The job a request becomes: workload, arguments, chips, class, benchmark, bundle and config
// hash. The hash covers the run id too, so it names this run's job for this request and no
// other run's. Fails for a model the set does not have or one without a workload.
Result<protocol::SubmitJob> job_for(const JobRequest& request, const std::string& run_id, Tier tier,
                                    const ModelSet& set, const DriverOptions& options);

// Runs until the run finishes, or `stop` is set or may_continue fails: then its jobs keep
// running for whoever drives the run next, and the error says so.
// Resumes: a request whose job this run already submitted (the same config hash, among the
// coordinator's newest 1000 jobs) that is queued, running or ended with a result is taken up
// instead of started again, so running a run's command again with its --run-id after the
// driving process died measures nothing twice.
// `history` is the run input's history (bundles for bisection are built from it).
Result<RunReport> drive_run(cli::Client& client, QualificationRun& run, const ModelSet& set,
                            const std::vector<Change>& history, BundleBuilder& builder, TicketSink& tickets,
                            const DriverOptions& options);

}  // namespace kiln::qualification::shell

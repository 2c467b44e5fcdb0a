// One requested run driven from its request to its finished report, on its own thread: the
// comparison, the release's soak rounds, the nightly's reproducibility sample and fleet check,
// flake-budget tickets, the new baselines, then the risk register's word (waivers, pages).
#pragma once

#include <atomic>
#include <string>

#include "common/error.h"
#include "records/run_request.h"
#include "client/records_client.h"
#include "qualifier/qualifier.h"
#include "qualifier/qualifier_config.h"
#include "qualifier/recent_runs.h"
#include "qualifier/run_errors.h"
#include "qualifier/waiver_watch.h"

namespace kiln::qualifier {

// What the runs driven at once and the main loop share; each part guards itself.
struct SharedRecords {
  // The runs relying on waivers, so that their lapse is seen.
  WaivedRuns waived;
  // The other runs' digests and flakes, read once and then only what changed.
  RecentRuns recent;
  // The change history, read once and then only the changes recorded since.
  qualification::shell::ChangeHistory changes;
  RunCancels cancels;
};

// Drives the claimed run `request` as `owner`. Returns early (the run stays unfinished, for this
// or another qualifier to take up) when stopped, when the claim is lost or when the coordinator
// stops answering (run_errors.h); a run that cannot be carried out, or was cancelled, ends with
// the error verdict.
Status drive_requested_run(const QualifierConfig& config, const Setup& setup, SharedRecords& shared,
                           const qualification::RunRequest& request, const std::string& owner,
                           const std::atomic<bool>& stop);

}  // namespace kiln::qualifier

// Following and showing one job (shared by submit --wait, result and diag), and the plain "ok"
// answers of cancel, drain, undrain and release-lease.
#pragma once

#include <cstdint>

#include "common/error.h"
#include "common/time.h"
#include "common/protocol/messages.h"
#include "client/client.h"

namespace kiln::cli {

// Follows a job until it ends, or until timeout_ms has passed (0: no limit; then the job as it is
// now), by watch_jobs (JobWatcher: one request per change of the job, or per 50 s it runs
// without one); prints its state changes on stderr unless quiet.
Result<protocol::JobDetail> wait_for_job(Client& client, std::uint64_t job_id, bool quiet, DurationMs timeout_ms = 0);

// The job (waited for, or as it is now), printed as text or JSON; exit 1 for a job that ended
// other than succeeded.
int show_job(Client& client, std::uint64_t job_id, bool wait, bool json);

// Sends a request answered by Ok and prints the coordinator's words (or, with --json, the reply).
int request_ok(Client& client, protocol::Body request, bool json);

}  // namespace kiln::cli

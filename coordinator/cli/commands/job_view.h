// Following and showing one job: shared by submit --wait, result and diag.
#pragma once

#include <cstdint>

#include "common/error.h"
#include "common/protocol/messages.h"
#include "coordinator/cli/client.h"

namespace kiln::cli {

// Polls a job until it ends; prints its state changes on stderr unless quiet.
Result<protocol::JobDetail> wait_for_job(Client& client, std::uint64_t job_id, bool quiet);

// The job (waited for, or as it is now), printed as text or JSON; exit 1 for a job that ended
// other than succeeded.
int show_job(Client& client, std::uint64_t job_id, bool wait, bool json);

}  // namespace kiln::cli

// What the coordinator holds that a requested run's input is made of (run_service.h RunFacts):
// the candidate and baseline bundles, the change history, the fleet's revisions and, for the
// sequential gate, the noise records of the latest runs.
#pragma once

#include "common/error.h"
#include "common/time.h"
#include "client/client.h"
#include "qualification/model_set.h"
#include "records/run_request.h"
#include "qualification/run_service.h"
#include "client/records_client.h"

namespace kiln::qualifier {

// How far back the noise records and the nightly's reproducibility sample are looked for: the
// stack changes daily, and a reader of the latest runs must stop somewhere however long the
// history.
inline constexpr DurationMs kLookbackMs = 30 * 24 * kHourMs;

Result<qualification::RunFacts> gather_facts(cli::Client& client, const qualification::RunRequest& request,
                                             const qualification::ModelSet& set,
                                             qualification::shell::ChangeHistory& changes);

}  // namespace kiln::qualifier

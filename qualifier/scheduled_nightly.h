// The qualifier's own nightly ([schedule]): asked for when the calendar says it is due.
#pragma once

#include <string>
#include <vector>

#include "client/client.h"
#include "records/run_request.h"
#include "client/records_client.h"
#include "qualifier/qualifier_config.h"

namespace kiln::qualifier {

// Asks for tonight's nightly when the calendar says it is due (schedule.h): the bundle at the
// latest recorded change, built as `kiln bundle build` builds it, under the night's run id. A
// second qualifier asking at the same moment writes the same request, which the coordinator
// keeps once. `requests`: those recorded. `problem` holds the last problem said, so a failing
// build is said once a night.
void ask_for_scheduled_nightly(cli::Client& client, const QualifierConfig& config,
                               const std::vector<qualification::RunRequest>& requests,
                               qualification::shell::ChangeHistory& changes, std::string& problem);

}  // namespace kiln::qualifier

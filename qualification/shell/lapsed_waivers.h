// Reports judged again, through a session, by the waivers the coordinator holds now: what every
// reader of a run report does before it relies on the report's waivers (kiln run, kiln risks, a
// promotion, the qualifier's waiver watch).
#pragma once

#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "client/client.h"
#include "common/error.h"
#include "common/time.h"

namespace kiln::qualification::shell {

// Judges the reports again by the waivers the coordinator holds at `now` (waiver.h
// revoke_lapsed_waivers): a report relying on a waiver withdrawn, expired or replaced since fails
// again. Lists the waivers only when a report relies on one.
Status revoke_lapsed_waivers(cli::Client& client, std::vector<nlohmann::json>& reports, TimeMs now);
Status revoke_lapsed_waivers(cli::Client& client, nlohmann::json& report, TimeMs now);

}  // namespace kiln::qualification::shell

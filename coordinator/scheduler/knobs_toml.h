// For configuration loaders that already hold a parsed document: includes toml++, so only
// include it from .cpp files.
#pragma once

#include <toml++/toml.h>

#include "coordinator/scheduler/knobs.h"

namespace kiln::scheduler {

// `scheduler_table` is the `[scheduler]` table itself, read from `source` (errors give its line).
Result<SchedulerKnobs> parse_scheduler_knobs(const toml::table& scheduler_table, std::string_view source);

}  // namespace kiln::scheduler

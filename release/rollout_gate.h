// Releases follow health: a bundle leaves an environment for the next only once the
// coordinator's rollout of it there converged, every node of the environment runs it and is
// healthy (docs/releases.md, "Promotion follows the rollout"). Pure: the shell hands in what
// `kiln envs` and `kiln nodes` show.
#pragma once

#include <string>
#include <vector>

#include "common/error.h"
#include "common/protocol/messages.h"

namespace kiln::release {

// May bundle `bundle_id` go from `previous` to `environment`? Errc::conflict unless the
// coordinator watches the environments repository, rolls out `bundle_id` in `previous`, and that
// rollout converged with every node up (none failed, halted, quarantined or lost); the refusal
// names what is missing and what to do. `rollouts`: `kiln envs`; `nodes`: `kiln nodes`.
Status check_previous_rollout(const std::string& environment, const std::string& previous,
                              const std::string& bundle_id, const protocol::EnvironmentList& rollouts,
                              const std::vector<protocol::NodeSummary>& nodes);

}  // namespace kiln::release

// The environments repository at one revision, read with git by argv: what `kiln release`
// decides against and what the coordinator's rollouts converge nodes on.
#pragma once

#include <string>

#include "common/error.h"
#include "release/environments.h"
#include "release/shell/git.h"

namespace kiln::release {

// Every bundles/*.toml, environments/*.toml and compatibility.toml at `rev`, checked together
// (read_snapshot). An invalid file is Errc::config naming the revision, the file and the line.
Result<Snapshot> snapshot_at(const Git& git, const std::string& rev);

}  // namespace kiln::release

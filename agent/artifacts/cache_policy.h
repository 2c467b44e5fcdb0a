// Which cached artifacts go when the host cache is over its limit: least recently used first,
// never one a running job uses. Pure, so the policy is tested without files.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "common/time.h"

namespace kiln::agent::artifacts {

struct CachedArtifact {
  std::string sha256;
  std::uint64_t size_bytes = 0;
  TimeMs last_used_ms = 0;
};

// The digests to remove, oldest use first, until the rest fit in limit_bytes; entries in
// `in_use` stay even when the cache then remains over the limit.
std::vector<std::string> artifacts_to_evict(std::vector<CachedArtifact> entries, const std::set<std::string>& in_use,
                                            std::uint64_t limit_bytes);

}  // namespace kiln::agent::artifacts

#include "agent/artifacts/cache_policy.h"

#include <algorithm>

namespace kiln::agent::artifacts {

std::vector<std::string> artifacts_to_evict(std::vector<CachedArtifact> entries, const std::set<std::string>& in_use,
                                            std::uint64_t limit_bytes) {
  std::uint64_t total = 0;
  for (const CachedArtifact& entry : entries) total += entry.size_bytes;
  // Ties by digest, so the choice does not depend on the order the directory was read in.
  std::sort(entries.begin(), entries.end(), [](const CachedArtifact& a, const CachedArtifact& b) {
    return a.last_used_ms != b.last_used_ms ? a.last_used_ms < b.last_used_ms : a.sha256 < b.sha256;
  });
  std::vector<std::string> evicted;
  for (const CachedArtifact& entry : entries) {
    if (total <= limit_bytes) break;
    if (in_use.count(entry.sha256) != 0) continue;
    evicted.push_back(entry.sha256);
    total -= entry.size_bytes;
  }
  return evicted;
}

}  // namespace kiln::agent::artifacts

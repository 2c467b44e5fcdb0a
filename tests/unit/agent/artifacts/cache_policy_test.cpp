#include "agent/artifacts/cache_policy.h"

#include <doctest/doctest.h>

using kiln::agent::artifacts::artifacts_to_evict;
using kiln::agent::artifacts::CachedArtifact;

TEST_CASE("the least recently used artifacts go first, until the cache fits its limit") {
  const std::vector<CachedArtifact> cache = {{"new", 40, 300}, {"old", 40, 100}, {"mid", 40, 200}};
  CHECK(artifacts_to_evict(cache, {}, 120).empty());
  CHECK(artifacts_to_evict(cache, {}, 100) == std::vector<std::string>{"old"});
  CHECK(artifacts_to_evict(cache, {}, 40) == std::vector<std::string>{"old", "mid"});
  CHECK(artifacts_to_evict(cache, {}, 0) == std::vector<std::string>{"old", "mid", "new"});
}

TEST_CASE("an artifact a running job uses is never evicted, even over the limit") {
  const std::vector<CachedArtifact> cache = {{"a", 50, 100}, {"b", 50, 200}, {"c", 50, 300}};
  CHECK(artifacts_to_evict(cache, {"a"}, 100) == std::vector<std::string>{"b"});
  CHECK(artifacts_to_evict(cache, {"a", "b", "c"}, 0).empty());
}

TEST_CASE("ties in last use are broken by digest, not by the order the directory was read") {
  CHECK(artifacts_to_evict({{"y", 10, 5}, {"x", 10, 5}}, {}, 10) == std::vector<std::string>{"x"});
  CHECK(artifacts_to_evict({{"x", 10, 5}, {"y", 10, 5}}, {}, 10) == std::vector<std::string>{"x"});
}

#include <doctest/doctest.h>

#include "common/error.h"

TEST_CASE("errors describe themselves with their code") {
  kiln::Result<int> r = kiln::fail(kiln::Errc::config, "agent.toml:3: heartbeat_interval_ms must be positive");
  REQUIRE_FALSE(r.has_value());
  CHECK(r.error().describe() == "config: agent.toml:3: heartbeat_interval_ms must be positive");
}

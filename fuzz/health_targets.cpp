// The agent's health targets (health-targets.toml).
#include "agent/health/targets.h"
#include "fuzz/fuzz_support.h"

KILN_FUZZ_ENTRY(health_targets) {
  (void)kiln::agent::health::parse_health_targets(kiln::fuzz::as_text(data, size), "health-targets.toml");
  return 0;
}

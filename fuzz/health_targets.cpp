// The agent's health targets (health-targets.toml).
#include "agent/health/targets.h"
#include "fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  (void)kiln::agent::health::parse_health_targets(kiln::fuzz::as_text(data, size), "health-targets.toml");
  return 0;
}

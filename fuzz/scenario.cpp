// The fleet simulator's scenario file.
#include "fuzz/fuzz_support.h"
#include "sim/fleet/scenario.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  (void)kiln::fleet::parse_scenario_toml(kiln::fuzz::as_text(data, size), "scenario.toml");
  return 0;
}

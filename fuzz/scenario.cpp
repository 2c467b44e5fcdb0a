// The fleet simulator's scenario file.
#include "fuzz/fuzz_support.h"
#include "sim/fleet/scenario.h"

KILN_FUZZ_ENTRY(scenario) {
  (void)kiln::fleet::parse_scenario_toml(kiln::fuzz::as_text(data, size), "scenario.toml");
  return 0;
}

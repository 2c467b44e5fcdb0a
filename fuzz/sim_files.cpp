// The sim chip's TOML files: node options (the TOML file form), fault file and node state,
// each read from the same input in memory.
#include "fuzz/fuzz_support.h"
#include "sim/chip/sim_files.h"

KILN_FUZZ_ENTRY(sim_files) {
  const std::string_view text = kiln::fuzz::as_text(data, size);
  (void)kiln::sim::parse_sim_options_toml(text, "/var/lib/kiln-sim/node.toml");
  (void)kiln::sim::parse_fault_file(text, "/var/lib/kiln-sim/faults.toml", 1000);
  (void)kiln::sim::parse_node_state(text, "/var/lib/kiln-sim/state/state.toml");
  return 0;
}

// The sim chip's TOML files: node options, fault file and node state. The readers take paths,
// so each input is written once as the state file of a scratch state directory and read as
// each of the three.
#include "fuzz/fuzz_support.h"
#include "sim/chip/sim_files.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto& scratch = kiln::fuzz::ScratchDir::get();
  const std::string path = scratch.write("state.toml", kiln::fuzz::as_text(data, size));
  (void)kiln::sim::parse_sim_options(path);
  (void)kiln::sim::read_fault_file(path, 1000);
  (void)kiln::sim::read_node_state(scratch.path());
  return 0;
}

// coordinator.toml. The loader takes a path, so each input is written to a scratch file.
#include "coordinator/shell/coordinator_config.h"
#include "fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string path = kiln::fuzz::ScratchDir::get().write("coordinator.toml", kiln::fuzz::as_text(data, size));
  (void)kiln::coordinator::load_coordinator_config(path);
  return 0;
}

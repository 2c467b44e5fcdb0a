// The kiln client's config. The loader takes a path, so each input is written to a scratch file.
#include "coordinator/cli/client.h"
#include "fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string path = kiln::fuzz::ScratchDir::get().write("client.toml", kiln::fuzz::as_text(data, size));
  (void)kiln::cli::load_client_config(path);
  return 0;
}

// The qualification set (qualification-set.toml).
#include "qualification/model_set.h"
#include "fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  (void)kiln::qualification::parse_model_set(kiln::fuzz::as_text(data, size), "qualification-set.toml");
  return 0;
}

// The sim workloads' stack-effects file.
#include "fuzz/fuzz_support.h"
#include "sim/workloads/stack_effects.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  (void)kiln::sim::workloads::parse_stack_effects(kiln::fuzz::as_text(data, size), "stack.toml");
  return 0;
}

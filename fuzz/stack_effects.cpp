// The sim workloads' stack-effects file.
#include "fuzz/fuzz_support.h"
#include "sim/workloads/stack_effects.h"

KILN_FUZZ_ENTRY(stack_effects) {
  (void)kiln::sim::workloads::parse_stack_effects(kiln::fuzz::as_text(data, size), "stack.toml");
  return 0;
}

// The qualification set (qualification-set.toml).
#include "qualification/model_set.h"
#include "fuzz/fuzz_support.h"

KILN_FUZZ_ENTRY(model_set) {
  (void)kiln::qualification::parse_model_set(kiln::fuzz::as_text(data, size), "qualification-set.toml");
  return 0;
}

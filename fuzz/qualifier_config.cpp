// qualifier.toml, from memory: the text and the name its errors give as the file.
#include "qualifier/qualifier_config.h"
#include "fuzz/fuzz_support.h"

KILN_FUZZ_ENTRY(qualifier_config) {
  (void)kiln::qualifier::qualifier_config_from_text(kiln::fuzz::as_text(data, size), "/etc/kiln/qualifier.toml");
  return 0;
}

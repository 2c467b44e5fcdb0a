// coordinator.toml, from memory: the text and the name its errors give as the file.
#include "coordinator/server/coordinator_config.h"
#include "fuzz/fuzz_support.h"

KILN_FUZZ_ENTRY(coordinator_config) {
  (void)kiln::coordinator::coordinator_config_from_text(kiln::fuzz::as_text(data, size), "/etc/kiln/coordinator.toml");
  return 0;
}

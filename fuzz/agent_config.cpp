// agent.toml, from memory: the text and the name its errors give as the file.
#include "agent/host/agent_config.h"
#include "fuzz/fuzz_support.h"

KILN_FUZZ_ENTRY(agent_config) {
  (void)kiln::agent::agent_config_from_text(kiln::fuzz::as_text(data, size), "/etc/kiln/agent.toml");
  return 0;
}

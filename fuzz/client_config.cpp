// The kiln client's config, from memory: the text and the name its errors give as the file.
#include "client/client.h"
#include "fuzz/fuzz_support.h"

KILN_FUZZ_ENTRY(client_config) {
  (void)kiln::cli::client_config_from_text(kiln::fuzz::as_text(data, size), "/etc/kiln/client.toml");
  return 0;
}

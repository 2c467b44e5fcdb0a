// The ticket webhook's TOML, from memory, then its URL and headers as the sink checks them
// before any socket is opened.
#include "qualification/webhook_sink.h"
#include "qualifier/ticket_sinks.h"
#include "fuzz/fuzz_support.h"

KILN_FUZZ_ENTRY(webhook_config) {
  auto config = kiln::qualifier::webhook_config_from_text(kiln::fuzz::as_text(data, size), "/etc/kiln/webhook.toml");
  if (!config) return 0;
  auto endpoint = kiln::qualification::webhook_endpoint(*config);
  if (endpoint && (endpoint->host.empty() || endpoint->port.empty() || endpoint->path.empty() ||
                   endpoint->path.front() != '/')) {
    kiln::fuzz::violated("an accepted webhook url has an empty host or port, or a path not starting with /");
  }
  return 0;
}

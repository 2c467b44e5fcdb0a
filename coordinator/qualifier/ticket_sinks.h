// The ticket sink a qualification run files to: the tickets directory, or an HTTP webhook
// that keeps its record there.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "common/error.h"
#include "coordinator/qualification/ticket.h"

namespace kiln::qualifier {

// webhook_config empty: the directory sink. Else the webhook TOML (url, headers,
// bearer_token_file, timeout_ms, max_attempts, retry_backoff_ms); a bad one is Errc::config.
// The webhook TOML from text already read; `path` names the file in errors.
Result<qualification::WebhookSinkConfig> webhook_config_from_text(std::string_view text, const std::string& path);

Result<std::unique_ptr<qualification::TicketSink>> open_ticket_sink(const std::string& tickets_dir,
                                                                    const std::string& webhook_config);

}  // namespace kiln::qualifier

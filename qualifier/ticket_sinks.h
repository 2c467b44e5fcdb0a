// Tickets from the qualifier: a run files them as records on the coordinator (one per culprit,
// whoever files it and however often), and the qualifier's poll delivers them to its sink (the
// tickets directory, or an HTTP webhook that keeps its record there), retrying a sink that did
// not take one with the backoff of [tickets] (ticket_record.h decides what is due).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "client/client.h"
#include "qualification/ticket.h"
#include "records/ticket_record.h"

namespace kiln::qualifier {

// webhook_config empty: the directory sink. Else the webhook TOML (url, headers,
// bearer_token_file, timeout_ms, max_attempts, retry_backoff_ms); a bad one is Errc::config.
// The webhook TOML from text already read; `path` names the file in errors.
Result<qualification::WebhookSinkConfig> webhook_config_from_text(std::string_view text, const std::string& path);

Result<std::unique_ptr<qualification::TicketSink>> open_ticket_sink(const std::string& tickets_dir,
                                                                    const std::string& webhook_config);
// The name open_ticket_sink's sink has in a ticket's deliveries: "webhook" or "directory".
std::string ticket_sink_name(const std::string& webhook_config);

// A run's tickets as records on the coordinator, each to be delivered to `sinks`: `filed` the
// first time its culprit is filed, `duplicate` after (the record is left as it is).
class RecordTicketSink final : public qualification::TicketSink {
 public:
  RecordTicketSink(cli::Client& client, std::string run_id, std::vector<std::string> sinks)
      : client_(client), run_id_(std::move(run_id)), sinks_(std::move(sinks)) {}
  Result<qualification::FileResult> file(const qualification::Ticket& ticket) override;

 private:
  cli::Client& client_;
  std::string run_id_;
  std::vector<std::string> sinks_;
};

// Tries every delivery to `sink` (named `sink_name`) that is due at `now_ms` once and records
// how it went on the coordinator; `say` gets one line per attempt and per problem.
void deliver_due_tickets(cli::Client& client, qualification::TicketSink& sink, const std::string& sink_name,
                         const qualification::DeliveryPolicy& policy, TimeMs now_ms,
                         const std::function<void(const std::string&)>& say);

}  // namespace kiln::qualifier

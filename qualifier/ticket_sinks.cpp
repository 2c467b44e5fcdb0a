#include "qualifier/ticket_sinks.h"

#include <algorithm>

#include <fmt/format.h>

#include "common/config/toml_errors.h"
#include "client/records_client.h"
#include "qualification/webhook_sink.h"

namespace kiln::qualifier {

namespace q = kiln::qualification;
namespace qs = kiln::qualification::shell;

namespace {

Result<q::WebhookSinkConfig> load_webhook_config(const std::string& path) {
  auto text = config::read_text_file(path, "the webhook config", "check webhook_config in qualifier.toml");
  if (!text) return fail(Errc::config, text.error().message);
  return webhook_config_from_text(*text, path);
}

}  // namespace

Result<q::WebhookSinkConfig> webhook_config_from_text(std::string_view text, const std::string& path) {
  auto table = config::parse_toml(text, path, "fix the webhook config");
  if (!table) return fail(Errc::config, table.error().message);
  const std::vector<std::string_view> settings = {"url",        "headers",      "bearer_token_file",
                                                  "timeout_ms", "max_attempts", "retry_backoff_ms"};
  if (auto ok = config::check_known_keys(path, *table, "the webhook config", settings); !ok) {
    return tl::unexpected(ok.error());
  }
  q::WebhookSinkConfig config;
  for (const auto& entry : *table) {
    // Not a structured binding: clang cannot capture one in the lambda below.
    const std::string_view name = entry.first.str();
    const toml::node& node = entry.second;
    const auto wrong_type = [&](std::string_view type) {
      return fail(Errc::config, fmt::format("{}: {} must be {}", config::where(path, node.source()), name, type));
    };
    if (name == "url" || name == "bearer_token_file") {
      if (!node.is_string()) return wrong_type("a string");
      (name == "url" ? config.url : config.bearer_token_file) = *node.value<std::string>();
    } else if (name == "headers") {
      if (!node.is_table()) return wrong_type("a table of header = \"value\"");
      for (const auto& [header, value] : *node.as_table()) {
        if (!value.is_string()) {
          return fail(Errc::config, fmt::format("{}: header {} must be a string",
                                                config::where(path, value.source()), header.str()));
        }
        config.headers[std::string(header.str())] = *value.value<std::string>();
      }
    } else {
      if (!node.is_integer()) return wrong_type("an integer");
      const std::int64_t value = *node.value_exact<std::int64_t>();
      if (name == "timeout_ms") config.timeout_ms = value;
      if (name == "max_attempts") config.max_attempts = static_cast<int>(value);
      if (name == "retry_backoff_ms") config.retry_backoff_ms = value;
    }
  }
  return config;
}

Result<std::unique_ptr<q::TicketSink>> open_ticket_sink(const std::string& tickets_dir,
                                                        const std::string& webhook_config) {
  if (webhook_config.empty()) {
    auto sink = q::DirectoryTicketSink::open(tickets_dir);
    if (!sink) return tl::unexpected(sink.error());
    return std::unique_ptr<q::TicketSink>(std::make_unique<q::DirectoryTicketSink>(std::move(*sink)));
  }
  auto config = load_webhook_config(webhook_config);
  if (!config) return tl::unexpected(config.error());
  auto sink = q::WebhookTicketSink::open(*config, tickets_dir);
  if (!sink) return tl::unexpected(sink.error());
  return std::unique_ptr<q::TicketSink>(std::make_unique<q::WebhookTicketSink>(std::move(*sink)));
}

std::string ticket_sink_name(const std::string& webhook_config) {
  return webhook_config.empty() ? "directory" : "webhook";
}

Result<q::FileResult> RecordTicketSink::file(const q::Ticket& ticket) {
  auto held = qs::get_ticket(client_, ticket.id);
  if (held) return q::FileResult::duplicate;
  if (held.error().code != Errc::not_found) return tl::unexpected(held.error());
  // Two qualifiers filing one culprit at once both get here: the coordinator keeps the first.
  if (auto ok = qs::record_ticket(client_, q::new_ticket_record(ticket, run_id_, sinks_)); !ok) {
    return tl::unexpected(ok.error());
  }
  return q::FileResult::filed;
}

void deliver_due_tickets(cli::Client& client, q::TicketSink& sink, const std::string& sink_name,
                         const q::DeliveryPolicy& policy, TimeMs now_ms,
                         const std::function<void(const std::string&)>& say) {
  auto tickets = qs::list_tickets(client);
  if (!tickets) return say("could not list the tickets to deliver: " + tickets.error().message);
  for (const auto& due : q::deliveries_due(*tickets, {sink_name}, now_ms)) {
    auto record = std::find_if(tickets->begin(), tickets->end(), [&](const auto& t) { return t.ticket.id == due.ticket_id; });
    // The sink's own duplicate means it has the ticket already: delivered.
    const auto filed = sink.file(record->ticket);
    const Status outcome = filed ? Status{} : Status(tl::unexpected(filed.error()));
    q::TicketDelivery& delivery = record->sinks.at(due.sink);
    delivery = q::after_attempt(delivery, outcome, now_ms, policy);
    if (delivery.delivered) {
      say(fmt::format("ticket {} delivered to the {} sink (attempt {})", due.ticket_id, due.sink, delivery.attempts));
    } else {
      say(fmt::format("ticket {} not delivered to the {} sink (attempt {}): {}; retrying in {} ms", due.ticket_id,
                      due.sink, delivery.attempts, delivery.last_error, delivery.next_attempt_at_ms - now_ms));
    }
    if (auto ok = qs::record_ticket(client, *record); !ok) {
      say(fmt::format("could not record the delivery of ticket {}: {}", due.ticket_id, ok.error().message));
    }
  }
}

}  // namespace kiln::qualifier

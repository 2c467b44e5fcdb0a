#include "records/ticket_record.h"

#include <algorithm>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace kiln::qualification {

using json = nlohmann::json;

TicketRecord new_ticket_record(Ticket ticket, std::string run_id, const std::vector<std::string>& sinks) {
  TicketRecord record;
  record.ticket = std::move(ticket);
  record.run_id = std::move(run_id);
  for (const auto& sink : sinks) record.sinks[sink] = TicketDelivery{};
  return record;
}

json to_json(const TicketRecord& record) {
  json document = json::parse(to_json_text(record.ticket));
  document["run_id"] = record.run_id;
  document["state"] = protocol::enum_name(record.state);
  document["duplicate_of"] = record.duplicate_of;
  document["state_set_by"] = record.state_set_by;
  document["state_set_at_ms"] = record.state_set_at_ms;
  json sinks = json::object();
  for (const auto& [name, d] : record.sinks) {
    sinks[name] = {{"delivered", d.delivered},
                   {"attempts", d.attempts},
                   {"next_attempt_at_ms", d.next_attempt_at_ms},
                   {"delivered_at_ms", d.delivered_at_ms},
                   {"last_error", d.last_error}};
  }
  document["sinks"] = std::move(sinks);
  return document;
}

Result<TicketRecord> ticket_record_from_json(const json& document) {
  auto ticket = ticket_from_json_text(document.dump(), "the ticket record");
  if (!ticket) return tl::unexpected(ticket.error());
  if (auto ok = validate(*ticket); !ok) return tl::unexpected(ok.error());
  if (ticket->id != ticket_id(ticket->kind, ticket->culprit_change)) {
    return fail(Errc::invalid_argument, fmt::format("ticket {} does not carry the id of its dedupe key {} ({}); file "
                                                    "tickets made with make_ticket",
                                                    ticket->id, dedupe_key(*ticket),
                                                    ticket_id(ticket->kind, ticket->culprit_change)));
  }
  TicketRecord record;
  record.ticket = std::move(*ticket);
  try {
    record.run_id = document.value("run_id", "");
    const auto state = protocol::enum_from_name<TicketState>(document.value("state", "open"));
    if (!state) {
      return fail(Errc::invalid_argument, fmt::format("ticket {}: state must be open, acknowledged, fixed or duplicate",
                                                      record.ticket.id));
    }
    record.state = *state;
    record.duplicate_of = document.value("duplicate_of", "");
    record.state_set_by = document.value("state_set_by", "");
    record.state_set_at_ms = document.value("state_set_at_ms", TimeMs{0});
    const json sinks = document.value("sinks", json::object());
    for (const auto& [name, d] : sinks.items()) {
      record.sinks[name] = TicketDelivery{d.at("delivered").get<bool>(), d.at("attempts").get<std::uint32_t>(),
                                          d.at("next_attempt_at_ms").get<TimeMs>(),
                                          d.at("delivered_at_ms").get<TimeMs>(), d.at("last_error").get<std::string>()};
    }
  } catch (const json::exception& error) {
    return fail(Errc::invalid_argument,
                fmt::format("ticket {}: malformed state or sinks ({})", record.ticket.id, error.what()));
  }
  if (record.run_id.empty()) {
    return fail(Errc::invalid_argument, fmt::format("ticket {} names no run_id; a ticket links to the run that filed it",
                                                    record.ticket.id));
  }
  return record;
}

TicketRecord merge_filing(const TicketRecord& held, const TicketRecord& filed) {
  TicketRecord merged = held;
  for (const auto& [name, delivery] : filed.sinks) {
    auto it = merged.sinks.find(name);
    if (it == merged.sinks.end()) {
      merged.sinks.emplace(name, delivery);
    } else if (!it->second.delivered && (delivery.delivered || delivery.attempts >= it->second.attempts)) {
      it->second = delivery;
    }
  }
  return merged;
}

Result<TicketRecord> with_state(TicketRecord record, TicketState state, const std::string& duplicate_of,
                                bool duplicate_of_recorded, const std::string& by, TimeMs now_ms) {
  const std::string& id = record.ticket.id;
  if (state == TicketState::duplicate) {
    if (duplicate_of.empty() || duplicate_of == id) {
      return fail(Errc::invalid_argument,
                  fmt::format("ticket {} can only be a duplicate of another ticket; name it (--of OTHER)", id));
    }
    if (!duplicate_of_recorded) {
      return fail(Errc::not_found, fmt::format("ticket {} is not recorded, so {} cannot duplicate it; `kiln tickets` "
                                               "lists the tickets",
                                               duplicate_of, id));
    }
  } else if (!duplicate_of.empty()) {
    return fail(Errc::invalid_argument, fmt::format("only a duplicate names the ticket it duplicates; drop '{}' to set "
                                                    "ticket {} {}",
                                                    duplicate_of, id, protocol::enum_name(state)));
  }
  record.state = state;
  record.duplicate_of = duplicate_of;
  record.state_set_by = by;
  record.state_set_at_ms = now_ms;
  return record;
}

std::vector<DeliveryDue> deliveries_due(const std::vector<TicketRecord>& records, const std::vector<std::string>& sinks,
                                        TimeMs now_ms) {
  std::vector<DeliveryDue> due;
  for (const auto& record : records) {
    for (const auto& [name, delivery] : record.sinks) {
      const bool ours = std::find(sinks.begin(), sinks.end(), name) != sinks.end();
      if (ours && !delivery.delivered && delivery.next_attempt_at_ms <= now_ms) {
        due.push_back({record.ticket.id, name});
      }
    }
  }
  return due;
}

TicketDelivery after_attempt(TicketDelivery delivery, const Status& outcome, TimeMs now_ms,
                             const DeliveryPolicy& policy) {
  ++delivery.attempts;
  if (outcome) {
    delivery.delivered = true;
    delivery.delivered_at_ms = now_ms;
    delivery.next_attempt_at_ms = 0;
    delivery.last_error.clear();
    return delivery;
  }
  // Doubling from the first backoff, stopping at the cap before it could overflow.
  DurationMs wait_ms = policy.first_backoff_ms;
  for (std::uint32_t i = 1; i < delivery.attempts && wait_ms < policy.max_backoff_ms; ++i) wait_ms *= 2;
  delivery.next_attempt_at_ms = now_ms + std::min(wait_ms, policy.max_backoff_ms);
  delivery.last_error = outcome.error().message;
  return delivery;
}

}  // namespace kiln::qualification

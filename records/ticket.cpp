#include "records/ticket.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/sha256.h"

namespace kiln::qualification {

std::string dedupe_key(TicketKind kind, std::string_view culprit) {
  return fmt::format("{}:{}", to_string(kind), culprit);
}

std::string dedupe_key(const Ticket& ticket) { return dedupe_key(ticket.kind, ticket.culprit_change); }

std::string ticket_id(TicketKind kind, std::string_view culprit) {
  return "kiln-" + sha256_hex(dedupe_key(kind, culprit)).substr(0, 16);
}

Ticket make_ticket(TicketKind kind, std::string team, std::string title, std::string culprit_change,
                   std::optional<Layer> layer, std::string evidence_json, TimeMs created_at_ms) {
  Ticket ticket{"", kind, std::move(team), std::move(title), std::move(culprit_change), layer, std::move(evidence_json),
                created_at_ms, ""};
  ticket.id = ticket_id(ticket.kind, ticket.culprit_change);
  return ticket;
}

Ticket make_culprit_ticket(const Change& culprit, TicketKind kind, std::string title, std::string evidence_json,
                           TimeMs created_at_ms) {
  return make_ticket(kind, culprit.owner_team, std::move(title), culprit.id, culprit.layer, std::move(evidence_json),
                     created_at_ms);
}

namespace {

Result<nlohmann::json> parse_object(std::string_view text, std::string_view what) {
  try {
    nlohmann::json json = nlohmann::json::parse(text);
    if (!json.is_object()) return fail(Errc::bad_message, fmt::format("{} must be a JSON object", what));
    return json;
  } catch (const nlohmann::json::exception& error) {
    return fail(Errc::bad_message, fmt::format("{} is not valid JSON ({})", what, error.what()));
  }
}

}  // namespace

nlohmann::json to_json(const Ticket& ticket) {
  auto evidence = parse_object(ticket.evidence_json, "evidence");
  nlohmann::json json = {{"schema", "kiln.ticket/1"},
          {"id", ticket.id},
          {"kind", to_string(ticket.kind)},
          {"team", ticket.team},
          {"title", ticket.title},
          {"culprit", ticket.culprit_change},
          {"layer", ticket.layer ? nlohmann::json(to_string(*ticket.layer)) : nlohmann::json(nullptr)},
          {"dedupe_key", dedupe_key(ticket)},
          {"evidence", evidence ? *evidence : nlohmann::json::object()},
          {"created_at_ms", ticket.created_at_ms}};
  if (!ticket.severity.empty()) json["severity"] = ticket.severity;
  return json;
}


Status validate(const Ticket& ticket) {
  if (ticket.id.empty() || ticket.team.empty() || ticket.title.empty() || ticket.culprit_change.empty()) {
    return fail(Errc::invalid_argument, fmt::format("ticket '{}' needs an id, a team, a title and a culprit; build it "
                                                    "with make_ticket",
                                                    ticket.title));
  }
  if (auto evidence = parse_object(ticket.evidence_json, fmt::format("the evidence of ticket {}", ticket.id)); !evidence) {
    return tl::unexpected(evidence.error());
  }
  return {};
}

std::string to_json_text(const Ticket& ticket) { return to_json(ticket).dump(2) + "\n"; }

Result<Ticket> ticket_from_json_text(std::string_view text, std::string_view source) {
  auto json = parse_object(text, source);
  if (!json) return tl::unexpected(json.error());
  try {
    if (json->value("schema", "") != "kiln.ticket/1") {
      return fail(Errc::bad_message, fmt::format("{}: not a kiln ticket (schema kiln.ticket/1)", source));
    }
    Ticket ticket;
    ticket.id = json->at("id").get<std::string>();
    const auto kind = ticket_kind_from_string(json->at("kind").get<std::string>());
    if (!kind) return fail(Errc::bad_message, fmt::format("{}: unknown ticket kind", source));
    ticket.kind = *kind;
    ticket.team = json->at("team").get<std::string>();
    ticket.title = json->at("title").get<std::string>();
    ticket.culprit_change = json->at("culprit").get<std::string>();
    if (const auto& layer = json->at("layer"); !layer.is_null()) {
      ticket.layer = layer_from_string(layer.get<std::string>());
      if (!ticket.layer) return fail(Errc::bad_message, fmt::format("{}: unknown layer", source));
    }
    ticket.evidence_json = json->at("evidence").dump();
    ticket.created_at_ms = json->at("created_at_ms").get<TimeMs>();
    ticket.severity = json->value("severity", "");
    return ticket;
  } catch (const nlohmann::json::exception& error) {
    return fail(Errc::bad_message, fmt::format("{}: malformed ticket ({})", source, error.what()));
  }
}

}  // namespace kiln::qualification

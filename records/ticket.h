// A ticket (kiln.ticket/1): a proven problem for the team that owns it, never twice for the same
// culprit. Its dedupe key is its kind plus its culprit: the change id for a regression, the node
// ("node:n07") for a hardware suspect, the test ("test:mlp-bf16-small-01") for a flake budget.
// The sinks that file tickets are qualification/ticket.h.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

#include "common/enum_names.h"
#include "common/error.h"
#include "common/time.h"
#include "records/change.h"

namespace kiln::qualification {

// risk_gate: a gate of the risk register failed (risk_status.h); its culprit is "risk:ID@RUN".
enum class TicketKind { performance_regression, correctness_regression, hardware_suspect, flake_budget, risk_gate };
constexpr EnumTable<TicketKind, 5> enum_names(TicketKind) {
  return {{
      {TicketKind::performance_regression, "performance_regression"},
      {TicketKind::correctness_regression, "correctness_regression"},
      {TicketKind::hardware_suspect, "hardware_suspect"},
      {TicketKind::flake_budget, "flake_budget"},
      {TicketKind::risk_gate, "risk_gate"},
  }};
}
inline std::string_view to_string(TicketKind value) { return enum_name(value); }
inline std::optional<TicketKind> ticket_kind_from_string(std::string_view name) { return enum_from_name<TicketKind>(name); }

struct Ticket {
  std::string id;  // "kiln-" + 16 hex digits of the dedupe key's SHA-256: one id per culprit and kind
  TicketKind kind = TicketKind::performance_regression;
  std::string team;
  std::string title;
  std::string culprit_change;  // change id; "node:<id>" or "test:<name>" for the other kinds
  std::optional<Layer> layer;  // the culprit change's layer
  std::string evidence_json;   // a JSON object: verdicts, bisection probes, samples
  TimeMs created_at_ms = 0;
  std::string severity;  // a risk gate's page: sev1 (most urgent) to sev4; empty for the other kinds
};

std::string dedupe_key(TicketKind kind, std::string_view culprit);
std::string dedupe_key(const Ticket& ticket);
// "kiln-" + 16 hex digits of the dedupe key's SHA-256.
std::string ticket_id(TicketKind kind, std::string_view culprit);

// A ticket with its id set from the dedupe key.
Ticket make_ticket(TicketKind kind, std::string team, std::string title, std::string culprit_change,
                   std::optional<Layer> layer, std::string evidence_json, TimeMs created_at_ms);

// A regression ticket for a bisection's culprit, to the change's owning team.
Ticket make_culprit_ticket(const Change& culprit, TicketKind kind, std::string title, std::string evidence_json,
                           TimeMs created_at_ms);

// Non-empty id, team, title and culprit; evidence a JSON object.
Status validate(const Ticket& ticket);

// The ticket as a JSON object (evidence embedded as JSON), schema "kiln.ticket/1".
std::string to_json_text(const Ticket& ticket);
Result<Ticket> ticket_from_json_text(std::string_view text, std::string_view source);
// The same document as a JSON value.
nlohmann::json to_json(const Ticket& ticket);

}  // namespace kiln::qualification

// Tickets: how a proven problem reaches the team that owns it, never twice for the same culprit.
//
// A ticket's dedupe key is its kind plus its culprit: the change id for a regression, the node
// ("node:n07") for a hardware suspect, the test ("test:mlp-bf16-small-01") for a flake budget.
// The sink decides whether a ticket is new; the default sink is a directory of JSON files (one
// per ticket, written atomically, never overwritten). An HTTP webhook sink is configured with
// WebhookSinkConfig; the POST itself belongs to the coordinator's shell and is not built here.
#pragma once

#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/enum_names.h"
#include "common/error.h"
#include "common/time.h"
#include "coordinator/qualification/change.h"

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

enum class FileResult { filed, duplicate };
std::string_view to_string(FileResult result);

class TicketSink {
 public:
  virtual ~TicketSink() = default;
  // `duplicate` when a ticket with the same dedupe key was filed before: nothing is sent again.
  virtual Result<FileResult> file(const Ticket& ticket) = 0;
};

// One file per ticket in a directory, named from the dedupe key, written to a temporary file and
// linked into place without replacing: concurrent coordinators and restarts never file twice
// and a reader never sees half a ticket.
class DirectoryTicketSink final : public TicketSink {
 public:
  // Creates the directory if needed.
  static Result<DirectoryTicketSink> open(std::filesystem::path directory);

  Result<FileResult> file(const Ticket& ticket) override;
  // Every ticket in the directory, oldest first (then by id).
  Result<std::vector<Ticket>> list() const;
  std::filesystem::path path_for(const Ticket& ticket) const;
  const std::filesystem::path& directory() const { return directory_; }

 private:
  explicit DirectoryTicketSink(std::filesystem::path directory) : directory_(std::move(directory)) {}
  std::filesystem::path directory_;
};

// In memory, for the fleet simulator and tests.
class MemoryTicketSink final : public TicketSink {
 public:
  Result<FileResult> file(const Ticket& ticket) override;
  const std::vector<Ticket>& tickets() const { return tickets_; }

 private:
  std::vector<Ticket> tickets_;
};

// The HTTP webhook sink's configuration. Only the configuration and the request body exist here:
// the coordinator's shell will POST webhook_body(ticket) to `url` and keep a directory sink as the
// dedupe record, so a ticket is sent at most once per dedupe key.
struct WebhookSinkConfig {
  std::string url;                             // https://tickets.example.com/hooks/kiln
  std::map<std::string, std::string> headers;  // sent with every request
  std::string bearer_token_file;               // optional: file holding the token, read by the shell
  DurationMs timeout_ms = 10 * kSecondMs;
  int max_attempts = 3;
  DurationMs retry_backoff_ms = 2 * kSecondMs;  // doubled after each failed attempt
};

// url http(s) with a host, timeout and backoff positive, 1..10 attempts.
Status validate(const WebhookSinkConfig& config);

// The JSON body to POST: the ticket, plus its dedupe key for the receiver's own deduplication.
std::string webhook_body(const Ticket& ticket);

}  // namespace kiln::qualification

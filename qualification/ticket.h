// Ticket sinks: how a proven problem (records/ticket.h) reaches the team that owns it, never
// twice for the same culprit. The sink decides whether a ticket is new; the default sink is a
// directory of JSON files (one per ticket, written atomically, never overwritten). An HTTP webhook
// sink is configured with WebhookSinkConfig; the POST itself belongs to the shell.
#pragma once

#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "common/time.h"
#include "records/ticket.h"

namespace kiln::qualification {

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

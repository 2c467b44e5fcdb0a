// The HTTP webhook ticket sink: POSTs webhook_body(ticket) to the configured URL, never twice
// for the same culprit. A DirectoryTicketSink it owns is the dedupe record: a ticket is filed
// there first (a duplicate there sends nothing), then POSTed; when every attempt fails the
// record is removed again, so a later run retries instead of believing it was sent.
//
// Plain HTTP/1.1 over POSIX sockets (no TLS library is a dependency of kiln): an https:// URL is
// refused at open(); put a TLS-terminating proxy on the coordinator's host in front of the
// receiver, or use the directory sink. This is I/O, so it lives outside the pure
// kiln_qualification library (target kiln_ticket_webhook).
#pragma once

#include <filesystem>
#include <functional>
#include <string>

#include "common/error.h"
#include "common/time.h"
#include "qualification/ticket.h"

namespace kiln::qualification {

// Waits between attempts; tests pass one that records the waits instead of sleeping.
using SleepFunction = std::function<void(DurationMs)>;

// Where the sink POSTs, from http://host[:port][/path].
struct WebhookEndpoint {
  std::string host;  // as in the URL, without brackets
  std::string port;  // "80" by default
  std::string host_header;
  std::string path;  // "/" by default
};

// Validates `config` (validate(WebhookSinkConfig)) and parses its URL, with no I/O: refuses
// https:// URLs, credentials in the URL, bad ports, headers with line breaks or ones the sink
// sets itself (Host, Content-Type, Content-Length, Connection), and an Authorization header
// beside a bearer_token_file. Errc::config saying what to fix.
Result<WebhookEndpoint> webhook_endpoint(const WebhookSinkConfig& config);

class WebhookTicketSink final : public TicketSink {
 public:
  // Checks `config` (webhook_endpoint), reads the bearer token (refused when the file may be
  // read or written by group or others, like kiln's key files, or is empty) and opens the dedupe
  // record in `record_directory`. `sleep` defaults to sleeping the thread.
  static Result<WebhookTicketSink> open(WebhookSinkConfig config, std::filesystem::path record_directory,
                                        SleepFunction sleep = {});

  // filed: the receiver answered 2xx. duplicate: the record already held this culprit (nothing
  // sent), or the receiver answered 409 Conflict. Up to max_attempts POSTs, each within
  // timeout_ms, waiting retry_backoff_ms, doubled after each failure, between them; 5xx, 408,
  // 429 and socket errors are retried, other statuses are final. On failure the record is
  // removed and the Error names the URL, the last status or socket error, and what to do.
  Result<FileResult> file(const Ticket& ticket) override;

  const DirectoryTicketSink& record() const { return record_; }

 private:
  // One POST: an HTTP status, or the socket error or timeout that prevented one.
  struct Attempt {
    int http_status = 0;  // 0 when no response was read
    Errc error_code = Errc::io;
    std::string error;    // why there is no status
  };
  WebhookTicketSink(WebhookSinkConfig config, WebhookEndpoint endpoint, std::string bearer_token, DirectoryTicketSink record,
                    SleepFunction sleep);
  Attempt post(const std::string& body) const;

  WebhookSinkConfig config_;
  WebhookEndpoint endpoint_;
  std::string bearer_token_;
  DirectoryTicketSink record_;
  SleepFunction sleep_;
};

}  // namespace kiln::qualification

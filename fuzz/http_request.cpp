// Bytes as a client sends them to kiln's HTTP server (the coordinator's, the qualifier's, the
// agent's /metrics): parse_request, then the answer the server would write. A request it accepts
// has a token method, a path and well-formed headers, and stays the same request whatever follows
// its head; a head it waits for has no end yet and is within the limit.
#include <string>

#include "common/http/request.h"
#include "fuzz/fuzz_support.h"

namespace {

bool has_line_break(const std::string& text) { return text.find_first_of("\r\n") != std::string::npos; }

}  // namespace

KILN_FUZZ_ENTRY(http_request) {
  using namespace kiln::http;
  const std::string bytes(kiln::fuzz::as_text(data, size));
  RequestLimits limits;
  limits.max_head_bytes = 1024;
  limits.max_target_bytes = 256;
  limits.max_headers = 16;
  const Parsed parsed = parse_request(bytes, limits);
  if (std::holds_alternative<Incomplete>(parsed)) {
    if (bytes.size() > limits.max_head_bytes) kiln::fuzz::violated("a head over the limit is waited for");
    std::string_view rest = bytes;
    while (rest.starts_with("\r\n")) rest.remove_prefix(2);
    if (rest.find("\r\n\r\n") != std::string_view::npos) kiln::fuzz::violated("a whole head is waited for");
    return 0;
  }
  if (const auto* request = std::get_if<Request>(&parsed)) {
    if (request->method.empty() || request->path.empty() || request->path.front() != '/') {
      kiln::fuzz::violated("an accepted request has no method or no path");
    }
    if (has_line_break(request->method) || has_line_break(request->path) || has_line_break(request->query) ||
        request->path.find(' ') != std::string::npos || request->headers.size() > limits.max_headers) {
      kiln::fuzz::violated("an accepted request line holds a break or a space");
    }
    for (const auto& [name, value] : request->headers) {
      if (name.empty() || has_line_break(name) || has_line_break(value)) kiln::fuzz::violated("a malformed header");
      for (char c : name) {
        if (c >= 'A' && c <= 'Z') kiln::fuzz::violated("a header name is not lower-cased");
      }
    }
    const Parsed again = parse_request(bytes + "GET / HTTP/1.1\r\n\r\n", limits);
    const auto* same = std::get_if<Request>(&again);
    if (same == nullptr || same->path != request->path || same->headers != request->headers) {
      kiln::fuzz::violated("what follows a head changed the request");
    }
  }
  Router router;
  router.exact("/metrics", [](const Request&) { return text_response(200, "kiln_up 1"); });
  router.prefix("/runs/", [](const Request& r) { return text_response(200, r.path); });
  const std::string answer = serialize(respond(parsed, router), false);
  if (!answer.starts_with("HTTP/1.1 ") || answer.find("\r\nConnection: close\r\n") == std::string::npos) {
    kiln::fuzz::violated("an answer without its status line or Connection: close");
  }
  return 0;
}

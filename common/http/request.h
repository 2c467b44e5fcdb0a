// HTTP/1.1 as kiln's small HTTP server speaks it (RFC 9112), pure: a request read from bytes,
// a response written to bytes, and the routing of paths to handlers. No sockets here: the
// server (server.h) feeds the bytes it read and writes what comes back.
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace kiln::http {

struct Request {
  std::string method;   // as sent, case-sensitive: GET, HEAD, ...
  std::string path;     // the request target's path, not percent-decoded: "/metrics"
  std::string query;    // after '?', without it; empty when there is none
  std::string version;  // HTTP/1.1 or HTTP/1.0
  // Header names lower-cased, values without surrounding whitespace, in the order sent.
  std::vector<std::pair<std::string, std::string>> headers;

  // The first header of that (lower-case) name, or nullptr.
  const std::string* header(std::string_view lower_name) const;
};

struct RequestLimits {
  std::size_t max_head_bytes = 8192;    // request line and headers, with their line ends
  std::size_t max_target_bytes = 2048;  // the request target alone
  std::size_t max_headers = 64;
};

// The bytes so far end before the head does: read more.
struct Incomplete {};
// The request cannot be served: the status to answer (400, 414, 431, 505) and why, for people.
struct Refusal {
  int status = 400;
  std::string reason;
};
using Parsed = std::variant<Incomplete, Request, Refusal>;

// Reads the request line and headers at the start of `bytes`. A request body is not read (kiln
// serves GET and HEAD only and closes every connection after its answer). Lines end in CRLF; a
// bare CR or LF, a folded header, a missing or repeated Host in HTTP/1.1, or anything over the
// limits is refused.
Parsed parse_request(std::string_view bytes, const RequestLimits& limits = {});

struct Response {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;  // besides the ones always sent
};

// A plain text answer: the status with a line for people.
Response text_response(int status, std::string text);

// The status line, Content-Type, Content-Length, Connection: close, the extra headers and, unless
// `head_only` (a HEAD request), the body.
std::string serialize(const Response& response, bool head_only);

// "OK", "Not Found", ...; "Unknown" for a status kiln never sends.
std::string_view reason_phrase(int status);

using Handler = std::function<Response(const Request&)>;

// Paths to handlers: exact paths first, then the longest matching prefix. GET and HEAD reach
// the handlers (a HEAD gets the GET's headers without the body); any other method is answered 405
// with `Allow: GET, HEAD`, an unknown path 404.
class Router {
 public:
  void exact(std::string path, Handler handler);
  // Every path that starts with `prefix` ("/runs/" serves "/runs/r1.html").
  void prefix(std::string prefix, Handler handler);

  Response route(const Request& request) const;

 private:
  std::map<std::string, Handler, std::less<>> exact_;
  std::vector<std::pair<std::string, Handler>> prefixes_;
};

// What the server sends for bytes that hold a whole request head: the router's answer, or the
// refusal's status with its reason.
Response respond(const Parsed& parsed, const Router& router);

}  // namespace kiln::http

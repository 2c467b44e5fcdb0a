#include "common/http/request.h"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/error.h"

namespace kiln::http {
namespace {

constexpr std::string_view kLineEnd = "\r\n";
constexpr std::string_view kHeadEnd = "\r\n\r\n";

// RFC 9110 token characters: method and header names.
bool is_tchar(char c) {
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) return true;
  return std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}

bool is_token(std::string_view text) { return !text.empty() && std::all_of(text.begin(), text.end(), is_tchar); }

// A header value may hold visible characters, spaces, tabs and obs-text; no other control.
bool is_field_value_char(char c) {
  const auto u = static_cast<unsigned char>(c);
  return u == '\t' || (u >= 0x20 && u != 0x7F);
}

// Request targets are visible ASCII.
bool is_target_char(char c) { return c >= 0x21 && c <= 0x7E; }

std::string lower(std::string_view text) {
  std::string out(text);
  std::transform(out.begin(), out.end(), out.begin(), [](char c) { return c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c; });
  return out;
}

std::string_view trim_ows(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) text.remove_suffix(1);
  return text;
}

Refusal refuse(int status, std::string reason) { return Refusal{status, std::move(reason)}; }

// "HTTP/1.1" -> the version kiln answers as, or a refusal.
std::variant<std::string, Refusal> read_version(std::string_view text) {
  const bool shaped = text.size() == 8 && text.substr(0, 5) == "HTTP/" && text[5] >= '0' && text[5] <= '9' &&
                      text[6] == '.' && text[7] >= '0' && text[7] <= '9';
  if (!shaped) return refuse(400, fmt::format("the request line must end in HTTP/1.1 (got \"{}\")", text));
  if (text[5] != '1') return refuse(505, fmt::format("{} is not served; use HTTP/1.1", text));
  // A later minor version is answered as 1.1, as RFC 9110 §2.5 asks.
  return std::string(text == "HTTP/1.0" ? "HTTP/1.0" : "HTTP/1.1");
}

}  // namespace

const std::string* Request::header(std::string_view lower_name) const {
  for (const auto& [name, value] : headers) {
    if (name == lower_name) return &value;
  }
  return nullptr;
}

Parsed parse_request(std::string_view bytes, const RequestLimits& limits) {
  // RFC 9112 §2.2: empty lines before the request line are ignored; they count in the limit, so
  // a client cannot make the server keep an endless run of them.
  const std::size_t received = bytes.size();
  while (bytes.substr(0, kLineEnd.size()) == kLineEnd) bytes.remove_prefix(kLineEnd.size());
  const std::size_t skipped = received - bytes.size();
  const std::size_t head_end = bytes.find(kHeadEnd);
  const std::size_t head_bytes = skipped + (head_end == std::string_view::npos ? bytes.size() : head_end + kHeadEnd.size());
  if (head_bytes > limits.max_head_bytes) {
    return refuse(431, fmt::format("the request line and headers are over {} bytes", limits.max_head_bytes));
  }
  if (head_end == std::string_view::npos) return Incomplete{};

  std::vector<std::string_view> lines;
  for (std::string_view rest = bytes.substr(0, head_end + kLineEnd.size()); !rest.empty();) {
    const std::size_t end = rest.find(kLineEnd);
    lines.push_back(rest.substr(0, end));
    rest.remove_prefix(end + kLineEnd.size());
  }
  for (std::string_view line : lines) {
    if (line.find_first_of("\r\n") != std::string_view::npos) {
      return refuse(400, "a line of the request ends in a bare CR or LF; end every line with CRLF");
    }
  }

  Request request;
  const std::string_view request_line = lines.front();
  const std::size_t first_space = request_line.find(' ');
  const std::size_t second_space =
      first_space == std::string_view::npos ? first_space : request_line.find(' ', first_space + 1);
  if (second_space == std::string_view::npos || request_line.find(' ', second_space + 1) != std::string_view::npos) {
    return refuse(400, "the request line must be METHOD TARGET VERSION, separated by single spaces");
  }
  const std::string_view method = request_line.substr(0, first_space);
  const std::string_view target = request_line.substr(first_space + 1, second_space - first_space - 1);
  if (!is_token(method)) return refuse(400, "the request's method is not a token");
  request.method = std::string(method);
  if (target.size() > limits.max_target_bytes) {
    return refuse(414, fmt::format("the request target is over {} bytes", limits.max_target_bytes));
  }
  if (target.empty() || !std::all_of(target.begin(), target.end(), is_target_char)) {
    return refuse(400, "the request target must be visible ASCII characters");
  }
  if (target.front() != '/') return refuse(400, "the request target must be a path starting with '/'");
  const std::size_t question = target.find('?');
  request.path = std::string(target.substr(0, question));
  if (question != std::string_view::npos) request.query = std::string(target.substr(question + 1));
  auto version = read_version(request_line.substr(second_space + 1));
  if (auto* refusal = std::get_if<Refusal>(&version)) return std::move(*refusal);
  request.version = std::get<std::string>(std::move(version));

  for (std::size_t i = 1; i < lines.size(); ++i) {
    const std::string_view line = lines[i];
    if (line.front() == ' ' || line.front() == '\t') {
      return refuse(400, "a header line starts with whitespace (obsolete line folding is not accepted)");
    }
    const std::size_t colon = line.find(':');
    if (colon == std::string_view::npos || !is_token(line.substr(0, colon))) {
      return refuse(400, "a header line must be NAME: VALUE with a token for NAME and no space before the colon");
    }
    const std::string_view value = trim_ows(line.substr(colon + 1));
    if (!std::all_of(value.begin(), value.end(), is_field_value_char)) {
      return refuse(400, "a header value holds a control character");
    }
    if (request.headers.size() == limits.max_headers) {
      return refuse(431, fmt::format("the request has over {} headers", limits.max_headers));
    }
    request.headers.emplace_back(lower(line.substr(0, colon)), std::string(value));
  }
  const auto hosts = std::count_if(request.headers.begin(), request.headers.end(),
                                   [](const auto& header) { return header.first == "host"; });
  if (request.version == "HTTP/1.1" && hosts != 1) {
    return refuse(400, "an HTTP/1.1 request needs exactly one Host header");
  }
  return request;
}

std::string_view reason_phrase(int status) {
  switch (status) {
    case 200: return "OK";
    case 400: return "Bad Request";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 414: return "URI Too Long";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 503: return "Service Unavailable";
    case 505: return "HTTP Version Not Supported";
    default: return "Unknown";
  }
}

Response text_response(int status, std::string text) {
  Response response;
  response.status = status;
  response.body = std::move(text);
  if (response.body.empty() || response.body.back() != '\n') response.body += '\n';
  return response;
}

std::string serialize(const Response& response, bool head_only) {
  const auto header_safe = [](std::string_view text) { return text.find_first_of("\r\n") == std::string_view::npos; };
  KILN_ASSERT(header_safe(response.content_type), "a content type is one line");
  std::string out = fmt::format("HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n",
                                response.status, reason_phrase(response.status), response.content_type,
                                response.body.size());
  for (const auto& [name, value] : response.headers) {
    KILN_ASSERT(is_token(name) && header_safe(value), "handlers send well-formed headers");
    out += fmt::format("{}: {}\r\n", name, value);
  }
  out += "\r\n";
  if (!head_only) out += response.body;
  return out;
}

void Router::exact(std::string path, Handler handler) { exact_[std::move(path)] = std::move(handler); }

void Router::prefix(std::string prefix, Handler handler) {
  prefixes_.emplace_back(std::move(prefix), std::move(handler));
  // Longest first, so the most specific prefix wins.
  std::stable_sort(prefixes_.begin(), prefixes_.end(),
                   [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });
}

Response Router::route(const Request& request) const {
  if (request.method != "GET" && request.method != "HEAD") {
    Response response = text_response(405, fmt::format("{} is not served here; use GET or HEAD", request.method));
    response.headers.emplace_back("Allow", "GET, HEAD");
    return response;
  }
  if (auto it = exact_.find(request.path); it != exact_.end()) return it->second(request);
  for (const auto& [prefix, handler] : prefixes_) {
    if (request.path.starts_with(prefix)) return handler(request);
  }
  std::vector<std::string_view> paths;
  for (const auto& [path, handler] : exact_) paths.push_back(path);
  for (const auto& [prefix, handler] : prefixes_) paths.push_back(prefix);
  return text_response(404, fmt::format("nothing at {}; this server answers {}", request.path, fmt::join(paths, ", ")));
}

Response respond(const Parsed& parsed, const Router& router) {
  KILN_ASSERT(!std::holds_alternative<Incomplete>(parsed), "only a whole request head is answered");
  if (const auto* refusal = std::get_if<Refusal>(&parsed)) return text_response(refusal->status, refusal->reason);
  return router.route(std::get<Request>(parsed));
}

}  // namespace kiln::http

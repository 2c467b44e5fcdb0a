#include "common/http/listen_address.h"

#include <algorithm>

#include <fmt/format.h>

namespace kiln::http {
namespace {

bool is_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '-' ||
         c == '_';
}

bool is_ipv6_char(char c) {
  return (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F') || (c >= '0' && c <= '9') || c == ':' || c == '.';
}

}  // namespace

std::string ListenAddress::text() const {
  return host.find(':') == std::string::npos ? fmt::format("{}:{}", host, port) : fmt::format("[{}]:{}", host, port);
}

Result<ListenAddress> parse_listen_address(std::string_view text, bool port_zero_allowed) {
  const auto bad = [&](std::string_view what) {
    return fail(Errc::invalid_argument,
                fmt::format("\"{}\" {}; write HOST:PORT, as in 127.0.0.1:9470 or [::1]:9470", text, what));
  };
  const std::size_t colon = text.rfind(':');
  if (colon == std::string_view::npos) return bad("has no port");
  std::string_view host = text.substr(0, colon);
  const std::string_view port = text.substr(colon + 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
    if (host.empty() || !std::all_of(host.begin(), host.end(), is_ipv6_char)) return bad("has an invalid IPv6 address");
  } else if (host.empty()) {
    return bad("has no host (0.0.0.0 listens on every interface)");
  } else if (!std::all_of(host.begin(), host.end(), is_name_char)) {
    return bad("has an invalid character in its host (an IPv6 address goes in brackets)");
  }
  if (host.size() > 253) return bad("has a host over 253 characters");
  if (port.empty() || port.size() > 5 || !std::all_of(port.begin(), port.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return bad("must end in a numeric port");
  }
  const int number = std::stoi(std::string(port));
  if (number < (port_zero_allowed ? 0 : 1) || number > 65535) return bad("must use a port from 1 to 65535");
  return ListenAddress{std::string(host), static_cast<std::uint16_t>(number)};
}

}  // namespace kiln::http

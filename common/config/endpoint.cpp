#include "common/config/endpoint.h"

#include <algorithm>

namespace kiln::config {
namespace {

bool is_host_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
         c == '-' || c == ':';
}

}  // namespace

std::optional<std::string> tcp_endpoint_problem(std::string_view endpoint, bool binds) {
  constexpr std::string_view scheme = "tcp://";
  if (endpoint.substr(0, scheme.size()) != scheme) return "must start with tcp://";
  const std::string_view rest = endpoint.substr(scheme.size());
  const std::size_t colon = rest.rfind(':');
  if (colon == std::string_view::npos) return "must name a port, as in tcp://host:5555";
  std::string_view host = rest.substr(0, colon);
  const std::string_view port = rest.substr(colon + 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  if (host.empty()) return "must name a host, as in tcp://coordinator.example:5555";
  if (!(binds && host == "*") && !std::all_of(host.begin(), host.end(), is_host_char)) {
    return "has an invalid character in its host name";
  }
  if (port.empty() || port.size() > 5 ||
      !std::all_of(port.begin(), port.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return "must end with a numeric port between 1 and 65535";
  }
  const int port_number = std::stoi(std::string(port));
  if (port_number < 1 || port_number > 65535) return "must use a port between 1 and 65535";
  return std::nullopt;
}

}  // namespace kiln::config

// ZeroMQ TCP endpoints as written in kiln's config files.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace kiln::config {

// What is wrong with "tcp://host:port" (port 1 to 65535, host a name, IPv4 or [IPv6] address),
// or nothing. An endpoint a socket binds may also use the host "*": every interface.
std::optional<std::string> tcp_endpoint_problem(std::string_view endpoint, bool binds);

}  // namespace kiln::config

// Where kiln's HTTP server listens, as the [http] listen key of a config file writes it.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/error.h"

namespace kiln::http {

struct ListenAddress {
  std::string host;  // an IPv4 address, a host name, or an IPv6 address (without its brackets)
  std::uint16_t port = 0;

  // HOST:PORT again, an IPv6 host in brackets.
  std::string text() const;
};

// "HOST:PORT": an IPv4 address or host name, or [IPv6], then a port from 1 to 65535 (or 0 when
// `port_zero_allowed`: the kernel picks a free one, for tests). Errc::invalid_argument saying what
// is wrong, as in "must be HOST:PORT, as in 127.0.0.1:9470".
Result<ListenAddress> parse_listen_address(std::string_view text, bool port_zero_allowed = false);

}  // namespace kiln::http

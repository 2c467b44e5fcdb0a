// kiln's small HTTP/1.1 server: /metrics for Prometheus and, later, the run report pages. It
// listens on one address, serves on a thread of its own, answers GET and HEAD through a Router
// and closes every connection after its answer. Many connections are served at once, each with a
// bounded request head and deadlines to send it and to take the answer, so a slow or hostile
// client holds nothing but its own connection.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

#include "common/error.h"
#include "common/http/request.h"
#include "common/time.h"

namespace kiln::http {

struct ServerOptions {
  RequestLimits limits;
  DurationMs read_timeout_ms = 5000;    // from the connection to the end of its request head
  DurationMs write_timeout_ms = 10000;  // to take the whole answer
  std::size_t max_connections = 32;     // beyond this a new connection is answered 503 at once
};

class Server {
 public:
  // Binds `listen` (HOST:PORT; port 0 only in tests: the kernel picks one) and starts serving.
  // A bind that fails names the address and why, then `remedy` ("change [http] listen in
  // coordinator.toml"); Errc::io.
  static Result<std::unique_ptr<Server>> start(const std::string& listen, Router router, ServerOptions options,
                                               std::string_view remedy);
  // Stops serving: connections still open are closed, and the thread joined.
  virtual ~Server() = default;

  // HOST:PORT as bound, with the port the kernel chose for port 0.
  virtual const std::string& address() const = 0;
};

}  // namespace kiln::http

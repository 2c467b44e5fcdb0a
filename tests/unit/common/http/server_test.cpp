// The HTTP server on loopback: answers, refusals, slow clients, too many clients, an address in
// use; and a handler asking an event loop for its answer.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <thread>

#include <doctest/doctest.h>

#include "common/http/listen_address.h"
#include "common/http/loop_question.h"
#include "common/http/server.h"
#include "tests/support/text.h"

using namespace kiln;
using namespace kiln::http;
using kiln::testing::contains;

namespace {

Router metrics_router() {
  Router router;
  router.exact("/metrics", [](const Request&) {
    Response response;
    response.body = "kiln_up 1\n";
    return response;
  });
  return router;
}

int connect_to(const Server& server) {
  auto address = parse_listen_address(server.address(), true);
  REQUIRE(address.has_value());
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  REQUIRE(fd >= 0);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(address->port);
  to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof to) == 0);
  return fd;
}

// Everything the server sends until it closes (or 10 s of silence, which fails the test).
std::string read_to_close(int fd) {
  std::string out;
  char buffer[4096];
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    REQUIRE(::poll(&p, 1, 10000) == 1);
    const ssize_t got = ::recv(fd, buffer, sizeof buffer, 0);
    if (got <= 0) break;
    out.append(buffer, static_cast<std::size_t>(got));
  }
  ::close(fd);
  return out;
}

std::string round_trip(const Server& server, const std::string& request) {
  const int fd = connect_to(server);
  REQUIRE(::send(fd, request.data(), request.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(request.size()));
  return read_to_close(fd);
}

std::unique_ptr<Server> start(Router router, ServerOptions options = {}) {
  auto server = Server::start("127.0.0.1:0", std::move(router), options, "change the test");
  REQUIRE(server.has_value());
  return std::move(*server);
}

}  // namespace

TEST_CASE("the server answers GET and HEAD, refuses the rest, and closes each connection") {
  auto server = start(metrics_router());
  CHECK(server->address().starts_with("127.0.0.1:"));
  const std::string got = round_trip(*server, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
  CHECK(got.starts_with("HTTP/1.1 200 OK\r\n"));
  CHECK(contains(got, "Content-Length: 10\r\nConnection: close\r\n"));
  CHECK(got.ends_with("\r\n\r\nkiln_up 1\n"));
  CHECK(round_trip(*server, "HEAD /metrics HTTP/1.1\r\nHost: x\r\n\r\n").ends_with("Connection: close\r\n\r\n"));
  CHECK(round_trip(*server, "GET /nope HTTP/1.1\r\nHost: x\r\n\r\n").starts_with("HTTP/1.1 404 Not Found\r\n"));
  CHECK(round_trip(*server, "DELETE /metrics HTTP/1.1\r\nHost: x\r\n\r\n").starts_with("HTTP/1.1 405 "));
  CHECK(round_trip(*server, "garbage\r\n\r\n").starts_with("HTTP/1.1 400 Bad Request\r\n"));
  // A head sent a byte at a time is read whole.
  const int fd = connect_to(*server);
  for (char c : std::string("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")) REQUIRE(::send(fd, &c, 1, MSG_NOSIGNAL) == 1);
  CHECK(read_to_close(fd).ends_with("kiln_up 1\n"));
}

TEST_CASE("a client too slow, too large or one too many holds nothing but its own connection") {
  ServerOptions options;
  options.read_timeout_ms = 1000;
  options.max_connections = 2;
  options.limits.max_head_bytes = 1024;
  auto server = start(metrics_router(), options);
  // Too large: refused as soon as the head passes the limit, not when it ends.
  const std::string huge = "GET /metrics HTTP/1.1\r\nHost: x\r\nX-Pad: " + std::string(2000, 'a');
  CHECK(round_trip(*server, huge).starts_with("HTTP/1.1 431 "));
  // Two idle connections fill the server; a third is told to come back, the idle ones time out.
  const int idle_a = connect_to(*server);
  const int idle_b = connect_to(*server);
  REQUIRE(::send(idle_a, "GET /", 5, MSG_NOSIGNAL) == 5);
  bool refused_while_full = false;
  for (int attempt = 0; attempt < 50 && !refused_while_full; ++attempt) {
    const std::string answer = round_trip(*server, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
    refused_while_full = answer.starts_with("HTTP/1.1 503 ");
    if (!refused_while_full) CHECK(answer.starts_with("HTTP/1.1 200 "));  // an idle one was not accepted yet
  }
  CHECK(refused_while_full);
  CHECK(read_to_close(idle_a).starts_with("HTTP/1.1 408 Request Timeout\r\n"));
  CHECK(read_to_close(idle_b).starts_with("HTTP/1.1 408 "));
  // Served again once they are gone.
  CHECK(round_trip(*server, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").starts_with("HTTP/1.1 200 "));
}

TEST_CASE("an address in use is a clear start-up error naming it and the remedy") {
  auto first = start(metrics_router());
  auto second = Server::start(first->address(), metrics_router(), {}, "change [http] listen in coordinator.toml");
  REQUIRE_FALSE(second.has_value());
  CHECK(second.error().code == Errc::io);
  CHECK(contains(second.error().message, "cannot listen for HTTP on " + first->address()));
  CHECK(contains(second.error().message, "the address is in use"));
  CHECK(contains(second.error().message, "change [http] listen in coordinator.toml"));
  auto nonsense = Server::start("127.0.0.1", metrics_router(), {}, "fix it");
  REQUIRE_FALSE(nonsense.has_value());
  CHECK(contains(nonsense.error().message, "has no port"));
}

TEST_CASE("a handler gets its answer from the loop that owns the state, or gives up") {
  LoopQuestion question;
  std::atomic<bool> stop{false};
  int state = 0;  // owned by the loop thread
  std::thread loop([&] {
    while (!stop.load()) {
      pollfd p{question.wake_fd(), POLLIN, 0};
      if (::poll(&p, 1, 20) == 1) question.answer_pending([&] { return "state " + std::to_string(++state); });
    }
  });
  CHECK(question.ask(std::chrono::seconds(10)) == std::optional<std::string>("state 1"));
  CHECK(question.ask(std::chrono::seconds(10)) == std::optional<std::string>("state 2"));
  stop = true;
  loop.join();
  // Nobody answers: the asker gets nothing rather than waiting for ever, and a page says so.
  CHECK_FALSE(question.ask(std::chrono::milliseconds(10)).has_value());
  const Response busy =
      loop_page(question, "text/plain", nullptr, "the test's loop", std::chrono::milliseconds(10))(Request{});
  CHECK(busy.status == 503);
  CHECK(contains(busy.body, "the test's loop did not make the page within 10 ms"));
}

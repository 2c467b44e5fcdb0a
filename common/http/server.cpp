#include "common/http/server.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <list>
#include <thread>

#include <fmt/format.h>

#include "common/clock.h"
#include "common/http/listen_address.h"

namespace kiln::http {
namespace {

constexpr int kListenBacklog = 64;
constexpr std::size_t kReadChunkBytes = 4096;
constexpr int kMaxPollWaitMs = 1000;

// reading: the request head; answering: writing the answer; draining: the answer is out and the
// write side shut, and what the client still sends is read and dropped until it closes, so the
// close does not reset the connection before the client has read the answer.
enum class Phase { reading, answering, draining };

struct Connection {
  int fd = -1;
  Phase phase = Phase::reading;
  std::string received;
  std::string answer;  // serialized, once the request head is in
  std::size_t sent = 0;
  TimeMs deadline_ms = 0;  // monotonic: the end of the current phase
};

std::string numeric_address(const sockaddr_storage& address) {
  char host[INET6_ADDRSTRLEN] = {};
  std::uint16_t port = 0;
  if (address.ss_family == AF_INET6) {
    const auto& v6 = reinterpret_cast<const sockaddr_in6&>(address);
    ::inet_ntop(AF_INET6, &v6.sin6_addr, host, sizeof host);
    port = ntohs(v6.sin6_port);
  } else {
    const auto& v4 = reinterpret_cast<const sockaddr_in&>(address);
    ::inet_ntop(AF_INET, &v4.sin_addr, host, sizeof host);
    port = ntohs(v4.sin_port);
  }
  return ListenAddress{host, port}.text();
}

std::string bind_problem(int error, const ListenAddress& address) {
  switch (error) {
    case EADDRINUSE:
      return fmt::format("the address is in use: another program (another kiln process?) listens on port {}",
                         address.port);
    case EACCES: return "permission denied (ports below 1024 need privileges)";
    case EADDRNOTAVAIL: return fmt::format("{} is not an address of this host", address.host);
    default: return std::strerror(error);
  }
}

class Listener final : public Server {
 public:
  Listener(int listen_fd, std::string address, Router router, ServerOptions options)
      : listen_fd_(listen_fd),
        stop_fd_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)),
        address_(std::move(address)),
        router_(std::move(router)),
        options_(options) {
    KILN_ASSERT(stop_fd_ >= 0, "an eventfd can be made (the process is out of file descriptors otherwise)");
    thread_ = std::thread([this] { serve(); });
  }

  ~Listener() override {
    const std::uint64_t one = 1;
    (void)!::write(stop_fd_, &one, sizeof one);
    thread_.join();
    for (Connection& c : connections_) ::close(c.fd);
    ::close(listen_fd_);
    ::close(stop_fd_);
  }

  const std::string& address() const override { return address_; }

 private:
  void serve() {
    for (;;) {
      std::vector<pollfd> fds{{stop_fd_, POLLIN, 0}, {listen_fd_, POLLIN, 0}};
      TimeMs now = monotonic_clock_ms();
      int wait_ms = kMaxPollWaitMs;
      for (const Connection& c : connections_) {
        fds.push_back({c.fd, static_cast<short>(c.phase == Phase::answering ? POLLOUT : POLLIN), 0});
        wait_ms = static_cast<int>(std::clamp<TimeMs>(c.deadline_ms - now, 0, wait_ms));
      }
      if (::poll(fds.data(), fds.size(), wait_ms) < 0 && errno != EINTR) return;
      if (fds[0].revents != 0) return;
      now = monotonic_clock_ms();
      auto fd = fds.begin() + 2;
      for (auto c = connections_.begin(); c != connections_.end(); ++fd) {
        const bool open = fd->revents == 0 ? c->deadline_ms > now || expire(*c) : step(*c, fd->revents, now);
        if (open) {
          ++c;
        } else {
          ::close(c->fd);
          c = connections_.erase(c);
        }
      }
      if (fds[1].revents & POLLIN) accept_all(now);
    }
  }

  void accept_all(TimeMs now) {
    for (;;) {
      const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) return;  // EAGAIN: none left; anything else is the client's loss, tried again on the next poll
      if (connections_.size() >= options_.max_connections) {
        const std::string busy = serialize(text_response(503, "too many connections at once; try again"), false);
        (void)!::send(fd, busy.data(), busy.size(), MSG_NOSIGNAL);
        ::close(fd);
        continue;
      }
      connections_.push_back(Connection{fd, Phase::reading, {}, {}, 0, now + options_.read_timeout_ms});
    }
  }

  // A connection past its deadline: one still sending its request is told so, best effort.
  bool expire(Connection& c) {
    if (c.phase == Phase::reading) {
      const std::string late = serialize(
          text_response(408, fmt::format("the request head did not arrive within {} ms", options_.read_timeout_ms)),
          false);
      (void)!::send(c.fd, late.data(), late.size(), MSG_NOSIGNAL);
    }
    return false;
  }

  // Reads or writes what the socket allows; false when the connection is done.
  bool step(Connection& c, short revents, TimeMs now) {
    if (c.phase == Phase::answering) return write_some(c, now);
    if (revents & (POLLERR | POLLNVAL)) return false;
    char buffer[kReadChunkBytes];
    const ssize_t got = ::recv(c.fd, buffer, sizeof buffer, 0);
    if (got < 0) return errno == EAGAIN || errno == EINTR;
    if (got == 0) return false;  // the client closed: before its request was whole, or after the answer
    if (c.phase == Phase::draining) return true;
    // Beyond the limit the parser refuses the head: nothing more needs keeping.
    c.received.append(buffer, static_cast<std::size_t>(got));
    const Parsed parsed = parse_request(c.received, options_.limits);
    if (std::holds_alternative<Incomplete>(parsed)) return true;
    const auto* request = std::get_if<Request>(&parsed);
    c.answer = serialize(answer(parsed), request != nullptr && request->method == "HEAD");
    c.received.clear();
    c.phase = Phase::answering;
    c.deadline_ms = now + options_.write_timeout_ms;
    return write_some(c, now);
  }

  // No exception crosses into the server's thread: a handler that throws is a 500.
  Response answer(const Parsed& parsed) const {
    try {
      return respond(parsed, router_);
    } catch (const std::exception& e) {
      return text_response(500, fmt::format("the page could not be made: {}", e.what()));
    }
  }

  bool write_some(Connection& c, TimeMs now) {
    while (c.sent < c.answer.size()) {
      const ssize_t put = ::send(c.fd, c.answer.data() + c.sent, c.answer.size() - c.sent, MSG_NOSIGNAL);
      if (put < 0) return errno == EAGAIN || errno == EINTR;
      c.sent += static_cast<std::size_t>(put);
    }
    // The whole answer is out: the client sees its end now, and has a while to close its side.
    ::shutdown(c.fd, SHUT_WR);
    c.answer.clear();
    c.phase = Phase::draining;
    c.deadline_ms = now + options_.read_timeout_ms;
    return true;
  }

  int listen_fd_;
  int stop_fd_;
  std::string address_;
  Router router_;
  ServerOptions options_;
  std::list<Connection> connections_;
  std::thread thread_;
};

}  // namespace

Result<std::unique_ptr<Server>> Server::start(const std::string& listen, Router router, ServerOptions options,
                                              std::string_view remedy) {
  auto address = parse_listen_address(listen, /*port_zero_allowed=*/true);
  if (!address) return fail(Errc::config, fmt::format("cannot listen for HTTP on {}; {}", address.error().message, remedy));
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string port = std::to_string(address->port);
  if (const int error = ::getaddrinfo(address->host.c_str(), port.c_str(), &hints, &found); error != 0) {
    return fail(Errc::io, fmt::format("cannot listen for HTTP on {}: cannot resolve {}: {}; {}", listen,
                                      address->host, ::gai_strerror(error), remedy));
  }
  int last_error = 0;
  int fd = -1;
  for (addrinfo* a = found; a != nullptr && fd < 0; a = a->ai_next) {
    fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      last_error = errno;
      continue;
    }
    // A restarted process may listen again at once, while its old connections wait out TIME_WAIT.
    const int yes = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    if (::bind(fd, a->ai_addr, a->ai_addrlen) != 0 || ::listen(fd, kListenBacklog) != 0) {
      last_error = errno;
      ::close(fd);
      fd = -1;
    }
  }
  ::freeaddrinfo(found);
  if (fd < 0) {
    return fail(Errc::io, fmt::format("cannot listen for HTTP on {}: {}; {}", listen,
                                      bind_problem(last_error, *address), remedy));
  }
  sockaddr_storage bound{};
  socklen_t length = sizeof bound;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &length);
  return std::unique_ptr<Server>(
      std::make_unique<Listener>(fd, numeric_address(bound), std::move(router), options));
}

}  // namespace kiln::http

#include "qualification/webhook_sink.h"

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <thread>

#include <fmt/format.h>

namespace kiln::qualification {

namespace {

constexpr std::size_t kMaxResponseHeadBytes = 64 * 1024;

std::string lower(std::string_view text) {
  std::string out(text);
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return std::tolower(c); });
  return out;
}

bool has_line_break(std::string_view text) { return text.find_first_of("\r\n") != std::string_view::npos; }

Result<std::string> read_bearer_token(const std::string& path) {
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0) {
    return fail(Errc::config, fmt::format("cannot read the ticket webhook's bearer_token_file {}: {}; check the path",
                                          path, std::strerror(errno)));
  }
  if ((info.st_mode & 077) != 0) {
    return fail(Errc::config, fmt::format("the ticket webhook's bearer_token_file {} (mode {:o}) may be read or written "
                                          "by group or others; run chmod 600 on it",
                                          path, info.st_mode & 0777));
  }
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  if (!in) return fail(Errc::config, fmt::format("cannot read the ticket webhook's bearer_token_file {}", path));
  std::string token = text.str();
  while (!token.empty() && std::isspace(static_cast<unsigned char>(token.back()))) token.pop_back();
  while (!token.empty() && std::isspace(static_cast<unsigned char>(token.front()))) token.erase(token.begin());
  if (token.empty() || has_line_break(token)) {
    return fail(Errc::config, fmt::format("the ticket webhook's bearer_token_file {} must hold the token on one line; "
                                          "write the token into it",
                                          path));
  }
  return token;
}

// Closes the descriptor when it goes out of scope.
class Socket {
 public:
  explicit Socket(int fd) : fd_(fd) {}
  ~Socket() {
    if (fd_ >= 0) ::close(fd_);
  }
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;
  int fd() const { return fd_; }

 private:
  int fd_;
};

using Clock = std::chrono::steady_clock;

int remaining_ms(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::max<std::int64_t>(0, left));
}

// Waits for `events` on fd until the deadline: true when ready, false on timeout.
Result<bool> wait_for(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int ready = ::poll(&p, 1, remaining_ms(deadline));
    if (ready > 0) return true;
    if (ready == 0) return false;
    if (errno != EINTR) return fail(Errc::io, fmt::format("poll failed: {}", std::strerror(errno)));
  }
}

}  // namespace

WebhookTicketSink::WebhookTicketSink(WebhookSinkConfig config, WebhookEndpoint endpoint, std::string bearer_token,
                                     DirectoryTicketSink record, SleepFunction sleep)
    : config_(std::move(config)),
      endpoint_(std::move(endpoint)),
      bearer_token_(std::move(bearer_token)),
      record_(std::move(record)),
      sleep_(std::move(sleep)) {}

Result<WebhookEndpoint> webhook_endpoint(const WebhookSinkConfig& config) {
  if (auto valid = validate(config); !valid) return tl::unexpected(valid.error());
  const std::string_view url = config.url;
  if (url.starts_with("https://")) {
    return fail(Errc::config, fmt::format("the ticket webhook url '{}' is https, but kiln sends tickets over plain HTTP "
                                          "only; put a TLS-terminating proxy on this host in front of the receiver "
                                          "and configure its http:// url, or use the directory ticket sink",
                                          config.url));
  }
  // http://host[:port][/path]
  const std::string_view rest = url.substr(std::string_view("http://").size());
  const std::size_t path_at = std::min(rest.find_first_of("/?#"), rest.size());
  const std::string_view authority = rest.substr(0, path_at);
  WebhookEndpoint endpoint;
  endpoint.path = path_at < rest.size() ? std::string(rest.substr(path_at)) : "/";
  if (endpoint.path.front() != '/') endpoint.path.insert(endpoint.path.begin(), '/');
  if (const auto fragment = endpoint.path.find('#'); fragment != std::string::npos) endpoint.path.resize(fragment);
  if (authority.find('@') != std::string_view::npos) {
    return fail(Errc::config, fmt::format("the ticket webhook url '{}' holds credentials; put the token in "
                                          "bearer_token_file instead",
                                          config.url));
  }
  std::string_view port;
  if (authority.starts_with("[")) {
    const std::size_t close = authority.find(']');
    if (close == std::string_view::npos) {
      return fail(Errc::config, fmt::format("the ticket webhook url '{}' has an unclosed [ in its host", config.url));
    }
    endpoint.host = std::string(authority.substr(1, close - 1));
    if (close + 1 < authority.size()) {
      if (authority[close + 1] != ':') {
        return fail(Errc::config, fmt::format("the ticket webhook url '{}' has text after its host", config.url));
      }
      port = authority.substr(close + 2);
    }
  } else {
    const std::size_t colon = authority.find(':');
    endpoint.host = std::string(authority.substr(0, colon));
    if (colon != std::string_view::npos) port = authority.substr(colon + 1);
  }
  if (!port.empty() || authority.ends_with(":")) {
    const bool digits = !port.empty() && port.size() <= 5 &&
                        std::all_of(port.begin(), port.end(), [](char c) { return c >= '0' && c <= '9'; });
    if (!digits || std::stoi(std::string(port)) < 1 || std::stoi(std::string(port)) > 65535) {
      return fail(Errc::config, fmt::format("the ticket webhook url '{}' has port '{}'; use a number 1..65535",
                                            config.url, port));
    }
  }
  endpoint.port = port.empty() ? "80" : std::string(port);
  endpoint.host_header = std::string(authority);
  if (endpoint.host.empty() || has_line_break(config.url) || config.url.find(' ') != std::string::npos) {
    return fail(Errc::config, fmt::format("the ticket webhook url '{}' must be http://host[:port]/path", config.url));
  }
  for (const auto& [name, value] : config.headers) {
    const std::string key = lower(name);
    if (name.empty() || has_line_break(name) || name.find(':') != std::string::npos || has_line_break(value)) {
      return fail(Errc::config, fmt::format("the ticket webhook header '{}' must be a name without ':' or line breaks "
                                            "and a one-line value; fix [tickets] headers",
                                            name));
    }
    if (key == "host" || key == "content-type" || key == "content-length" || key == "connection") {
      return fail(Errc::config, fmt::format("the ticket webhook header '{}' is set by kiln itself; remove it from "
                                            "[tickets] headers",
                                            name));
    }
    if (key == "authorization" && !config.bearer_token_file.empty()) {
      return fail(Errc::config, "the ticket webhook has both an Authorization header and a bearer_token_file; keep one");
    }
  }
  return endpoint;
}

Result<WebhookTicketSink> WebhookTicketSink::open(WebhookSinkConfig config, std::filesystem::path record_directory,
                                                  SleepFunction sleep) {
  auto endpoint = webhook_endpoint(config);
  if (!endpoint) return tl::unexpected(endpoint.error());
  std::string token;
  if (!config.bearer_token_file.empty()) {
    auto read = read_bearer_token(config.bearer_token_file);
    if (!read) return tl::unexpected(read.error());
    token = std::move(*read);
  }
  auto record = DirectoryTicketSink::open(std::move(record_directory));
  if (!record) return tl::unexpected(record.error());
  if (!sleep) sleep = [](DurationMs ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); };
  return WebhookTicketSink(std::move(config), std::move(*endpoint), std::move(token), std::move(*record),
                           std::move(sleep));
}

WebhookTicketSink::Attempt WebhookTicketSink::post(const std::string& body) const {
  const auto deadline = Clock::now() + std::chrono::milliseconds(config_.timeout_ms);
  const auto failed = [](Errc code, std::string why) {
    Attempt attempt;
    attempt.error_code = code;
    attempt.error = std::move(why);
    return attempt;
  };
  const auto timed_out = [&](const char* while_doing) {
    return failed(Errc::timeout, fmt::format("no answer within timeout_ms {} ({})", config_.timeout_ms, while_doing));
  };

  // Name resolution blocks outside the deadline: getaddrinfo has no timeout of its own.
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (const int resolved = ::getaddrinfo(endpoint_.host.c_str(), endpoint_.port.c_str(), &hints, &found);
      resolved != 0) {
    return failed(Errc::io, fmt::format("cannot resolve host '{}': {}", endpoint_.host, ::gai_strerror(resolved)));
  }
  std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> addresses(found, &::freeaddrinfo);

  int connected_fd = -1;
  std::string connect_error = "no address";
  for (const addrinfo* a = addresses.get(); a != nullptr && connected_fd < 0; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      connect_error = std::strerror(errno);
      continue;
    }
    if (::connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
      connected_fd = fd;
      break;
    }
    if (errno != EINPROGRESS) {
      connect_error = std::strerror(errno);
      ::close(fd);
      continue;
    }
    auto ready = wait_for(fd, POLLOUT, deadline);
    if (!ready || !*ready) {
      ::close(fd);
      if (!ready) return failed(Errc::io, ready.error().message);
      return timed_out("connecting");
    }
    int so_error = 0;
    socklen_t length = sizeof so_error;
    ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &so_error, &length);
    if (so_error == 0) {
      connected_fd = fd;
    } else {
      connect_error = std::strerror(so_error);
      ::close(fd);
    }
  }
  if (connected_fd < 0) return failed(Errc::io, fmt::format("cannot connect: {}", connect_error));
  const Socket socket(connected_fd);

  std::string request = fmt::format(
      "POST {} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n"
      "Connection: close\r\nUser-Agent: kiln-ticket-webhook/1\r\n",
      endpoint_.path, endpoint_.host_header, body.size());
  if (!bearer_token_.empty()) request += fmt::format("Authorization: Bearer {}\r\n", bearer_token_);
  for (const auto& [name, value] : config_.headers) request += fmt::format("{}: {}\r\n", name, value);
  request += "\r\n";
  request += body;

  std::size_t sent = 0;
  while (sent < request.size()) {
    const ssize_t wrote = ::send(socket.fd(), request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (wrote > 0) {
      sent += static_cast<std::size_t>(wrote);
      continue;
    }
    if (wrote < 0 && errno == EINTR) continue;
    if (wrote < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      auto ready = wait_for(socket.fd(), POLLOUT, deadline);
      if (!ready) return failed(Errc::io, ready.error().message);
      if (!*ready) return timed_out("sending the request");
      continue;
    }
    return failed(Errc::io, fmt::format("cannot send the request: {}", std::strerror(errno)));
  }

  // Only the status line matters; read up to the end of the response head.
  std::string head;
  char buffer[4096];
  while (head.find("\r\n\r\n") == std::string::npos) {
    auto ready = wait_for(socket.fd(), POLLIN, deadline);
    if (!ready) return failed(Errc::io, ready.error().message);
    if (!*ready) return timed_out("waiting for the response");
    const ssize_t got = ::recv(socket.fd(), buffer, sizeof buffer, 0);
    if (got < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) continue;
    if (got < 0) return failed(Errc::io, fmt::format("cannot read the response: {}", std::strerror(errno)));
    if (got == 0) break;
    head.append(buffer, static_cast<std::size_t>(got));
    if (head.size() > kMaxResponseHeadBytes) break;
  }
  // "HTTP/1.1 200 OK"
  const std::size_t line_end = head.find("\r\n");
  const std::string status_line = head.substr(0, line_end);
  const std::size_t space = status_line.find(' ');
  if (!status_line.starts_with("HTTP/1.") || space == std::string::npos || status_line.size() < space + 4) {
    return failed(Errc::bad_message, head.empty() ? "the server closed the connection without answering"
                                                  : fmt::format("not an HTTP response: '{}'", status_line.substr(0, 80)));
  }
  const std::string code = status_line.substr(space + 1, 3);
  if (!std::all_of(code.begin(), code.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return failed(Errc::bad_message, fmt::format("not an HTTP status line: '{}'", status_line.substr(0, 80)));
  }
  Attempt attempt;
  attempt.http_status = std::stoi(code);
  return attempt;
}

Result<FileResult> WebhookTicketSink::file(const Ticket& ticket) {
  if (auto valid = validate(ticket); !valid) return tl::unexpected(valid.error());
  auto recorded = record_.file(ticket);
  if (!recorded) return tl::unexpected(recorded.error());
  if (*recorded == FileResult::duplicate) return FileResult::duplicate;

  const std::string body = webhook_body(ticket);
  DurationMs backoff_ms = config_.retry_backoff_ms;
  Attempt last;
  int attempts = 0;
  for (int attempt = 1; attempt <= config_.max_attempts; ++attempt) {
    attempts = attempt;
    last = post(body);
    if (last.http_status >= 200 && last.http_status < 300) return FileResult::filed;
    if (last.http_status == 409) return FileResult::duplicate;  // the receiver has it already
    const bool transient = last.http_status == 0 || last.http_status >= 500 || last.http_status == 408 ||
                           last.http_status == 429;
    if (!transient || attempt == config_.max_attempts) break;
    sleep_(backoff_ms);
    backoff_ms *= 2;
  }

  // Not sent: forget it, so that a later run files it again.
  std::error_code removed;
  std::filesystem::remove(record_.path_for(ticket), removed);
  const std::string retry_note =
      removed ? fmt::format("; its dedupe record {} could not be removed ({}): delete it so the ticket is sent again",
                            record_.path_for(ticket).string(), removed.message())
              : "; the ticket is sent again on the next run";
  if (last.http_status != 0) {
    return fail(Errc::unavailable,
                fmt::format("the ticket webhook {} answered HTTP {} to ticket {} ({}) after {} attempt(s); check the "
                            "receiver's logs and the webhook's url, headers and token{}",
                            config_.url, last.http_status, ticket.id, dedupe_key(ticket), attempts, retry_note));
  }
  return fail(last.error_code,
              fmt::format("cannot send ticket {} ({}) to the ticket webhook {} after {} attempt(s): {}; check that the "
                          "receiver is up and reachable from the coordinator{}",
                          ticket.id, dedupe_key(ticket), config_.url, attempts, last.error, retry_note));
}

}  // namespace kiln::qualification

// A loopback HTTP server run by a test: it records each request and answers with the statuses
// it was given, for the webhook ticket sink's tests and the qualifier's, or with what a
// responder makes of each request (an artifact store).
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <functional>
#include <mutex>
#include <utility>
#include <string>
#include <thread>
#include <vector>

#include <doctest/doctest.h>

namespace kiln::testing {

struct Request {
  std::string head;  // request line and headers
  std::string body;
};

struct Response {
  int status = 200;
  std::string body;
};
using Responder = std::function<Response(const Request&)>;

// Answers the n-th connection with statuses[n] (the last one repeats); when silent, accepts
// connections and never answers them.
class LoopbackServer {
 public:
  explicit LoopbackServer(Responder responder) : LoopbackServer(std::vector<int>{200}, false, std::move(responder)) {}
  explicit LoopbackServer(std::vector<int> statuses, bool silent = false, Responder responder = {})
      : statuses_(std::move(statuses)), responder_(std::move(responder)), silent_(silent) {
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    REQUIRE(listen_fd_ >= 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    address.sin_port = 0;
    REQUIRE(::bind(listen_fd_, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0);
    REQUIRE(::listen(listen_fd_, 16) == 0);
    socklen_t length = sizeof address;
    REQUIRE(::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&address), &length) == 0);
    port_ = ntohs(address.sin_port);
    thread_ = std::thread([this] { serve(); });
  }
  ~LoopbackServer() {
    stop_ = true;
    thread_.join();
    ::close(listen_fd_);
  }
  LoopbackServer(const LoopbackServer&) = delete;
  LoopbackServer& operator=(const LoopbackServer&) = delete;

  std::string url(const std::string& path = "/hooks/kiln") const {
    return "http://127.0.0.1:" + std::to_string(port_) + path;
  }
  std::vector<Request> requests() const {
    std::lock_guard lock(mutex_);
    return requests_;
  }
  int connections() const { return connections_; }

 private:
  void serve() {
    std::vector<int> held;
    while (!stop_) {
      pollfd p{listen_fd_, POLLIN, 0};
      if (::poll(&p, 1, 20) <= 0) continue;
      const int fd = ::accept(listen_fd_, nullptr, nullptr);
      if (fd < 0) continue;
      const int n = connections_++;
      if (silent_) {
        held.push_back(fd);
        continue;
      }
      Request request = read_request(fd);
      {
        std::lock_guard lock(mutex_);
        requests_.push_back(request);
      }
      Response answer{statuses_[std::min<std::size_t>(static_cast<std::size_t>(n), statuses_.size() - 1)], "{}"};
      if (responder_) answer = responder_(request);
      const std::string response = "HTTP/1.1 " + std::to_string(answer.status) + " Status\r\nContent-Length: " +
                                   std::to_string(answer.body.size()) + "\r\nConnection: close\r\n\r\n" +
                                   answer.body;
      (void)::send(fd, response.data(), response.size(), MSG_NOSIGNAL);
      ::close(fd);
    }
    for (int fd : held) ::close(fd);
  }

  static Request read_request(int fd) {
    std::string data;
    char buffer[4096];
    std::size_t body_at = std::string::npos;
    std::size_t content_length = 0;
    for (;;) {
      if (body_at == std::string::npos) {
        body_at = data.find("\r\n\r\n");
        if (body_at != std::string::npos) {
          body_at += 4;
          const auto at = data.find("Content-Length: ");
          if (at != std::string::npos && at < body_at) content_length = std::stoul(data.substr(at + 16));
        }
      }
      if (body_at != std::string::npos && data.size() >= body_at + content_length) break;
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, 2000) <= 0) break;
      const ssize_t got = ::recv(fd, buffer, sizeof buffer, 0);
      if (got <= 0) break;
      data.append(buffer, static_cast<std::size_t>(got));
    }
    if (body_at == std::string::npos) return {data, ""};
    return {data.substr(0, body_at), data.substr(body_at)};
  }

  std::vector<int> statuses_;
  Responder responder_;
  bool silent_ = false;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> connections_{0};
  mutable std::mutex mutex_;
  std::vector<Request> requests_;
  std::thread thread_;
};

}  // namespace kiln::testing

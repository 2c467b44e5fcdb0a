#include "agent/shell/local_socket.h"

#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <algorithm>
#include <chrono>
#include <cstring>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/text/utf8.h"

namespace kiln::agent {
namespace {

constexpr std::size_t kMaxRequestBytes = 4096;
constexpr std::size_t kMaxConnections = 16;

bool fill_address(const std::string& path, sockaddr_un& addr) {
  if (path.size() >= sizeof(addr.sun_path)) return false;
  std::memset(&addr, 0, sizeof(addr));
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  return true;
}

}  // namespace

Result<std::unique_ptr<LocalSocketServer>> LocalSocketServer::listen(const std::string& path,
                                                                     const std::string& group) {
  sockaddr_un addr{};
  if (!fill_address(path, addr)) {
    return fail(Errc::config, fmt::format("local socket path {} is too long; choose a shorter local_socket.path", path));
  }
  struct group* g = ::getgrnam(group.c_str());
  if (!g) {
    return fail(Errc::config, fmt::format("group '{}' for the local socket does not exist; create it (groupadd {}) "
                                          "or set local_socket.group",
                                          group, group));
  }
  ::unlink(path.c_str());  // a socket left by an agent that died; we are the only agent here
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || ::listen(fd, 8) != 0) {
    const std::string why = std::strerror(errno);
    if (fd >= 0) ::close(fd);
    return fail(Errc::io, fmt::format("cannot listen on {}: {}; check local_socket.path", path, why));
  }
  // Only the owner and the kiln group may connect: the socket runs diagnostics on the chips.
  if (::chown(path.c_str(), static_cast<uid_t>(-1), g->gr_gid) != 0 || ::chmod(path.c_str(), 0660) != 0) {
    const std::string why = std::strerror(errno);
    ::close(fd);
    ::unlink(path.c_str());
    return fail(Errc::io, fmt::format("cannot restrict {} to group {}: {}", path, group, why));
  }
  return std::unique_ptr<LocalSocketServer>(new LocalSocketServer(fd, path));
}

LocalSocketServer::~LocalSocketServer() {
  for (auto& [fd, data] : pending_) ::close(fd);
  ::close(listen_fd_);
  ::unlink(path_.c_str());
}

std::vector<int> LocalSocketServer::fds() const {
  std::vector<int> out{listen_fd_};
  for (const auto& [fd, data] : pending_) out.push_back(fd);
  return out;
}

void LocalSocketServer::close_connection(int connection) {
  pending_.erase(connection);
  ::close(connection);
}

void LocalSocketServer::reply(int connection, int exit_code, const std::string& output) {
  // A local diagnostic's output may hold any bytes; JSON holds only UTF-8.
  const std::string line =
      nlohmann::json{{"exit_code", exit_code}, {"output", text::to_valid_utf8(output)}}.dump() + "\n";
  // The reply is small; a client that does not read it loses it.
  (void)::send(connection, line.data(), line.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  close_connection(connection);
}

std::vector<LocalRequest> LocalSocketServer::poll() {
  while (pending_.size() < kMaxConnections) {
    int c = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (c < 0) break;
    pending_[c] = "";
  }
  std::vector<LocalRequest> ready;
  std::vector<int> done;
  for (auto& [fd, data] : pending_) {
    char buffer[1024];
    ssize_t n = ::recv(fd, buffer, sizeof(buffer), 0);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) {
      done.push_back(fd);
      continue;
    }
    if (n > 0) data.append(buffer, static_cast<std::size_t>(n));
    auto newline = data.find('\n');
    if (newline == std::string::npos) {
      if (data.size() > kMaxRequestBytes) done.push_back(fd);
      continue;
    }
    auto doc = nlohmann::json::parse(data.substr(0, newline), nullptr, false);
    LocalRequest request{fd, "", 1};
    if (doc.is_object() && doc.value("command", "") == "diag" && doc.contains("level") &&
        doc["level"].is_number_integer()) {
      request.command = "diag";
      request.level = doc["level"].get<int>();
      ready.push_back(request);
    } else if (doc.is_object() && doc.value("command", "") == "status") {
      request.command = "status";
      ready.push_back(request);
    } else {
      ready.push_back(LocalRequest{fd, "invalid", 0});
    }
    data.clear();
  }
  for (int fd : done) close_connection(fd);
  std::vector<LocalRequest> accepted;
  for (const auto& r : ready) {
    if (r.command == "invalid") {
      reply(r.connection, 2,
            "the request must be one JSON line: {\"command\": \"diag\", \"level\": N} or {\"command\": \"status\"}\n");
    } else {
      pending_[r.connection] = "";  // stays open until replied
      accepted.push_back(r);
    }
  }
  return accepted;
}

std::optional<Result<LocalReply>> ask_running_agent(const std::string& path, const std::string& command, int level,
                                                    int timeout_ms,
                                                    const std::function<void(DurationMs waited_ms)>& waiting) {
  sockaddr_un addr{};
  if (!fill_address(path, addr)) return std::nullopt;
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return std::nullopt;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    const int error = errno;
    ::close(fd);
    if (error == EACCES || error == EPERM) {
      return Result<LocalReply>(fail(Errc::unauthorized,
                                     fmt::format("the running agent's socket {} is only for its group; ask ops to add "
                                                 "you to the kiln group",
                                                 path)));
    }
    return std::nullopt;  // nobody listens: no agent runs here
  }
  const std::string request = nlohmann::json{{"command", command}, {"level", level}}.dump() + "\n";
  (void)::send(fd, request.data(), request.size(), MSG_NOSIGNAL);
  std::string answer;
  const auto asked = std::chrono::steady_clock::now();
  const auto deadline = asked + std::chrono::milliseconds(timeout_ms);
  constexpr std::int64_t kWaitingIntervalMs = 1000;
  while (true) {
    const auto now = std::chrono::steady_clock::now();
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now);
    if (left.count() <= 0) {
      ::close(fd);
      return Result<LocalReply>(fail(Errc::timeout, fmt::format("the agent did not answer within {} ms", timeout_ms)));
    }
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(std::min<std::int64_t>(left.count(), kWaitingIntervalMs))) <= 0) {
      if (waiting) waiting(std::chrono::duration_cast<std::chrono::milliseconds>(now - asked).count());
      continue;
    }
    char buffer[4096];
    ssize_t n = ::recv(fd, buffer, sizeof(buffer), 0);
    if (n <= 0) break;
    answer.append(buffer, static_cast<std::size_t>(n));
  }
  ::close(fd);
  auto doc = nlohmann::json::parse(answer, nullptr, false);
  if (!doc.is_object() || !doc.contains("exit_code") || !doc["exit_code"].is_number_integer()) {
    return Result<LocalReply>(fail(Errc::bad_message, "the agent's answer was not understood"));
  }
  return Result<LocalReply>(LocalReply{doc["exit_code"].get<int>(), doc.value("output", "")});
}

}  // namespace kiln::agent

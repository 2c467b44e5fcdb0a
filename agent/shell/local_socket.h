// The agent's local socket: a Unix stream socket that only the host's kiln group may open
// (mode 0660, group from agent.toml). `kiln-agent diag` on the host asks the running agent
// through it, so diagnostics never race the agent's own jobs for the chips, and `kiln-agent
// status` asks what it is doing. One JSON line in ({"command": "diag", "level": N} or
// {"command": "status"}), one JSON document out ({"exit_code", "output"}).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/time.h"

namespace kiln::agent {

struct LocalRequest {
  int connection = -1;
  std::string command;
  int level = 1;
};

class LocalSocketServer {
 public:
  static Result<std::unique_ptr<LocalSocketServer>> listen(const std::string& path, const std::string& group);
  ~LocalSocketServer();
  LocalSocketServer(const LocalSocketServer&) = delete;
  LocalSocketServer& operator=(const LocalSocketServer&) = delete;

  // The listening socket and every open connection: the shell polls them all.
  std::vector<int> fds() const;
  // Accepts what is waiting and reads whatever arrived; returns complete requests. A bad
  // request is answered and closed here.
  std::vector<LocalRequest> poll();
  void reply(int connection, int exit_code, const std::string& output);

 private:
  LocalSocketServer(int fd, std::string path) : listen_fd_(fd), path_(std::move(path)) {}
  void close_connection(int connection);

  int listen_fd_;
  std::string path_;
  std::map<int, std::string> pending_;  // connection -> bytes read so far
};

struct LocalReply {
  int exit_code = 0;
  std::string output;
};

// Asks the agent listening at `path`. nullopt when no agent listens there (the caller runs
// the command itself); an error when one does but refused us (e.g. not in its group).
// `waiting`, when set, is called about once a second with the time waited so far.
std::optional<Result<LocalReply>> ask_running_agent(const std::string& path, const std::string& command, int level,
                                                    int timeout_ms,
                                                    const std::function<void(DurationMs waited_ms)>& waiting = {});

}  // namespace kiln::agent

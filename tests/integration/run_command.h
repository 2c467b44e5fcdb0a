// Runs a command line of the real binaries and keeps what it printed, for the CLI tests.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <string>

#include <doctest/doctest.h>

#include "tests/support/text.h"

namespace kiln::testing {

struct Ran {
  int status = -1;
  std::string output;  // stdout and stderr
};

// Runs `command` through the shell (so it may start with VAR=value assignments). A command still
// running after `timeout` is killed with its process group, and its output so far ends with a
// line saying so: a hung command fails its test instead of stopping the whole test program at
// ctest's timeout. Output is read until the shell exits; what a daemon it left behind writes
// later is not the command's.
inline Ran run(const std::string& command, std::chrono::seconds timeout = std::chrono::seconds(300)) {
  Ran ran;
  int out[2];
  REQUIRE(::pipe2(out, O_CLOEXEC) == 0);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::setpgid(0, 0);
    ::dup2(out[1], 1);
    ::dup2(out[1], 2);
    ::execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::close(out[1]);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  int wait_status = 0;
  bool exited = false;
  bool open = true;
  char buffer[4096];
  while (open || !exited) {
    if (!exited && ::waitpid(pid, &wait_status, WNOHANG) == pid) exited = true;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (!exited && left.count() <= 0) {
      ::kill(-pid, SIGKILL);
      ::waitpid(pid, &wait_status, 0);
      ran.output += "\n[killed: still running after " + std::to_string(timeout.count()) + "s]\n";
      ::close(out[0]);
      return ran;
    }
    if (exited && left.count() <= 0) break;
    // Once the shell is gone, only what is already in the pipe is its output.
    const int wait_ms = exited ? 100 : static_cast<int>(std::min<long>(left.count(), 200));
    if (!open) {
      ::poll(nullptr, 0, wait_ms);
      continue;
    }
    pollfd readable{out[0], POLLIN, 0};
    if (::poll(&readable, 1, wait_ms) == 0) {
      if (exited) break;
      continue;
    }
    const ssize_t n = ::read(out[0], buffer, sizeof buffer);
    if (n > 0) ran.output.append(buffer, static_cast<std::size_t>(n));
    if (n == 0) open = false;
  }
  ::close(out[0]);
  ran.status = WIFEXITED(wait_status) ? WEXITSTATUS(wait_status) : -1;
  return ran;
}

inline std::string bin(const std::string& name) { return std::string(KILN_BIN_DIR) + "/" + name; }

}  // namespace kiln::testing

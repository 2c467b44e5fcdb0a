// Helpers for the workload tests: temporary folders and running the real executables with a
// chosen environment and a deadline.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <doctest/doctest.h>

#include "tests/support/temp_dir.h"

extern char** environ;

namespace kiln::workloads::testing {

using kiln::testing::TempDir;

inline std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

inline std::string bin(const std::string& name) { return std::string(KILN_BIN_DIR) + "/" + name; }
inline std::string sim_library() { return std::string(KILN_LIB_DIR) + "/libkiln_sim_driver.so"; }

struct ProcessEnd {
  bool timed_out = false;
  int exit_code = -1;  // -1 when killed by a signal or timed out
};

// Runs argv with the parent's environment plus `env`, waits up to timeout_ms (then SIGKILL).
// `while_running` is called once right after the start, with the child's pid.
// With `stdout_path`, the child's standard output goes to that file.
inline ProcessEnd run_process(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
                              int timeout_ms, const std::function<void(pid_t)>& while_running = {},
                              const std::string& stdout_path = "") {
  std::map<std::string, std::string> merged;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry(*e);
    const auto eq = entry.find('=');
    if (eq != std::string::npos && entry.rfind("KILN_", 0) != 0) merged[entry.substr(0, eq)] = entry.substr(eq + 1);
  }
  for (const auto& [k, v] : env) merged[k] = v;
  std::vector<std::string> env_strings;
  for (const auto& [k, v] : merged) env_strings.push_back(k + "=" + v);
  std::vector<char*> envp;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> args = argv;
  std::vector<char*> argp;
  for (auto& s : args) argp.push_back(s.data());
  argp.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  ::posix_spawn_file_actions_init(&actions);
  if (!stdout_path.empty()) {
    ::posix_spawn_file_actions_addopen(&actions, 1, stdout_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  }
  pid_t pid = 0;
  const int spawned = ::posix_spawn(&pid, argp[0], &actions, nullptr, argp.data(), envp.data());
  ::posix_spawn_file_actions_destroy(&actions);
  REQUIRE(spawned == 0);
  if (while_running) while_running(pid);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  ProcessEnd end;
  for (;;) {
    int status = 0;
    const pid_t done = ::waitpid(pid, &status, WNOHANG);
    if (done == pid) {
      end.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      return end;
    }
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      end.timed_out = true;
      return end;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

}  // namespace kiln::workloads::testing

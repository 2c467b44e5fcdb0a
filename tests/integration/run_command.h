// Runs a command line of the real binaries and keeps what it printed, for the CLI tests.
#pragma once

#include <stdio.h>
#include <sys/wait.h>

#include <string>

#include <doctest/doctest.h>

#include "tests/support/text.h"

namespace kiln::testing {

struct Ran {
  int status = -1;
  std::string output;  // stdout and stderr
};

// Runs `command` through the shell (so it may start with VAR=value assignments).
inline Ran run(const std::string& command) {
  Ran ran;
  FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  REQUIRE(pipe != nullptr);
  char buffer[4096];
  std::size_t n = 0;
  while ((n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0) ran.output.append(buffer, n);
  const int wait_status = ::pclose(pipe);
  ran.status = WIFEXITED(wait_status) ? WEXITSTATUS(wait_status) : -1;
  return ran;
}

inline std::string bin(const std::string& name) { return std::string(KILN_BIN_DIR) + "/" + name; }

}  // namespace kiln::testing

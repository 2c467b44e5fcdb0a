// The git command and files for tests that keep an environments repository: git itself writes
// and reads back what kiln reads and writes.
#pragma once

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "tests/integration/run_command.h"

namespace kiln::testing {

// git by argv through the shell of run(): every argument is single-quoted.
inline Ran git(const std::filesystem::path& dir, const std::vector<std::string>& args) {
  std::string command = "git -C '" + dir.string() + "' -c user.name=test -c user.email=test@kiln";
  for (const auto& arg : args) command += " '" + arg + "'";
  return run(command);
}

inline std::string git_out(const std::filesystem::path& dir, const std::vector<std::string>& args) {
  Ran ran = git(dir, args);
  INFO(ran.output);
  REQUIRE(ran.status == 0);
  return ran.output;
}

inline void write(const std::filesystem::path& path, const std::string& text) {
  std::filesystem::create_directories(path.parent_path());
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
}

}  // namespace kiln::testing

// Runs the git command by argv (never through a shell) in one working clone, for the release
// shell. git is what every git client and forge already read, so kiln writes the environments
// repository with it rather than with a library of its own.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/time.h"

namespace kiln::release {

struct GitOutput {
  int exit_code = -1;
  std::string out;
  std::string err;
};

class Git {
 public:
  // `identity`: the author and committer name of commits made through it (the kiln key).
  Git(std::string work_tree, std::string identity, DurationMs timeout_ms = 60000);

  const std::string& work_tree() const { return work_tree_; }

  // `git -C work_tree ARGS...`: its output, whatever its exit code. Errc::internal when git could
  // not be started or overran the timeout (it is then killed).
  Result<GitOutput> run(const std::vector<std::string>& args) const;
  // The same, with a non-zero exit an Errc::internal naming the command and git's message.
  Result<std::string> check(const std::vector<std::string>& args) const;

 private:
  std::string work_tree_;
  std::string identity_;
  DurationMs timeout_ms_;
};

}  // namespace kiln::release

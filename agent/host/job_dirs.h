// Retention of the job directories in the agent's work_dir (job-<id>-<attempt>): a finished
// job's directory goes when it is older than the age limit, and the oldest finished ones go
// while all of them together take more than the size limit. A running job's directory is
// never touched. docs/operations.md ("Job directories").
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "common/time.h"

namespace kiln::agent {

struct JobDirLimits {
  DurationMs max_age_ms = 0;
  std::uint64_t max_total_bytes = 0;
};

struct JobDir {
  std::string name;             // job-<id>-<attempt>
  TimeMs modified_wall_ms = 0;  // its newest file's modification time
  std::uint64_t bytes = 0;      // everything in it
  bool running = false;
};

// The directories to remove, oldest first: finished ones past the age, then the oldest
// finished ones while the total (running ones included) is over the size limit.
std::vector<std::string> job_dirs_to_remove(std::vector<JobDir> dirs, const JobDirLimits& limits, TimeMs now_wall_ms);

struct JobDirCleanup {
  std::vector<std::string> removed;
  std::uint64_t removed_bytes = 0;
  std::uint64_t kept_bytes = 0;     // what stays, running jobs' directories included
  std::uint64_t running_bytes = 0;  // of the running jobs' directories
  std::vector<std::string> problems;  // directories that could not be read or removed, and why
};

// Lists the job directories of `work_dir` and removes what job_dirs_to_remove chooses;
// `running` names the directories of the jobs running now.
JobDirCleanup clean_job_dirs(const std::string& work_dir, const std::set<std::string>& running,
                             const JobDirLimits& limits, TimeMs now_wall_ms);

}  // namespace kiln::agent

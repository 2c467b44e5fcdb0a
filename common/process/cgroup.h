// Job containment in cgroup v2: every child the agent starts can run in a cgroup directory
// of its own, which no fork, setsid() or double fork leaves, and which cgroup.kill empties
// at once. Only cgroup.procs, cgroup.kill and cgroup.events are used, so no controller has
// to be delegated.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "common/time.h"

namespace kiln {

// The cgroup2 mount, from /proc/self/mountinfo.
struct Cgroup2Mount {
  std::string mount_point;  // e.g. /sys/fs/cgroup, or /sys/fs/cgroup/unified in a hybrid layout
  std::string root;         // the cgroup seen at the mount point, "/" unless the mount is of a subtree
};

// The first mount of type cgroup2 in mountinfo text; nullopt when there is none.
std::optional<Cgroup2Mount> cgroup2_mount_from_mountinfo(std::string_view mountinfo);

// The process's cgroup v2 path from /proc/PID/cgroup text (the "0::/path" line); nullopt when
// there is none (a host with cgroup v1 only).
std::optional<std::string> cgroup2_path_from_proc_cgroup(std::string_view proc_cgroup);

// The directory of `cgroup_path` under `mount`; nullopt when the mount does not show it.
std::optional<std::string> cgroup2_directory(const Cgroup2Mount& mount, const std::string& cgroup_path);

// The directory of this process's own cgroup, from /proc/self/mountinfo and /proc/self/cgroup.
Result<std::string> own_cgroup2_directory();

// Creates `dir` (and its parents) and checks that this process can start children in
// cgroups under it: the kernel must have cgroup.kill (Linux 5.14) and the process must be
// allowed to move processes there. The error says which and what to do.
Status prepare_cgroup_root(const std::string& dir);

// cgroup.kill: SIGKILL to every process in `dir` and its descendants, forks in flight included.
Status kill_cgroup(const std::string& dir);

// Sends signo to each process listed in dir's cgroup.procs (a polite stop before kill_cgroup).
void signal_cgroup(const std::string& dir, int signo);

// Waits up to wait_ms for `dir` to hold no process, then removes it. Errors when it is still
// populated or cannot be removed.
Status remove_cgroup(const std::string& dir, DurationMs wait_ms);

// What kill_leftover_cgroups found of a previous incarnation's children.
struct LeftoverCgroup {
  std::string name;                  // the directory's name under the root
  std::size_t processes_killed = 0;  // 0: it was already empty
};

// Kills every cgroup directly under `root` (cgroup.kill), waits up to wait_ms for each to
// empty and removes it. No root directory: nothing to do.
Result<std::vector<LeftoverCgroup>> kill_leftover_cgroups(const std::string& root, DurationMs wait_ms);

}  // namespace kiln

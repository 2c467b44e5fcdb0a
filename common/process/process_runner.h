// Runs child processes for the agent's single-threaded poll loop: jobs, workloads, health
// checks. Each child gets a hard deadline, its own process group (so everything it starts
// dies with it) and its output captured to a file. Boost.Process stays inside
// process_runner.cpp.
//
// The parent-death signal reaches only the direct child, so a runner can also keep a record
// of its live process groups in a file: after a crash, the next incarnation kills what the
// record names (kill_recorded_groups) before it touches the chips again. A process that
// calls setsid() leaves its group, though; given a cgroup root (common/process/cgroup.h),
// the runner also puts each child in a cgroup of its own before it execs, which nothing it
// starts can leave, and the next incarnation kills what is left there
// (kill_leftover_cgroups).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/enum_names.h"
#include "common/error.h"
#include "common/time.h"

namespace kiln {

using ProcessId = std::uint64_t;  // the runner's own id, never reused; not the OS pid

struct ProcessSpec {
  std::string program;  // absolute path; run by argv, never through a shell
  std::vector<std::string> args;
  std::map<std::string, std::string> env_extra;  // added to (or replacing) the agent's env
  std::string work_dir;                           // created if missing
  DurationMs timeout_ms = 0;                      // hard deadline from start; must be > 0
  std::size_t output_limit_bytes = 1024 * 1024;   // how much of the output's tail to return
  DurationMs kill_grace_ms = 5000;                // SIGTERM to the group, then SIGKILL after this
  // File in work_dir that receives stdout and stderr; empty means a unique name.
  std::string output_file;
  // The child's cgroup under the runner's cgroup root (unused without one); empty means
  // "process-<id>". A directory of that name left by a crash is killed and made anew.
  std::string cgroup_name;
};

enum class ProcessOutcome {
  exited,           // ended on its own: exit_code, or term_signal if a signal killed it
  timed_out,        // overran its deadline and was stopped
  cancelled,        // stopped by cancel()
  failed_to_start,  // never ran; detail says why
};
constexpr EnumTable<ProcessOutcome, 4> enum_names(ProcessOutcome) {
  return {{
      {ProcessOutcome::exited, "exited"},
      {ProcessOutcome::timed_out, "timed_out"},
      {ProcessOutcome::cancelled, "cancelled"},
      {ProcessOutcome::failed_to_start, "failed_to_start"},
  }};
}

inline std::string_view to_string(ProcessOutcome value) { return enum_name(value); }

struct ProcessExit {
  ProcessId id = 0;
  ProcessOutcome outcome = ProcessOutcome::failed_to_start;
  int exit_code = -1;   // -1 unless the process exited normally
  int term_signal = 0;  // the signal that ended it, 0 if none
  DurationMs duration_ms = 0;
  std::string output_tail;  // the last output_limit_bytes of stdout and stderr
  bool output_truncated = false;
  std::string output_path;  // the full captured output
  std::string detail;       // one readable sentence on how it ended

  bool succeeded() const {
    return outcome == ProcessOutcome::exited && exit_code == 0 && term_signal == 0;
  }
};

// Not thread-safe: call it from one thread, the agent's loop. A background thread inside
// enforces deadlines and reaps children even while that loop is busy.
class ProcessRunner {
 public:
  // group_record_file: when not empty, the runner keeps every live child's process group and
  // start time in that file (rewritten before start() returns and after each child ends),
  // for kill_recorded_groups after a crash.
  // cgroup_root: when not empty, a cgroup v2 directory this process may start children in
  // (prepare_cgroup_root); each child runs in its own cgroup below it, killed as a whole
  // (cgroup.kill) when the child ends or is stopped, and then removed.
  explicit ProcessRunner(std::string group_record_file = {}, std::string cgroup_root = {});
  // Kills whatever still runs (SIGKILL to each group and cgroup), reaps it, removes the record.
  ~ProcessRunner();
  ProcessRunner(const ProcessRunner&) = delete;
  ProcessRunner& operator=(const ProcessRunner&) = delete;

  // Errors only for a spec that cannot be run at all (relative program path, no deadline,
  // unusable work dir), or when the group record cannot be written (the child is killed). A
  // child whose cgroup cannot be made or entered never runs: failed_to_start. A
  // program that cannot be executed gets an id and is reported by poll_finished() as
  // failed_to_start, like every other ending.
  // Call it from a thread that outlives the child: a child is killed when the thread that
  // started it exits (PR_SET_PDEATHSIG), so no workload outlives the agent that watches it.
  Result<ProcessId> start(const ProcessSpec& spec);

  // SIGTERM to the process group (and every process of its cgroup), SIGKILL to both after the
  // grace; reported as cancelled.
  Status cancel(ProcessId id);

  // Sends signo to the program started (not its whole group), e.g. SIGUSR1 as a preemption
  // notice for the workload to checkpoint.
  Status signal(ProcessId id, int signo);

  // Readable when poll_finished() has something to return; include it in zmq_poll.
  int wakeup_fd() const;

  // Every process that ended since the last call; drains wakeup_fd().
  std::vector<ProcessExit> poll_finished();

  // Started and not yet returned by poll_finished().
  std::size_t running() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// What kill_recorded_groups found of a previous runner's children.
struct LeftoverGroup {
  std::int64_t process_group = 0;
  std::string program;
  std::size_t processes_killed = 0;  // 0: the group had already ended
};

// SIGKILLs every process group recorded in group_record_file that is still alive, waits up to
// wait_ms for its processes to die, then removes the file. A group is killed only when it is
// the one recorded: its leader, if alive, has the recorded start time (from /proc/PID/stat),
// and no member is older than the recorded leader, so a recycled pid is never killed. No file:
// nothing to do.
Result<std::vector<LeftoverGroup>> kill_recorded_groups(const std::string& group_record_file,
                                                        DurationMs wait_ms);

// For standalone tools (`kiln-agent diag` without a running agent): start and wait.
Result<ProcessExit> run_to_completion(const ProcessSpec& spec);

}  // namespace kiln

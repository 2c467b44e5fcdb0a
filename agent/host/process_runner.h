// Runs child processes for the agent's single-threaded poll loop: jobs, workloads, health
// checks. Each child gets a hard deadline, its own process group (so everything it starts
// dies with it) and its output captured to a file. Boost.Process stays inside
// process_runner.cpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "common/time.h"

namespace kiln::agent {

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
};

enum class ProcessOutcome {
  exited,           // ended on its own: exit_code, or term_signal if a signal killed it
  timed_out,        // overran its deadline and was stopped
  cancelled,        // stopped by cancel()
  failed_to_start,  // never ran; detail says why
};

std::string_view to_string(ProcessOutcome outcome);

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
  ProcessRunner();
  ~ProcessRunner();  // kills whatever still runs (SIGKILL to each group) and reaps it
  ProcessRunner(const ProcessRunner&) = delete;
  ProcessRunner& operator=(const ProcessRunner&) = delete;

  // Errors only for a spec that cannot be run at all (relative program path, no deadline,
  // unusable work dir). A program that cannot be executed gets an id and is reported by
  // poll_finished() as failed_to_start, like every other ending.
  // Call it from a thread that outlives the child: a child is killed when the thread that
  // started it exits (PR_SET_PDEATHSIG), so no workload outlives the agent that watches it.
  Result<ProcessId> start(const ProcessSpec& spec);

  // SIGTERM to the process group, SIGKILL after the grace; reported as cancelled.
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

// For standalone tools (`kiln-agent diag` without a running agent): start and wait.
Result<ProcessExit> run_to_completion(const ProcessSpec& spec);

}  // namespace kiln::agent

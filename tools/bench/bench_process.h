// The benchmarks' own handling of the servers they measure: started on chosen CPUs with their
// output in a log, stopped, and read from /proc.
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <string>
#include <vector>

#include "common/error.h"

namespace kiln::bench {

// The CPUs a process (0: this one) may run on, and pinning it to `cpus`.
std::vector<int> allowed_cpus(pid_t pid = 0);
bool run_on(pid_t pid, const std::vector<int>& cpus);

// Starts argv[0] (a path) with its stdout and stderr in `log`; it dies with this process.
// `input`, when given, becomes the child's standard input; `cpus`, when given, where it runs.
pid_t spawn(const std::vector<std::string>& argv, const std::filesystem::path& log, int input = -1,
            const std::vector<int>& cpus = {});
// SIGTERM (after SIGCONT, should it be stopped), then SIGKILL after 10 s; reaps it.
void stop_process(pid_t pid);
// Whether a child has not exited yet.
bool running(pid_t pid);
// A server that exited before its run ended: the end of its log says why.
Error server_gone(const std::string& server, const std::filesystem::path& log);

// The kiln-coordinator a bench runs: `given`, or the one beside this program; Errc::not_found,
// saying to build it or pass --coordinator, when there is none.
Result<std::string> coordinator_to_run(const std::string& given);

// The memory a process holds resident now (VmRSS of /proc/PID/status), and the most it has held
// so far (VmHWM), in MB; NaN where the kernel does not say.
double resident_mb(pid_t pid);
double peak_resident_mb(pid_t pid);

}  // namespace kiln::bench

#include "tools/bench/bench_process.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <thread>

#include <fmt/format.h>

namespace kiln::bench {
namespace {

double status_mb(pid_t pid, const std::string& field) {
  std::ifstream in(fmt::format("/proc/{}/status", pid));
  for (std::string key; in >> key;) {
    if (key == field) {
      double kb = 0;
      return in >> kb ? kb / 1024 : NAN;
    }
    in.ignore(std::numeric_limits<std::streamsize>::max(), '\n');
  }
  return NAN;
}

}  // namespace

std::vector<int> allowed_cpus(pid_t pid) {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (::sched_getaffinity(pid, sizeof set, &set) != 0) return cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &set)) cpus.push_back(cpu);
  }
  return cpus;
}

bool run_on(pid_t pid, const std::vector<int>& cpus) {
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int cpu : cpus) CPU_SET(cpu, &set);
  return ::sched_setaffinity(pid, sizeof set, &set) == 0;
}

pid_t spawn(const std::vector<std::string>& argv, const std::filesystem::path& log, int input,
            const std::vector<int>& cpus) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    // A benchmark that dies leaves no server behind.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (!cpus.empty()) (void)run_on(0, cpus);
    if (input >= 0) ::dup2(input, 0);
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execv(args[0], args.data());
    std::fprintf(stderr, "cannot run %s: %s\n", args[0], std::strerror(errno));
    ::_exit(127);
  }
  return pid;
}

void stop_process(pid_t pid) {
  ::kill(pid, SIGCONT);
  ::kill(pid, SIGTERM);
  int status = 0;
  for (int i = 0; i < 100; ++i) {
    if (::waitpid(pid, &status, WNOHANG) == pid) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ::kill(pid, SIGKILL);
  ::waitpid(pid, &status, 0);
}

bool running(pid_t pid) {
  int status = 0;
  return ::waitpid(pid, &status, WNOHANG) == 0;
}

Error server_gone(const std::string& server, const std::filesystem::path& log) {
  std::ifstream in(log);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  constexpr std::size_t kTailBytes = 2000;
  if (text.size() > kTailBytes) text = "..." + text.substr(text.size() - kTailBytes);
  return Error{Errc::unavailable, fmt::format("the {} exited before its run ended; the end of its log ({}):\n{}",
                                              server, log.string(), text)};
}

double resident_mb(pid_t pid) { return status_mb(pid, "VmRSS:"); }
double peak_resident_mb(pid_t pid) { return status_mb(pid, "VmHWM:"); }

Result<std::string> coordinator_to_run(const std::string& given) {
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe");
  const std::string coordinator = given.empty() ? (self.parent_path() / "kiln-coordinator").string() : given;
  if (!std::filesystem::exists(coordinator)) {
    return fail(Errc::not_found, "no kiln-coordinator at " + coordinator + "; build it (scripts/build) or pass "
                                 "--coordinator");
  }
  return coordinator;
}

}  // namespace kiln::bench

#include "common/process/process_runner.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <optional>
#include <thread>

#include <boost/process.hpp>
#include <boost/process/extend.hpp>

#include "common/process/cgroup.h"
#include "common/process/proc_stat.h"

namespace kiln {
namespace {

namespace bp = boost::process;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// Polling interval of the reaper when the kernel cannot give a pidfd for a child.
constexpr DurationMs kFallbackPollMs = 20;
// How long the reaper waits for a killed cgroup to empty before it leaves the directory to
// the next start-up's clean-up.
constexpr DurationMs kCgroupEmptyWaitMs = 2000;

DurationMs elapsed_ms(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(to - from).count();
}

int open_pidfd(pid_t pid) {
#ifdef SYS_pidfd_open
  return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
#else
  (void)pid;
  return -1;
#endif
}

void notify(int event_fd) {
  const std::uint64_t one = 1;
  // The counter only saturates after 2^64 - 1 unread wakeups; a failed write cannot matter.
  [[maybe_unused]] const ssize_t written = ::write(event_fd, &one, sizeof one);
}

void drain(int event_fd) {
  std::uint64_t count = 0;
  [[maybe_unused]] const ssize_t got = ::read(event_fd, &count, sizeof count);
}

std::string signal_name(int signo) {
  const char* description = ::strsignal(signo);
  return "signal " + std::to_string(signo) +
         (description != nullptr ? " (" + std::string(description) + ")" : std::string());
}

// The fields of /proc/PID/stat that tell one process from another that later got its pid.
struct ProcIdentity {
  std::int64_t process_group = 0;
  std::uint64_t start_ticks = 0;  // clock ticks after boot
  char state = '?';               // 'Z': a zombie, already dead
};

std::optional<ProcIdentity> read_proc_stat(std::int64_t pid) {
  const auto stat = ProcStat::read(std::to_string(pid));
  if (!stat) return std::nullopt;
  const auto group = stat->number(5);
  const auto start_ticks = stat->number(22);
  if (!group || !start_ticks) return std::nullopt;
  return ProcIdentity{static_cast<std::int64_t>(*group), static_cast<std::uint64_t>(*start_ticks), stat->state()};
}

// Live (not zombie) processes by their process group, from /proc.
std::map<std::int64_t, std::vector<std::pair<std::int64_t, ProcIdentity>>> live_processes_by_group() {
  std::map<std::int64_t, std::vector<std::pair<std::int64_t, ProcIdentity>>> groups;
  std::error_code ec;
  // increment(ec), not a range-for: a listing error must not throw out of the runner.
  for (fs::directory_iterator it("/proc", ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    const std::int64_t pid = std::stoll(name);
    if (auto stat = read_proc_stat(pid); stat && stat->state != 'Z') {
      groups[stat->process_group].emplace_back(pid, *stat);
    }
  }
  return groups;
}

struct OutputTail {
  std::string text;
  bool truncated = false;
};

OutputTail read_tail(const std::string& path, std::size_t limit_bytes) {
  OutputTail tail;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return tail;
  struct stat info {};
  if (::fstat(fd, &info) == 0) {
    const auto size = static_cast<std::size_t>(info.st_size);
    const std::size_t offset = size > limit_bytes ? size - limit_bytes : 0;
    tail.truncated = offset > 0;
    tail.text.resize(size - offset);
    std::size_t have = 0;
    while (have < tail.text.size()) {
      const ssize_t got = ::pread(fd, tail.text.data() + have, tail.text.size() - have,
                                  static_cast<off_t>(offset + have));
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) break;
      have += static_cast<std::size_t>(got);
    }
    tail.text.resize(have);
  }
  ::close(fd);
  return tail;
}

struct Child {
  ProcessId id = 0;
  pid_t pid = -1;
  int pidfd = -1;
  std::string program;
  std::string output_path;
  std::size_t output_limit_bytes = 0;
  DurationMs timeout_ms = 0;
  DurationMs kill_grace_ms = 0;
  std::uint64_t start_ticks = 0;  // from /proc/PID/stat, for the group record
  std::string cgroup_dir;         // empty: the runner has no cgroup root
  Clock::time_point started;
  Clock::time_point deadline;
  // What the runner decided: exited until it chose to stop the child.
  ProcessOutcome intent = ProcessOutcome::exited;
  bool kill_sent = false;
  Clock::time_point kill_at;  // when SIGTERM escalates to SIGKILL
};

struct Reaped {
  Child child;
  std::optional<int> wait_status;  // nullopt: someone else collected it
  Clock::time_point ended;
  std::string cgroup_problem;  // why its cgroup could not be removed, if it could not
};

// SIGKILL to everything the child started: its group, and its cgroup when it has one.
void kill_everything_of(const Child& child) {
  ::kill(-child.pid, SIGKILL);
  if (!child.cgroup_dir.empty()) (void)kill_cgroup(child.cgroup_dir);
}

ProcessExit make_exit(const Reaped& reaped) {
  const Child& child = reaped.child;
  ProcessExit out;
  out.id = child.id;
  out.outcome = child.intent;
  out.duration_ms = elapsed_ms(child.started, reaped.ended);
  out.output_path = child.output_path;
  OutputTail tail = read_tail(child.output_path, child.output_limit_bytes);
  out.output_tail = std::move(tail.text);
  out.output_truncated = tail.truncated;

  std::string how = "ended without a known status (was SIGCHLD ignored or the child reaped "
                    "elsewhere?)";
  if (reaped.wait_status) {
    const int status = *reaped.wait_status;
    if (WIFEXITED(status)) {
      out.exit_code = WEXITSTATUS(status);
      how = "exited with code " + std::to_string(out.exit_code);
    } else if (WIFSIGNALED(status)) {
      out.term_signal = WTERMSIG(status);
      how = "was killed by " + signal_name(out.term_signal);
    }
  }
  const std::string stop = child.kill_sent ? "SIGKILL after ignoring SIGTERM for " +
                                                 std::to_string(child.kill_grace_ms) + " ms"
                                           : "SIGTERM";
  switch (child.intent) {
    case ProcessOutcome::exited:
      out.detail = child.program + " " + how;
      break;
    case ProcessOutcome::timed_out:
      out.detail = child.program + " overran its deadline of " +
                   std::to_string(child.timeout_ms) + " ms and was stopped with " + stop +
                   "; it " + how;
      break;
    case ProcessOutcome::cancelled:
      out.detail = child.program + " was cancelled and stopped with " + stop + "; it " + how;
      break;
    case ProcessOutcome::failed_to_start:
      break;
  }
  if (!reaped.cgroup_problem.empty()) out.detail += " (" + reaped.cgroup_problem + ")";
  return out;
}

// Makes the child's cgroup (killing and replacing one of that name a crash left) and opens
// its cgroup.procs for the child to write itself into.
Result<int> make_child_cgroup(const std::string& dir) {
  if (fs::exists(dir)) {
    (void)kill_cgroup(dir);
    if (Status removed = remove_cgroup(dir, kCgroupEmptyWaitMs); !removed) return tl::unexpected(removed.error());
  }
  if (::mkdir(dir.c_str(), 0755) != 0) {
    return fail(Errc::io, "cannot create the cgroup " + dir + ": " + std::strerror(errno));
  }
  const int fd = ::open((dir + "/cgroup.procs").c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) {
    const int open_errno = errno;
    ::rmdir(dir.c_str());
    return fail(Errc::io, "cannot open " + dir + "/cgroup.procs: " + std::strerror(open_errno));
  }
  return fd;
}

// Runs in the child between fork and exec, so only async-signal-safe calls.
// cgroup_procs_fd: the child's cgroup.procs, opened by the parent; -1 for none.
void prepare_child(pid_t agent_pid, int cgroup_procs_fd) {
  // Into its cgroup before it can fork: then nothing it starts is ever outside.
  if (cgroup_procs_fd >= 0 && ::write(cgroup_procs_fd, "0", 1) != 1) ::_exit(126);
  // Its own process group: stopping the group stops everything the child started.
  ::setpgid(0, 0);
  // A child must not inherit the agent's blocked or ignored signals (a blocked SIGTERM would
  // leave only SIGKILL to stop it; an ignored SIGPIPE changes how pipelines end).
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  for (int signo = 1; signo < NSIG; ++signo) {
    if (signo != SIGKILL && signo != SIGSTOP) ::signal(signo, SIG_DFL);
  }
  // A child that outlives its agent would hold chips with no one enforcing its deadline.
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != agent_pid) ::_exit(127);
}

}  // namespace

struct ProcessRunner::Impl {
  mutable std::mutex mutex;
  std::map<ProcessId, Child> children;  // started and not yet reaped
  std::vector<ProcessExit> finished;    // reaped, waiting for poll_finished()
  std::size_t being_reported = 0;       // reaped, exit still being assembled
  ProcessId next_id = 1;
  bool stopping = false;
  int wakeup_fd = -1;   // readable while `finished` may be non-empty
  int control_fd = -1;  // wakes the reaper after start, cancel or shutdown
  std::string record_file;  // empty: no group record
  std::string cgroup_root;  // empty: children get no cgroup
  std::thread reaper;

  Impl(std::string group_record_file, std::string cgroup_root_dir)
      : record_file(std::move(group_record_file)), cgroup_root(std::move(cgroup_root_dir)) {
    wakeup_fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    control_fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    KILN_ASSERT(wakeup_fd >= 0 && control_fd >= 0,
                "eventfd failed: the process is out of file descriptors");
    reaper = std::thread([this] { reap_loop(); });
  }

  ~Impl() {
    {
      std::lock_guard lock(mutex);
      stopping = true;
      for (const auto& [id, child] : children) kill_everything_of(child);
    }
    notify(control_fd);
    reaper.join();
    for (const auto& [id, child] : children) {
      ::waitpid(child.pid, nullptr, 0);
      if (child.pidfd >= 0) ::close(child.pidfd);
      // One left behind is killed and removed by the next start-up.
      if (!child.cgroup_dir.empty()) (void)remove_cgroup(child.cgroup_dir, kCgroupEmptyWaitMs);
    }
    if (!record_file.empty()) {
      std::error_code ignored;
      fs::remove(record_file, ignored);
    }
    ::close(wakeup_fd);
    ::close(control_fd);
  }

  // Under the lock. One line per live child: process group, start ticks, program. Written
  // to a new file and renamed over the old, so a crash never leaves half a record.
  Status write_record() const {
    if (record_file.empty()) return {};
    const std::string temporary = record_file + ".new";
    {
      std::ofstream out(temporary, std::ios::trunc);
      for (const auto& [id, child] : children) {
        out << child.pid << ' ' << child.start_ticks << ' ' << child.program << '\n';
      }
      out.flush();
      if (!out) {
        return fail(Errc::io, "cannot write the process group record " + temporary +
                                  "; check that its directory is writable");
      }
    }
    std::error_code ec;
    fs::rename(temporary, record_file, ec);
    if (ec) {
      return fail(Errc::io, "cannot replace the process group record " + record_file + ": " +
                                ec.message());
    }
    return {};
  }

  void report(std::vector<ProcessExit> exits) {
    {
      std::lock_guard lock(mutex);
      being_reported -= exits.size();
      for (ProcessExit& exit : exits) finished.push_back(std::move(exit));
    }
    notify(wakeup_fd);
  }

  void reap_loop() {
    std::vector<pollfd> fds;
    for (;;) {
      std::vector<Reaped> reaped;
      int timeout_ms = -1;
      {
        std::lock_guard lock(mutex);
        if (stopping) return;
        collect_exited(reaped);
        // A stale line is harmless (its group is dead and its pid's start time differs), so
        // a failed rewrite here only waits for the next one.
        if (!reaped.empty()) (void)write_record();
        timeout_ms = enforce_deadlines(Clock::now());
        fds.assign(1, pollfd{control_fd, POLLIN, 0});
        for (const auto& [id, child] : children) {
          if (child.pidfd >= 0) fds.push_back(pollfd{child.pidfd, POLLIN, 0});
          else timeout_ms = timeout_ms < 0 ? kFallbackPollMs
                                           : std::min<int>(timeout_ms, kFallbackPollMs);
        }
      }
      if (!reaped.empty()) {
        std::vector<ProcessExit> exits;
        for (Reaped& one : reaped) {
          if (one.child.pidfd >= 0) ::close(one.child.pidfd);
          if (!one.child.cgroup_dir.empty()) {
            if (Status removed = remove_cgroup(one.child.cgroup_dir, kCgroupEmptyWaitMs); !removed) {
              one.cgroup_problem = removed.error().message;
            }
          }
          exits.push_back(make_exit(one));
        }
        report(std::move(exits));
        continue;  // state changed: recompute deadlines before sleeping
      }
      const int ready = ::poll(fds.data(), fds.size(), timeout_ms);
      if (ready > 0 && (fds[0].revents & POLLIN) != 0) drain(control_fd);
    }
  }

  // Under the lock. Exits are checked before deadlines so that a child that ended on time is
  // never reported as timed out.
  void collect_exited(std::vector<Reaped>& reaped) {
    for (auto it = children.begin(); it != children.end();) {
      Child& child = it->second;
      siginfo_t info{};
      // WNOWAIT leaves the child a zombie, so its pid (and group id) cannot be reused while
      // the rest of its group is killed.
      const int rc = ::waitid(P_PID, static_cast<id_t>(child.pid), &info,
                              WEXITED | WNOHANG | WNOWAIT);
      const bool gone = rc != 0 && errno == ECHILD;
      if (!gone && (rc != 0 || info.si_pid != child.pid)) {
        ++it;
        continue;
      }
      Reaped one{child, std::nullopt, Clock::now(), {}};
      kill_everything_of(child);  // whatever it left behind goes with it
      int status = 0;
      if (!gone && ::waitpid(child.pid, &status, 0) == child.pid) one.wait_status = status;
      reaped.push_back(std::move(one));
      ++being_reported;
      it = children.erase(it);
    }
  }

  // Under the lock. Sends due signals; returns the milliseconds until the next one (-1: none).
  int enforce_deadlines(Clock::time_point now) {
    std::optional<Clock::time_point> next;
    const auto consider = [&next](Clock::time_point at) {
      if (!next || at < *next) next = at;
    };
    for (auto& [id, child] : children) {
      if (child.intent == ProcessOutcome::exited && now >= child.deadline) {
        stop(child, ProcessOutcome::timed_out, now);
      }
      if (child.intent != ProcessOutcome::exited && !child.kill_sent && now >= child.kill_at) {
        kill_everything_of(child);
        child.kill_sent = true;
      }
      if (child.intent == ProcessOutcome::exited) consider(child.deadline);
      else if (!child.kill_sent) consider(child.kill_at);
    }
    if (!next) return -1;
    // Round up so the reaper does not wake a millisecond early and spin.
    return static_cast<int>(std::max<DurationMs>(0, elapsed_ms(now, *next) + 1));
  }

  static void stop(Child& child, ProcessOutcome why, Clock::time_point now) {
    child.intent = why;
    child.kill_at = now + std::chrono::milliseconds(child.kill_grace_ms);
    ::kill(-child.pid, SIGTERM);
    if (!child.cgroup_dir.empty()) signal_cgroup(child.cgroup_dir, SIGTERM);
  }

  void fail_to_start(ProcessId id, const std::string& detail, Clock::time_point started) {
    ProcessExit exit;
    exit.id = id;
    exit.outcome = ProcessOutcome::failed_to_start;
    exit.duration_ms = elapsed_ms(started, Clock::now());
    exit.detail = detail;
    {
      std::lock_guard lock(mutex);
      finished.push_back(std::move(exit));
    }
    notify(wakeup_fd);
  }

  // Reports (under the lock) why an id is not a live child.
  Status not_running(ProcessId id) const {
    const bool ended = id < next_id && id != 0;
    if (ended) {
      return fail(Errc::conflict, "process " + std::to_string(id) +
                                      " has already ended; poll_finished() reports how");
    }
    return fail(Errc::not_found, "no process with id " + std::to_string(id) +
                                     " was started by this runner");
  }
};

ProcessRunner::ProcessRunner(std::string group_record_file, std::string cgroup_root)
    : impl_(std::make_unique<Impl>(std::move(group_record_file), std::move(cgroup_root))) {}

ProcessRunner::~ProcessRunner() = default;

Result<ProcessId> ProcessRunner::start(const ProcessSpec& spec) {
  if (spec.program.empty() || spec.program.front() != '/') {
    return fail(Errc::invalid_argument,
                "program \"" + spec.program + "\" must be an absolute path: the agent runs "
                "programs by path, never through a shell or a PATH search");
  }
  if (spec.timeout_ms <= 0) {
    return fail(Errc::invalid_argument, "timeout_ms must be positive (got " +
                                            std::to_string(spec.timeout_ms) +
                                            "): every process needs a hard deadline");
  }
  if (spec.kill_grace_ms < 0) {
    return fail(Errc::invalid_argument, "kill_grace_ms must not be negative (got " +
                                            std::to_string(spec.kill_grace_ms) + ")");
  }
  if (spec.work_dir.empty()) {
    return fail(Errc::invalid_argument, "work_dir must be set: the output is captured there");
  }
  std::error_code ec;
  fs::create_directories(spec.work_dir, ec);
  if (ec || !fs::is_directory(spec.work_dir)) {
    return fail(Errc::io, "cannot use work dir " + spec.work_dir + ": " +
                              (ec ? ec.message() : std::string("not a directory")) +
                              "; check the path and its permissions");
  }

  ProcessId id = 0;
  {
    std::lock_guard lock(impl_->mutex);
    id = impl_->next_id++;
  }
  const Clock::time_point started = Clock::now();

  if (::access(spec.program.c_str(), X_OK) != 0) {
    impl_->fail_to_start(id, "cannot run " + spec.program + ": " + std::strerror(errno) +
                                 "; check the program path and that it is executable",
                         started);
    return id;
  }

  const std::string file_name =
      spec.output_file.empty()
          ? "kiln-output-" + std::to_string(::getpid()) + "-" + std::to_string(id) + ".log"
          : spec.output_file;
  const std::string output_path = (fs::path(spec.work_dir) / file_name).string();
  std::FILE* output = std::fopen(output_path.c_str(), "we");
  if (output == nullptr) {
    impl_->fail_to_start(id, "cannot create the output file " + output_path + ": " +
                                 std::strerror(errno) + "; check the work dir's permissions",
                         started);
    return id;
  }

  std::string cgroup_dir;
  int cgroup_procs_fd = -1;
  if (!impl_->cgroup_root.empty()) {
    cgroup_dir = (fs::path(impl_->cgroup_root) /
                  (spec.cgroup_name.empty() ? "process-" + std::to_string(id) : spec.cgroup_name))
                     .string();
    auto entered = make_child_cgroup(cgroup_dir);
    if (!entered) {
      std::fclose(output);
      impl_->fail_to_start(id, "cannot contain " + spec.program + ": " + entered.error().message +
                                   "; check job_containment and cgroup_root in the agent's config",
                           started);
      return id;
    }
    cgroup_procs_fd = *entered;
  }

  pid_t pid = -1;
  std::string spawn_error;
  try {
    bp::environment env = boost::this_process::environment();
    for (const auto& [name, value] : spec.env_extra) env[name] = value;
    const pid_t agent_pid = ::getpid();
    pid_t failed_pid = -1;
    std::error_code spawn_ec;
    bp::child child(
        bp::exe = spec.program, bp::args = spec.args, bp::start_dir = spec.work_dir, env,
        bp::std_in < bp::null, (bp::std_out & bp::std_err) > output,
        bp::extend::on_exec_setup = [agent_pid, cgroup_procs_fd](auto&) {
          prepare_child(agent_pid, cgroup_procs_fd);
        },
        bp::extend::on_error = [&failed_pid](auto& exec, const std::error_code&) {
          failed_pid = exec.pid;
        },
        spawn_ec);
    if (spawn_ec) {
      // The forked child exited after its exec failed; collect it so no zombie is left.
      if (failed_pid > 0) ::waitpid(failed_pid, nullptr, 0);
      spawn_error = spawn_ec.message();
    } else {
      pid = child.id();
      child.detach();  // the reaper owns the pid from here on
    }
  } catch (const std::exception& error) {
    spawn_error = error.what();
  }
  std::fclose(output);
  if (cgroup_procs_fd >= 0) ::close(cgroup_procs_fd);

  if (pid <= 0) {
    if (!cgroup_dir.empty()) (void)remove_cgroup(cgroup_dir, kCgroupEmptyWaitMs);
    impl_->fail_to_start(id, "cannot run " + spec.program + ": " + spawn_error +
                                 "; check that it is a valid executable for this host",
                         started);
    return id;
  }

  Child child;
  child.id = id;
  child.pid = pid;
  child.pidfd = open_pidfd(pid);
  child.program = spec.program;
  child.output_path = output_path;
  child.output_limit_bytes = spec.output_limit_bytes;
  child.timeout_ms = spec.timeout_ms;
  child.kill_grace_ms = spec.kill_grace_ms;
  // Not reaped yet (only the reaper reaps, and it does not know the pid), so this is the child.
  child.start_ticks = read_proc_stat(pid).value_or(ProcIdentity{}).start_ticks;
  child.cgroup_dir = cgroup_dir;
  child.started = started;
  child.deadline = started + std::chrono::milliseconds(spec.timeout_ms);
  {
    std::lock_guard lock(impl_->mutex);
    impl_->children.emplace(id, child);
    if (Status recorded = impl_->write_record(); !recorded) {
      // Unrecorded, it could outlive a crash of ours unseen: better not to run it at all.
      impl_->children.erase(id);
      (void)impl_->write_record();
      kill_everything_of(child);
      ::waitpid(pid, nullptr, 0);
      if (child.pidfd >= 0) ::close(child.pidfd);
      if (!cgroup_dir.empty()) (void)remove_cgroup(cgroup_dir, kCgroupEmptyWaitMs);
      return fail(Errc::io, recorded.error().message + "; " + spec.program + " was stopped");
    }
  }
  notify(impl_->control_fd);
  return id;
}

Status ProcessRunner::cancel(ProcessId id) {
  {
    std::lock_guard lock(impl_->mutex);
    const auto it = impl_->children.find(id);
    if (it == impl_->children.end()) return impl_->not_running(id);
    if (it->second.intent != ProcessOutcome::exited) return {};  // already being stopped
    Impl::stop(it->second, ProcessOutcome::cancelled, Clock::now());
  }
  notify(impl_->control_fd);
  return {};
}

Status ProcessRunner::signal(ProcessId id, int signo) {
  if (signo <= 0 || signo >= NSIG) {
    return fail(Errc::invalid_argument, "signal number " + std::to_string(signo) +
                                            " is not valid on this host");
  }
  // Under the lock the child cannot be reaped, so its pid still names it.
  std::lock_guard lock(impl_->mutex);
  const auto it = impl_->children.find(id);
  if (it == impl_->children.end()) return impl_->not_running(id);
  if (::kill(it->second.pid, signo) != 0) {
    return fail(Errc::io, "cannot send " + signal_name(signo) + " to process " +
                              std::to_string(id) + ": " + std::strerror(errno));
  }
  return {};
}

int ProcessRunner::wakeup_fd() const { return impl_->wakeup_fd; }

std::vector<ProcessExit> ProcessRunner::poll_finished() {
  // Drain first: an exit reported after this still leaves the fd readable.
  drain(impl_->wakeup_fd);
  std::vector<ProcessExit> out;
  std::lock_guard lock(impl_->mutex);
  out.swap(impl_->finished);
  return out;
}

std::size_t ProcessRunner::running() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->children.size() + impl_->being_reported + impl_->finished.size();
}

Result<std::vector<LeftoverGroup>> kill_recorded_groups(const std::string& group_record_file,
                                                        DurationMs wait_ms) {
  std::ifstream in(group_record_file);
  if (!in) {
    if (!fs::exists(group_record_file)) return std::vector<LeftoverGroup>{};
    return fail(Errc::io, "cannot read the process group record " + group_record_file +
                              "; check its permissions");
  }
  struct Recorded {
    LeftoverGroup group;
    std::uint64_t start_ticks = 0;
  };
  std::vector<Recorded> recorded;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    Recorded one;
    // Group 0 or 1 would make kill() signal far more than one group.
    if (!(fields >> one.group.process_group >> one.start_ticks) || one.group.process_group <= 1) {
      continue;
    }
    std::getline(fields >> std::ws, one.group.program);
    recorded.push_back(std::move(one));
  }
  in.close();

  const auto groups = live_processes_by_group();
  std::vector<std::int64_t> killed;
  for (Recorded& one : recorded) {
    const auto it = groups.find(one.group.process_group);
    if (it == groups.end()) continue;
    bool ours = true;
    for (const auto& [pid, stat] : it->second) {
      const bool recycled_leader = pid == one.group.process_group && stat.start_ticks != one.start_ticks;
      if (recycled_leader || stat.start_ticks < one.start_ticks) ours = false;
    }
    if (!ours) continue;
    // To the group, not pid by pid, so a member forking right now cannot slip through.
    ::kill(-static_cast<pid_t>(one.group.process_group), SIGKILL);
    one.group.processes_killed = it->second.size();
    killed.push_back(one.group.process_group);
  }
  const auto give_up = Clock::now() + std::chrono::milliseconds(wait_ms);
  for (;;) {
    const auto now_live = live_processes_by_group();
    std::vector<std::int64_t> alive;
    for (std::int64_t group : killed) {
      if (now_live.count(group) > 0) alive.push_back(group);
    }
    if (alive.empty()) break;
    if (Clock::now() >= give_up) {
      return fail(Errc::unavailable,
                  "process group " + std::to_string(alive.front()) + " left by a previous run "
                  "is still alive " + std::to_string(wait_ms) + " ms after SIGKILL (stuck in the "
                  "kernel?); find it with ps -eo pid,pgid,stat,args and reboot the host if it "
                  "cannot be killed");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(kFallbackPollMs));
  }
  std::error_code ec;
  fs::remove(group_record_file, ec);
  if (ec) {
    return fail(Errc::io, "cannot remove the process group record " + group_record_file + ": " +
                              ec.message() + "; check its directory's permissions");
  }
  std::vector<LeftoverGroup> out;
  for (Recorded& one : recorded) out.push_back(std::move(one.group));
  return out;
}

Result<ProcessExit> run_to_completion(const ProcessSpec& spec) {
  ProcessRunner runner;
  const Result<ProcessId> id = runner.start(spec);
  if (!id) return tl::unexpected(id.error());
  for (;;) {
    pollfd fd{runner.wakeup_fd(), POLLIN, 0};
    if (::poll(&fd, 1, -1) < 0 && errno != EINTR) {
      return fail(Errc::io, std::string("waiting for the process failed: ") +
                                std::strerror(errno));
    }
    std::vector<ProcessExit> exits = runner.poll_finished();
    if (!exits.empty()) return std::move(exits.front());
  }
}

}  // namespace kiln

// What kiln-bench-scale reads of the processes it runs: CPU time, a thread's waits for a CPU,
// quantiles of round trips, a coordinator's own time from its /metrics, lines of a log; and the
// client that times round trips at real-time priority.
#pragma once

#include <sched.h>
#include <sys/types.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "tools/bench/bench_scale_run.h"
#include "tools/bench/fake_fleet.h"

namespace kiln::bench {

// User and system CPU time of a process so far, from /proc/PID/stat (fields 14 and 15).
double cpu_ms(pid_t pid);
// CPU time of a server so far, the sum of its threads' time on a CPU (bench_scale_measures.cpp).
double server_cpu_ms(pid_t pid);
double percentile(std::vector<double> values, double p);
double median(std::vector<double> values);
// A histogram family's buckets in a /metrics text, by the value of its `type` label ("" for a
// family without one): (upper bound in seconds, cumulative count), in the order written, the +Inf
// bucket as infinity.
std::map<std::string, std::vector<std::pair<double, double>>> histogram_buckets(const std::string& metrics,
                                                                              std::string_view family);
// What a family observed of `type` between two readings of /metrics, as bucket bounds of its p50
// and p99.
OwnTime own_time(const std::string& before, const std::string& after, std::string_view family,
                 const std::string& type = "");

// A thread's time on a CPU and waiting for one, from the kernel's schedstat (milliseconds since it
// started); zeros where the kernel keeps no schedstat.
struct ThreadSchedule {
  double ran_ms = 0;
  double waited_ms = 0;
};

ThreadSchedule thread_schedule(pid_t pid, pid_t tid);


// The threads that time round trips: the calling one and the Requesters' ZeroMQ threads, never a
// fake agent's. On the load's CPUs a client that waits for a fake agent's turn on the CPU adds
// that wait to the reply it times: at 10,000 agents its own waits (p99 5-12 ms) were most of the
// echo's p99, so the ratios compared the load generator with itself. While a TimingClient lives,
// its threads run at real-time priority (SCHED_FIFO 1) where the bench may raise them, and it
// measures what they still wait for a CPU.
class TimingClient {
 public:
  explicit TimingClient(bool real_time) {
    tids_.push_back(static_cast<pid_t>(::gettid()));
    const std::string prefix = fmt::format("{}/", kRequesterThreadPrefix);
    std::error_code ec;
    for (const auto& task : std::filesystem::directory_iterator("/proc/self/task", ec)) {
      std::ifstream comm(task.path() / "comm");
      std::string name;
      if (std::getline(comm, name) && name.rfind(prefix, 0) == 0) tids_.push_back(std::stoi(task.path().filename().string()));
    }
    if (!real_time) return;
    sched_param param{};
    param.sched_priority = 1;
    std::size_t raised = 0;
    for (; raised < tids_.size(); ++raised) {
      if (::sched_setscheduler(tids_[raised], SCHED_FIFO | SCHED_RESET_ON_FORK, &param) != 0) break;
    }
    real_time_ = raised == tids_.size();
    if (!real_time_) {
      refusal_ = std::strerror(errno);
      restore(raised);
    }
  }
  ~TimingClient() {
    if (real_time_) restore(tids_.size());
  }
  TimingClient(const TimingClient&) = delete;
  TimingClient& operator=(const TimingClient&) = delete;

  bool real_time() const { return real_time_; }
  const std::string& refusal() const { return refusal_; }
  // What these threads have waited for a CPU since they started, in microseconds.
  double waited_us() const {
    double total_ms = 0;
    for (pid_t tid : tids_) total_ms += thread_schedule(::getpid(), tid).waited_ms;
    return total_ms * 1000;
  }

 private:
  void restore(std::size_t count) {
    const sched_param normal{};
    for (std::size_t i = 0; i < count; ++i) (void)::sched_setscheduler(tids_[i], SCHED_OTHER, &normal);
  }

  std::vector<pid_t> tids_;
  bool real_time_ = false;
  std::string refusal_;
};

Latency latency(const std::vector<double>& rtts_us);

std::size_t count_lines(const std::filesystem::path& log, const std::string& marker);

inline constexpr const char* kLostMarker = " lost: silent for ";

}  // namespace kiln::bench

#include "common/metrics/process_metrics.h"

#include <sys/resource.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <string>

#include "common/metrics/exposition.h"
#include "common/process/proc_stat.h"

namespace kiln::metrics {
namespace {

namespace fs = std::filesystem;

std::optional<double> boot_time_seconds() {
  std::ifstream in("/proc/stat");
  for (std::string key; in >> key;) {
    if (key == "btime") {
      double seconds = 0;
      if (in >> seconds) return seconds;
      return std::nullopt;
    }
    in.ignore(std::numeric_limits<std::streamsize>::max(), '\n');
  }
  return std::nullopt;
}

std::optional<double> open_files() {
  std::error_code ec;
  double count = 0;
  for (fs::directory_iterator it("/proc/self/fd", ec), end; !ec && it != end; it.increment(ec)) count += 1;
  if (ec) return std::nullopt;
  return count;
}

void add_gauge(Exposition& out, const char* name, const char* help, std::optional<double> value) {
  if (!value) return;
  out.gauge(name, help);
  out.sample({}, *value);
}

}  // namespace

std::string process_metrics_text() {
  Exposition out;
  const double ticks_per_second = static_cast<double>(::sysconf(_SC_CLK_TCK));
  const double page_bytes = static_cast<double>(::sysconf(_SC_PAGESIZE));
  const auto stat = ProcStat::read("self");
  if (stat && ticks_per_second > 0) {
    const auto user = stat->number(14);
    const auto system = stat->number(15);
    if (user && system) {
      out.counter("process_cpu_seconds_total", "CPU time this process has used, user and system, in seconds.");
      out.sample({}, (*user + *system) / ticks_per_second);
    }
  }
  add_gauge(out, "process_open_fds", "Files this process has open (its sockets and connections among them).",
            open_files());
  rlimit files{};
  add_gauge(out, "process_max_fds", "The most files this process may have open (its soft limit).",
            ::getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur != RLIM_INFINITY
                ? std::optional<double>(static_cast<double>(files.rlim_cur))
                : std::nullopt);
  if (stat) {
    const auto virtual_bytes = stat->number(23);
    const auto resident_pages = stat->number(24);
    add_gauge(out, "process_virtual_memory_bytes", "This process's virtual memory size, in bytes.", virtual_bytes);
    add_gauge(out, "process_resident_memory_bytes", "This process's memory resident in RAM, in bytes.",
              resident_pages && page_bytes > 0 ? std::optional<double>(*resident_pages * page_bytes) : std::nullopt);
    const auto started_ticks = stat->number(22);
    const auto boot = boot_time_seconds();
    add_gauge(out, "process_start_time_seconds", "When this process started, in Unix seconds.",
              started_ticks && boot && ticks_per_second > 0
                  ? std::optional<double>(*boot + *started_ticks / ticks_per_second)
                  : std::nullopt);
  }
  return out.text();
}

}  // namespace kiln::metrics

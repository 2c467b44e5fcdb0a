#include "tools/bench/bench_scale_measures.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "common/process/proc_stat.h"

namespace kiln::bench {

double cpu_ms(pid_t pid) {
  const auto stat = kiln::ProcStat::read(std::to_string(pid));
  if (!stat) return 0;
  return (stat->number(14).value_or(0) + stat->number(15).value_or(0)) * 1000.0 /
         static_cast<double>(::sysconf(_SC_CLK_TCK));
}

// CPU time of a server so far, in nanoseconds' resolution: the sum of its threads' time on a CPU
// (/proc/PID/task/TID/schedstat, first field). /proc/PID/stat counts in clock ticks (10 ms), which a
// small fleet's window does not fill: 50 agents cost a few milliseconds a second. The server's
// threads live as long as it does, so none of its time leaves with an exited thread. Without
// schedstat (a kernel built without it), the ticks.
double server_cpu_ms(pid_t pid) {
  std::error_code error;
  std::filesystem::directory_iterator tasks(fmt::format("/proc/{}/task", pid), error);
  double ns = 0;
  bool read_any = false;
  for (; !error && tasks != std::filesystem::directory_iterator(); tasks.increment(error)) {
    std::ifstream in(tasks->path() / "schedstat");
    double on_cpu_ns = 0;
    if (in >> on_cpu_ns) {
      ns += on_cpu_ns;
      read_any = true;
    }
  }
  return read_any ? ns / 1e6 : cpu_ms(pid);
}

double percentile(std::vector<double> values, double p) {
  if (values.empty()) return NAN;
  std::sort(values.begin(), values.end());
  const auto at = static_cast<std::size_t>(std::ceil(p * static_cast<double>(values.size()))) ;
  return values[std::clamp<std::size_t>(at, 1, values.size()) - 1];
}

double median(std::vector<double> values) { return percentile(std::move(values), 0.5); }

std::map<std::string, std::vector<std::pair<double, double>>> histogram_buckets(const std::string& metrics,
                                                                              std::string_view family) {
  const std::string bucket = fmt::format("{}_bucket{{", family);
  std::map<std::string, std::vector<std::pair<double, double>>> out;
  std::istringstream lines(metrics);
  for (std::string line; std::getline(lines, line);) {
    if (!line.starts_with(bucket)) continue;
    const auto label = [&](std::string_view name) -> std::optional<std::string> {
      const std::string key = fmt::format("{}=\"", name);
      const auto at = line.find(key);
      if (at == std::string::npos) return std::nullopt;
      const auto from = at + key.size();
      const auto to = line.find('"', from);
      if (to == std::string::npos) return std::nullopt;
      return line.substr(from, to - from);
    };
    const auto le = label("le");
    const auto close = line.rfind("} ");
    if (!le || close == std::string::npos) continue;
    const double bound = *le == "+Inf" ? INFINITY : std::strtod(le->c_str(), nullptr);
    out[label("type").value_or("")].emplace_back(bound, std::strtod(line.c_str() + close + 2, nullptr));
  }
  return out;
}

OwnTime own_time(const std::string& before, const std::string& after, std::string_view family,
                 const std::string& type) {
  OwnTime own;
  const auto was = histogram_buckets(before, family);
  const auto now = histogram_buckets(after, family);
  const auto buckets = now.find(type);
  if (buckets == now.end() || buckets->second.empty()) return own;
  const auto earlier = was.find(type);
  std::vector<std::pair<double, double>> delta = buckets->second;
  if (earlier != was.end() && earlier->second.size() == delta.size()) {
    for (std::size_t i = 0; i < delta.size(); ++i) delta[i].second -= earlier->second[i].second;
  }
  const double total = delta.back().second;
  own.requests = static_cast<std::uint64_t>(total);
  if (total <= 0) return own;
  const auto at_most_ms = [&](double q) {
    for (const auto& [bound, count] : delta) {
      if (count >= q * total) return bound * 1000;
    }
    return double{INFINITY};
  };
  own.p50_at_most_ms = at_most_ms(0.5);
  own.p99_at_most_ms = at_most_ms(0.99);
  return own;
}

ThreadSchedule thread_schedule(pid_t pid, pid_t tid) {
  std::ifstream in(fmt::format("/proc/{}/task/{}/schedstat", pid, tid));
  unsigned long long ran_ns = 0;
  unsigned long long waited_ns = 0;
  if (!(in >> ran_ns >> waited_ns)) return {};
  return {static_cast<double>(ran_ns) / 1e6, static_cast<double>(waited_ns) / 1e6};
}

Latency latency(const std::vector<double>& rtts_us) {
  return {percentile(rtts_us, 0.5) / 1000, percentile(rtts_us, 0.99) / 1000, percentile(rtts_us, 1) / 1000,
          rtts_us.size()};
}

std::size_t count_lines(const std::filesystem::path& log, const std::string& marker) {
  std::ifstream in(log);
  std::size_t n = 0;
  for (std::string line; std::getline(in, line);) n += line.find(marker) != std::string::npos ? 1 : 0;
  return n;
}

}  // namespace kiln::bench

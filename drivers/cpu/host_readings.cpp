#include "drivers/cpu/host_readings.h"

#include <charconv>
#include <fstream>
#include <sstream>
#include <string>
#include <system_error>

namespace kiln::drivers::cpu {

namespace fs = std::filesystem;

namespace {

std::optional<std::string> first_line(const fs::path& file) {
  std::ifstream in(file);
  std::string line;
  if (!in || !std::getline(in, line)) return std::nullopt;
  return line;
}

template <class T>
std::optional<T> number_in(const std::string& text) {
  T value{};
  const char* begin = text.data();
  while (begin < text.data() + text.size() && *begin == ' ') ++begin;
  const auto [end, ec] = std::from_chars(begin, text.data() + text.size(), value);
  if (ec != std::errc() || end == begin) return std::nullopt;
  return value;
}

template <class T>
std::optional<T> number_file(const fs::path& file) {
  auto line = first_line(file);
  return line ? number_in<T>(*line) : std::nullopt;
}

// A /proc/meminfo value ("MemAvailable:   123456 kB") in bytes.
std::optional<std::uint64_t> meminfo_bytes(const std::string& meminfo, const std::string& key) {
  std::istringstream in(meminfo);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key + ":", 0) != 0) continue;
    auto kib = number_in<std::uint64_t>(line.substr(key.size() + 1));
    if (kib) return *kib * 1024;
  }
  return std::nullopt;
}

// The entries of a folder whose names start with `prefix`; none when it cannot be listed.
template <class Visit>
void each_entry(const fs::path& dir, const std::string& prefix, Visit&& visit) {
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (it->path().filename().string().rfind(prefix, 0) == 0) visit(it->path());
  }
}

template <class T>
void add_to(std::optional<T>& total, std::optional<T> value) {
  if (value) total = total.value_or(T{}) + *value;
}

}  // namespace

std::optional<std::uint32_t> count_cpu_list(const std::string& list) {
  std::uint32_t count = 0;
  std::istringstream in(list);
  std::string range;
  while (std::getline(in, range, ',')) {
    const auto dash = range.find('-');
    auto first = number_in<std::uint32_t>(range.substr(0, dash));
    auto last = dash == std::string::npos ? first : number_in<std::uint32_t>(range.substr(dash + 1));
    if (!first || !last || *last < *first) return std::nullopt;
    count += *last - *first + 1;
  }
  if (count == 0) return std::nullopt;
  return count;
}

HostReadings read_host(const fs::path& root) {
  HostReadings out;
  if (auto online = first_line(root / "sys/devices/system/cpu/online")) out.cores_online = count_cpu_list(*online);
  if (auto present = first_line(root / "sys/devices/system/cpu/present")) out.cores_present = count_cpu_list(*present);
  if (std::ifstream meminfo(root / "proc/meminfo"); meminfo) {
    std::ostringstream text;
    text << meminfo.rdbuf();
    out.memory_total_bytes = meminfo_bytes(text.str(), "MemTotal");
    out.memory_available_bytes = meminfo_bytes(text.str(), "MemAvailable");
  }
  each_entry(root / "sys/class/thermal", "thermal_zone", [&](const fs::path& zone) {
    // Millidegrees Celsius; a zone whose sensor cannot be read now is skipped.
    if (auto milli = number_file<std::int64_t>(zone / "temp")) {
      const double celsius = static_cast<double>(*milli) / 1000.0;
      if (!out.max_temperature_c || celsius > *out.max_temperature_c) out.max_temperature_c = celsius;
    }
  });
  std::optional<double> clock_sum_khz;
  int clocks = 0;
  each_entry(root / "sys/devices/system/cpu", "cpu", [&](const fs::path& cpu) {
    const std::string name = cpu.filename().string();
    if (name.size() <= 3 || !number_in<std::uint32_t>(name.substr(3))) return;  // cpufreq, cpuidle
    add_to(out.throttle_count, number_file<std::uint64_t>(cpu / "thermal_throttle/core_throttle_count"));
    add_to(out.throttle_count, number_file<std::uint64_t>(cpu / "thermal_throttle/package_throttle_count"));
    if (auto khz = number_file<double>(cpu / "cpufreq/scaling_cur_freq")) {
      add_to(clock_sum_khz, khz);
      ++clocks;
    }
  });
  if (clock_sum_khz) out.mean_clock_mhz = *clock_sum_khz / clocks / 1000.0;
  return out;
}

}  // namespace kiln::drivers::cpu

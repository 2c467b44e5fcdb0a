// What a CPU node reads of its host's health from /proc and /sys, below a root folder (tests
// pass a fake one): cores online, memory, thermal zones and CPU throttle counts. A file that is
// absent or unreadable makes its reading unknown (nullopt), never a failure: /sys differs from
// host to host, and a VM has no thermal zones at all.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

namespace kiln::drivers::cpu {

struct HostReadings {
  std::optional<std::uint32_t> cores_online;      // /sys/devices/system/cpu/online
  std::optional<std::uint32_t> cores_present;     // /sys/devices/system/cpu/present
  std::optional<std::uint64_t> memory_total_bytes;      // /proc/meminfo MemTotal
  std::optional<std::uint64_t> memory_available_bytes;  // /proc/meminfo MemAvailable
  std::optional<double> max_temperature_c;  // the hottest /sys/class/thermal/thermal_zone*/temp
  // Sum over CPUs of thermal_throttle/core_throttle_count and package_throttle_count.
  std::optional<std::uint64_t> throttle_count;
  std::optional<double> mean_clock_mhz;  // cpufreq/scaling_cur_freq over the CPUs that have it
};

HostReadings read_host(const std::filesystem::path& root);

// "0-3,6,8-9" -> 7; nullopt when the list is malformed.
std::optional<std::uint32_t> count_cpu_list(const std::string& list);

}  // namespace kiln::drivers::cpu

// libkiln_cpu_driver.so: the CPU reference backend. One device, the host, that runs the chip's
// kernels with the chip's numerics (common/numerics/kernels.h) and reports the host's health as
// its telemetry (drivers/cpu/host_readings.h): temperature, clock, memory and throttling where
// /sys has them. No firmware, resets, bindings or self-tests (E_UNSUPPORTED, and declared so by
// capabilities), no performance or noise model, no faults. Every entry point catches everything,
// so no exception crosses into the caller.
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>

#include "drivers/backend_support.h"
#include "drivers/cpu/host_readings.h"
#include "drivers/kiln_driver.h"

struct kiln_driver {
  kiln::numerics::KernelContext kernels;
  std::filesystem::path host_root;  // "/" but in tests
  std::string last_error;
  // The host's throttle count at the previous telemetry reading: throttled means it grew since.
  std::optional<std::uint64_t> last_throttle_count;
};

namespace {

using kiln::Errc;
using kiln::Status;
using kiln::drivers::backend::code_for;
using kiln::drivers::backend::copy_error;
using kiln::drivers::backend::copy_fixed;
using kiln::drivers::backend::null_argument;

constexpr const char* kDriverVersion = "kiln-cpu 0.1.0";
constexpr std::uint32_t kDeviceCount = 1;  // the host

template <class Body>
kiln_driver_status guarded(kiln_driver* handle, Body&& body) noexcept {
  return kiln::drivers::backend::guarded(handle, "CPU driver", std::forward<Body>(body));
}

Status check_chip(std::uint32_t chip) {
  if (chip < kDeviceCount) return {};
  return kiln::fail(Errc::not_found, "chip " + std::to_string(chip) +
                                         " does not exist: the CPU backend has one device, chip 0");
}

// What the CPU backend does not do: no chip state to report or change.
kiln_driver_status unsupported(kiln_driver* handle, const char* operation) noexcept {
  if (handle == nullptr) return KILN_DRIVER_E_INVALID_ARGUMENT;
  try {
    handle->last_error = std::string(operation) +
                         " is not supported by the CPU backend, which runs kernels and reads the host's health only "
                         "(it declares no firmware, resets, bindings or self-tests); use a chip's backend for it";
  } catch (...) {
  }
  return KILN_DRIVER_E_UNSUPPORTED;
}

kiln_driver_status cpu_open(const char* options, kiln_driver** out_handle, char* error,
                            std::uint32_t error_size) {
  try {
    if (out_handle == nullptr || options == nullptr) {
      copy_error(error, error_size, "options and out_handle must not be NULL");
      return KILN_DRIVER_E_INVALID_ARGUMENT;
    }
    *out_handle = nullptr;
    auto parsed = kiln::drivers::backend::take_kernel_options(options);
    if (!parsed) {
      copy_error(error, error_size, parsed.error().message);
      return code_for(parsed.error().code);
    }
    std::filesystem::path host_root = "/";
    if (!parsed->rest.empty()) {
      constexpr std::string_view kHostRoot = "host_root=";
      if (parsed->rest.rfind(kHostRoot, 0) != 0 || parsed->rest.find(';') != std::string::npos ||
          parsed->rest.size() == kHostRoot.size()) {
        copy_error(error, error_size, "the CPU backend takes only broken_kernels=NAME,... and host_root=PATH in its "
                                      "options, not '" + parsed->rest + "'; remove the other keys");
        return KILN_DRIVER_E_CONFIG;
      }
      host_root = parsed->rest.substr(kHostRoot.size());
    }
    *out_handle = new kiln_driver{{false, std::move(parsed->broken_kernels)}, std::move(host_root), {}, {}};
    return KILN_DRIVER_OK;
  } catch (...) {
    copy_error(error, error_size, "internal error opening the CPU driver");
    return KILN_DRIVER_E_INTERNAL;
  }
}

void cpu_close(kiln_driver* handle) { delete handle; }

const char* cpu_last_error(const kiln_driver* handle) {
  return handle == nullptr ? "handle is NULL" : handle->last_error.c_str();
}

kiln_driver_status cpu_driver_version(kiln_driver* handle, char* out, std::uint32_t out_size) {
  return guarded(handle, [&](kiln_driver&) { return kiln::drivers::backend::copy_version(kDriverVersion, out, out_size); });
}

kiln_driver_status cpu_chip_count(kiln_driver* handle, std::uint32_t* out_count) {
  return guarded(handle, [&](kiln_driver&) -> Status {
    if (out_count == nullptr) return null_argument("out_count");
    *out_count = kDeviceCount;
    return {};
  });
}

kiln_driver_status cpu_chip_identity(kiln_driver* handle, std::uint32_t chip, kiln_chip_identity* out) {
  return guarded(handle, [&](kiln_driver& h) -> Status {
    if (out == nullptr) return null_argument("out");
    if (auto ok = check_chip(chip); !ok) return ok;
    *out = kiln_chip_identity{};
    out->index = chip;
    out->numa_node = -1;
    copy_fixed(out->serial, "cpu-host");
    copy_fixed(out->hardware_revision, "cpu");
    out->memory_bytes = kiln::drivers::cpu::read_host(h.host_root).memory_total_bytes.value_or(0);
    return {};
  });
}

// Which telemetry fields the host has now: a file absent makes its field unknown.
std::uint32_t telemetry_kinds(const kiln::drivers::cpu::HostReadings& host) {
  return (host.memory_total_bytes && host.memory_available_bytes ? KILN_TELEMETRY_MEMORY : 0u) |
         (host.max_temperature_c ? KILN_TELEMETRY_TEMPERATURE : 0u) | (host.mean_clock_mhz ? KILN_TELEMETRY_CLOCK : 0u) |
         (host.throttle_count ? KILN_TELEMETRY_THROTTLE : 0u);
}

kiln_driver_status cpu_chip_telemetry(kiln_driver* handle, std::uint32_t chip, kiln_chip_telemetry* out) {
  return guarded(handle, [&](kiln_driver& h) -> Status {
    if (out == nullptr) return null_argument("out");
    if (auto ok = check_chip(chip); !ok) return ok;
    const auto host = kiln::drivers::cpu::read_host(h.host_root);
    *out = kiln_chip_telemetry{};
    out->temperature_c = host.max_temperature_c.value_or(0);
    out->clock_mhz = host.mean_clock_mhz.value_or(0);
    if (host.memory_total_bytes && host.memory_available_bytes && *host.memory_total_bytes >= *host.memory_available_bytes) {
      out->memory_used_bytes = *host.memory_total_bytes - *host.memory_available_bytes;
    }
    out->link_up = 1;  // no chip-to-chip links to lose
    out->throttled = host.throttle_count && h.last_throttle_count && *host.throttle_count > *h.last_throttle_count;
    h.last_throttle_count = host.throttle_count;
    return {};
  });
}

kiln_driver_status cpu_capabilities(kiln_driver* handle, kiln_driver_capabilities* out) {
  return guarded(handle, [&](kiln_driver& h) -> Status {
    if (out == nullptr) return null_argument("out");
    *out = kiln_driver_capabilities{};
    out->operations = 0;  // no firmware, installs, resets, bindings or self-tests
    out->telemetry_kinds = telemetry_kinds(kiln::drivers::cpu::read_host(h.host_root));
    return {};
  });
}
kiln_driver_status cpu_chip_activity(kiln_driver* handle, std::uint32_t, kiln_chip_activity*) {
  return unsupported(handle, "chip_activity");
}
kiln_driver_status cpu_reset_chip(kiln_driver* handle, std::uint32_t) {
  return unsupported(handle, "reset_chip");
}
kiln_driver_status cpu_firmware_slots(kiln_driver* handle, std::uint32_t, kiln_firmware_slots*) {
  return unsupported(handle, "firmware_slots");
}
kiln_driver_status cpu_flash_standby(kiln_driver* handle, std::uint32_t, const char*, const char*) {
  return unsupported(handle, "flash_standby");
}
kiln_driver_status cpu_activate_standby(kiln_driver* handle, std::uint32_t) {
  return unsupported(handle, "activate_standby");
}
kiln_driver_status cpu_rollback_firmware(kiln_driver* handle, std::uint32_t) {
  return unsupported(handle, "rollback_firmware");
}
kiln_driver_status cpu_bind_workload(kiln_driver* handle, std::int64_t, const std::uint32_t*, std::uint32_t) {
  return unsupported(handle, "bind_workload");
}
kiln_driver_status cpu_unbind_workload(kiln_driver* handle, std::int64_t) {
  return unsupported(handle, "unbind_workload");
}
kiln_driver_status cpu_chip_binding(kiln_driver* handle, std::uint32_t, std::int64_t*) {
  return unsupported(handle, "chip_binding");
}
kiln_driver_status cpu_run_self_test(kiln_driver* handle, std::uint32_t, std::uint32_t, std::uint32_t,
                                     kiln_self_test_result*) {
  return unsupported(handle, "run_self_test");
}

kiln_driver_status cpu_run_kernel(kiln_driver* handle, std::uint32_t chip, kiln_kernel_launch* launch) {
  return guarded(handle, [&](kiln_driver& h) -> Status {
    if (launch == nullptr) return null_argument("launch");
    if (auto ok = check_chip(chip); !ok) return ok;
    return kiln::drivers::backend::run_launch(h.kernels, *launch);
  });
}

kiln_driver_status cpu_backend_kind(kiln_driver* handle, std::uint32_t* out_kind) {
  return guarded(handle, [&](kiln_driver&) -> Status {
    if (out_kind == nullptr) return null_argument("out_kind");
    *out_kind = KILN_BACKEND_CPU;
    return {};
  });
}

const kiln_driver_api kCpuApi = {
    KILN_DRIVER_ABI_VERSION, sizeof(kiln_driver_api), cpu_open, cpu_close, cpu_last_error,
    cpu_driver_version, cpu_chip_count, cpu_chip_identity, cpu_chip_telemetry, cpu_reset_chip,
    cpu_firmware_slots, cpu_flash_standby, cpu_activate_standby, cpu_rollback_firmware,
    cpu_bind_workload, cpu_unbind_workload, cpu_chip_binding, cpu_run_self_test, cpu_run_kernel, cpu_chip_activity,
    cpu_backend_kind, cpu_capabilities,
};

}  // namespace

extern "C" {

KILN_DRIVER_EXPORT const kiln_driver_api* kiln_driver_entry(std::uint32_t requested_abi_version) {
  return requested_abi_version == KILN_DRIVER_ABI_VERSION ? &kCpuApi : nullptr;
}

}  // extern "C"

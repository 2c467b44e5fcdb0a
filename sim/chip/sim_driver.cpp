// libkiln_sim_driver.so: the simulated chip behind the real driver ABI. Every entry point
// catches everything, so no exception crosses into the caller.
#include <cstring>
#include <exception>
#include <string>
#include <utility>

#include "drivers/backend_support.h"
#include "drivers/kiln_driver.h"
#include "sim/chip/kiln_sim_driver.h"
#include "sim/chip/sim_node.h"

struct kiln_driver {
  kiln::sim::SimNode node;
  kiln::numerics::KernelContext kernels;  // the chip's numerics; broken_kernels from the options
  std::string last_error;
};

namespace {

using kiln::Errc;
using kiln::Status;

using kiln::drivers::backend::code_for;
using kiln::drivers::backend::copy_error;
using kiln::drivers::backend::copy_fixed;
using kiln::drivers::backend::null_argument;

template <class Body>
kiln_driver_status guarded(kiln_driver* handle, Body&& body) noexcept {
  return kiln::drivers::backend::guarded(handle, "sim driver", std::forward<Body>(body));
}

kiln_driver_status sim_open(const char* options, kiln_driver** out_handle, char* error,
                            std::uint32_t error_size) {
  try {
    if (out_handle == nullptr || options == nullptr) {
      copy_error(error, error_size, "options and out_handle must not be NULL");
      return KILN_DRIVER_E_INVALID_ARGUMENT;
    }
    *out_handle = nullptr;
    auto kernel_options = kiln::drivers::backend::take_kernel_options(options);
    if (!kernel_options) {
      copy_error(error, error_size, kernel_options.error().message);
      return code_for(kernel_options.error().code);
    }
    auto node = kiln::sim::SimNode::open(kernel_options->rest);
    if (!node) {
      copy_error(error, error_size, node.error().message);
      return code_for(node.error().code);
    }
    *out_handle = new kiln_driver{std::move(*node), {false, kernel_options->broken_kernels}, {}};
    return KILN_DRIVER_OK;
  } catch (const std::exception& e) {
    copy_error(error, error_size, std::string("internal error opening the sim driver: ") + e.what());
    return KILN_DRIVER_E_INTERNAL;
  } catch (...) {
    return KILN_DRIVER_E_INTERNAL;
  }
}

void sim_close(kiln_driver* handle) { delete handle; }

const char* sim_last_error(const kiln_driver* handle) {
  return handle == nullptr ? "handle is NULL" : handle->last_error.c_str();
}

kiln_driver_status sim_driver_version(kiln_driver* handle, char* out, std::uint32_t out_size) {
  return guarded(handle, [&](kiln_driver& h) -> Status {
    auto version = h.node.driver_version();
    if (!version) return tl::unexpected(version.error());
    return kiln::drivers::backend::copy_version(*version, out, out_size);
  });
}

kiln_driver_status sim_chip_count(kiln_driver* handle, std::uint32_t* out_count) {
  return guarded(handle, [&](kiln_driver& h) -> Status {
    if (out_count == nullptr) return null_argument("out_count");
    *out_count = h.node.chip_count();
    return {};
  });
}

kiln_driver_status sim_chip_identity(kiln_driver* handle, std::uint32_t chip,
                                     kiln_chip_identity* out) {
  return guarded(handle, [&](kiln_driver& h) -> Status {
    if (out == nullptr) return null_argument("out");
    auto id = h.node.identity(chip);
    if (!id) return tl::unexpected(id.error());
    *out = kiln_chip_identity{};
    out->index = id->index;
    out->numa_node = id->numa_node;
    out->memory_bytes = id->memory_bytes;
    copy_fixed(out->serial, id->serial);
    copy_fixed(out->hardware_revision, std::string(kiln::sim::to_string(id->revision)));
    copy_fixed(out->pci_bus_id, id->pci_bus_id);
    return {};
  });
}

kiln_driver_status sim_chip_telemetry(kiln_driver* handle, std::uint32_t chip,
                                      kiln_chip_telemetry* out) {
  return guarded(handle, [&](kiln_driver& h) -> Status {
    if (out == nullptr) return null_argument("out");
    auto t = h.node.telemetry(chip);
    if (!t) return tl::unexpected(t.error());
    *out = kiln_chip_telemetry{t->temperature_c,   t->power_w,         t->clock_mhz,
                               t->memory_used_bytes, t->ecc_corrected, t->ecc_uncorrected,
                               t->link_up ? 1u : 0u, t->throttled ? 1u : 0u};
    return {};
  });
}

kiln_driver_status sim_chip_activity(kiln_driver* handle, std::uint32_t chip, kiln_chip_activity* out) {
  return guarded(handle, [&](kiln_driver& h) -> Status {
    if (out == nullptr) return null_argument("out");
    auto t = h.node.telemetry(chip);
    if (!t) return tl::unexpected(t.error());
    // The sim's only reason to reduce clocks is heat.
    *out = kiln_chip_activity{t->utilization, t->throttled ? KILN_THROTTLE_THERMAL : 0u, 0u};
    return {};
  });
}

kiln_driver_status sim_reset_chip(kiln_driver* handle, std::uint32_t chip) {
  return guarded(handle, [&](kiln_driver& h) { return h.node.reset(chip); });
}

kiln_driver_status sim_firmware_slots(kiln_driver* handle, std::uint32_t chip,
                                      kiln_firmware_slots* out) {
  return guarded(handle, [&](kiln_driver& h) -> Status {
    if (out == nullptr) return null_argument("out");
    auto c = h.node.firmware(chip);
    if (!c) return tl::unexpected(c.error());
    auto slot_code = [](kiln::sim::Slot s) {
      return s == kiln::sim::Slot::a ? std::uint32_t{KILN_FIRMWARE_SLOT_A}
                                     : std::uint32_t{KILN_FIRMWARE_SLOT_B};
    };
    *out = kiln_firmware_slots{};
    out->active_slot = slot_code(c->active);
    out->previous_slot = c->previous ? slot_code(*c->previous) : KILN_FIRMWARE_SLOT_NONE;
    for (int i = 0; i < 2; ++i) {
      out->slot_valid[i] = c->slots[i].valid ? 1u : 0u;
      copy_fixed(out->slot_version[i], c->slots[i].version);
    }
    return {};
  });
}

kiln_driver_status sim_flash_standby(kiln_driver* handle, std::uint32_t chip,
                                     const char* image_path, const char* version) {
  return guarded(handle, [&](kiln_driver& h) -> Status {
    if (image_path == nullptr) return null_argument("image_path");
    if (version == nullptr) return null_argument("version");
    return h.node.flash_standby(chip, image_path, version);
  });
}

kiln_driver_status sim_activate_standby(kiln_driver* handle, std::uint32_t chip) {
  return guarded(handle, [&](kiln_driver& h) { return h.node.activate_standby(chip); });
}

kiln_driver_status sim_rollback_firmware(kiln_driver* handle, std::uint32_t chip) {
  return guarded(handle, [&](kiln_driver& h) { return h.node.rollback_firmware(chip); });
}

kiln_driver_status sim_bind_workload(kiln_driver* handle, std::int64_t pid,
                                     const std::uint32_t* chips, std::uint32_t chip_count) {
  return guarded(handle, [&](kiln_driver& h) -> Status {
    if (chips == nullptr && chip_count > 0) return null_argument("chips");
    return h.node.bind(pid, std::vector<std::uint32_t>(chips, chips + chip_count));
  });
}

kiln_driver_status sim_unbind_workload(kiln_driver* handle, std::int64_t pid) {
  return guarded(handle, [&](kiln_driver& h) { return h.node.unbind(pid); });
}

kiln_driver_status sim_chip_binding(kiln_driver* handle, std::uint32_t chip,
                                    std::int64_t* out_pid) {
  return guarded(handle, [&](kiln_driver& h) -> Status {
    if (out_pid == nullptr) return null_argument("out_pid");
    auto pid = h.node.binding(chip);
    if (!pid) return tl::unexpected(pid.error());
    *out_pid = *pid;
    return {};
  });
}

kiln_driver_status sim_run_self_test(kiln_driver* handle, std::uint32_t chip, std::uint32_t kind,
                                     std::uint32_t level, kiln_self_test_result* out) {
  return guarded(handle, [&](kiln_driver& h) -> Status {
    if (out == nullptr) return null_argument("out");
    if (kind < KILN_SELF_TEST_MEMORY || kind > KILN_SELF_TEST_COMPUTE) {
      return kiln::fail(Errc::invalid_argument,
                        "self-test kind " + std::to_string(kind) +
                            " is unknown; use 1 (memory), 2 (interconnect) or 3 (compute)");
    }
    auto t = h.node.self_test(chip, static_cast<kiln::sim::SelfTestKind>(kind), level);
    if (!t) return tl::unexpected(t.error());
    *out = kiln_self_test_result{};
    out->kind = kind;
    out->level = t->level;
    out->passed = t->passed ? 1u : 0u;
    out->errors_found = t->errors_found;
    out->duration_s = t->duration_s;
    out->memory_bandwidth_gb_per_s = t->memory_bandwidth_gb_per_s;
    out->interconnect_bandwidth_gb_per_s = t->interconnect_bandwidth_gb_per_s;
    out->compute_tflop_per_s = t->compute_tflop_per_s;
    copy_fixed(out->detail, t->detail);
    return {};
  });
}

// The chip's kernels with its numerics; a hung chip or one without healthy firmware fails the
// launch as real hardware would, other faults leave the numbers alone.
kiln_driver_status sim_run_kernel(kiln_driver* handle, std::uint32_t chip, kiln_kernel_launch* launch) {
  return guarded(handle, [&](kiln_driver& h) -> Status {
    if (launch == nullptr) return null_argument("launch");
    auto conditions = h.node.conditions(chip);
    if (!conditions) return tl::unexpected(conditions.error());
    if (conditions->hung || !conditions->firmware_healthy) {
      return kiln::fail(Errc::device, "chip " + std::to_string(chip) + " cannot run kernels (" +
                                          (conditions->hung ? "hung" : "bad firmware") +
                                          "); run kiln-agent diag on it or use another chip");
    }
    return kiln::drivers::backend::run_launch(h.kernels, *launch);
  });
}

kiln_driver_status sim_backend_kind(kiln_driver* handle, std::uint32_t* out_kind) {
  return guarded(handle, [&](kiln_driver&) -> Status {
    if (out_kind == nullptr) return null_argument("out_kind");
    *out_kind = KILN_BACKEND_SIM;
    return {};
  });
}

const kiln_driver_api kSimApi = {
    KILN_DRIVER_ABI_VERSION, sizeof(kiln_driver_api), sim_open, sim_close, sim_last_error,
    sim_driver_version, sim_chip_count, sim_chip_identity, sim_chip_telemetry, sim_reset_chip,
    sim_firmware_slots, sim_flash_standby, sim_activate_standby, sim_rollback_firmware,
    sim_bind_workload, sim_unbind_workload, sim_chip_binding, sim_run_self_test, sim_run_kernel, sim_chip_activity,
    sim_backend_kind,
    nullptr,  // capabilities: the simulated chip does everything the ABI offers
};

// The run-time fault functions work on the state directory alone, like kiln-sim-chip.
template <class Body>
kiln_driver_status with_node(const char* state_dir, char* error, std::uint32_t error_size,
                             Body&& body) noexcept {
  try {
    if (state_dir == nullptr || *state_dir == '\0') {
      copy_error(error, error_size, "state_dir is empty; give the sim node's state directory");
      return KILN_DRIVER_E_INVALID_ARGUMENT;
    }
    auto node = kiln::sim::SimNode::attach(state_dir);
    if (!node) {
      copy_error(error, error_size, node.error().message);
      return KILN_DRIVER_E_IO;  // no node in that folder, or its state is unreadable
    }
    Status status = body(*node);
    if (status) return KILN_DRIVER_OK;
    copy_error(error, error_size, status.error().message);
    return code_for(status.error().code);
  } catch (const std::exception& e) {
    copy_error(error, error_size, std::string("internal error in the sim driver: ") + e.what());
    return KILN_DRIVER_E_INTERNAL;
  } catch (...) {
    return KILN_DRIVER_E_INTERNAL;
  }
}

}  // namespace

extern "C" {

KILN_DRIVER_EXPORT const kiln_driver_api* kiln_driver_entry(std::uint32_t requested_abi_version) {
  return requested_abi_version == KILN_DRIVER_ABI_VERSION ? &kSimApi : nullptr;
}

KILN_DRIVER_EXPORT kiln_driver_status kiln_sim_inject_fault(const char* state_dir,
                                                            std::uint32_t chip, const char* kind,
                                                            double factor, const char* mode,
                                                            char* error,
                                                            std::uint32_t error_size) {
  return with_node(state_dir, error, error_size, [&](kiln::sim::SimNode& node) -> Status {
    if (kind == nullptr) return null_argument("kind");
    auto fault_kind = kiln::sim::parse_fault_kind(kind);
    if (!fault_kind) return tl::unexpected(fault_kind.error());
    auto flash_mode = kiln::sim::parse_flash_fail_mode(mode == nullptr ? "" : mode);
    if (!flash_mode) return tl::unexpected(flash_mode.error());
    return node.inject_fault(chip, *fault_kind, factor, *flash_mode);
  });
}

KILN_DRIVER_EXPORT kiln_driver_status kiln_sim_clear_faults(const char* state_dir,
                                                            std::int32_t chip, char* error,
                                                            std::uint32_t error_size) {
  return with_node(state_dir, error, error_size, [&](kiln::sim::SimNode& node) {
    return node.clear_faults(chip < 0 ? std::nullopt
                                      : std::optional<std::uint32_t>(static_cast<std::uint32_t>(chip)));
  });
}

}  // extern "C"

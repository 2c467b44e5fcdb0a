// The C++ face of a chip driver backend: loads a library implementing drivers/kiln_driver.h
// with dlopen, checks its ABI version, and turns every call into a kiln::Result.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/enum_names.h"
#include "common/error.h"
#include "common/numerics/kernels.h"

struct kiln_driver_api;
struct kiln_driver;

namespace kiln::drivers {

struct ChipIdentity {
  std::uint32_t index = 0;
  std::string serial;
  std::string hardware_revision;
  std::string pci_bus_id;
  std::int32_t numa_node = -1;  // -1 when unknown
  std::uint64_t memory_bytes = 0;
};

struct ChipTelemetry {
  double temperature_c = 0;
  double power_w = 0;
  double clock_mhz = 0;
  std::uint64_t memory_used_bytes = 0;
  std::uint64_t ecc_corrected = 0;
  std::uint64_t ecc_uncorrected = 0;
  bool link_up = false;
  bool throttled = false;
};

// How busy a chip is and why its clocks are reduced (drivers/kiln_driver.h chip_activity).
struct ChipActivity {
  double utilization = 0;  // 0 to 1
  bool thermal_throttle = false;
  bool power_throttle = false;
};

// What a backend can do and which telemetry fields it reads (drivers/kiln_driver.h
// capabilities). A backend built without capabilities can do everything.
struct DriverCapabilities {
  bool firmware_slots = true;
  bool firmware_install = true;
  bool reset = true;
  bool bindings = true;
  bool self_tests = true;
  bool temperature = true;
  bool power = true;
  bool clock = true;
  bool memory = true;
  bool ecc = true;
  bool link = true;
  bool throttle = true;
};

// KILN_CAPABILITY_* and KILN_TELEMETRY_* bits, each way.
DriverCapabilities capabilities_from_bits(std::uint32_t operations, std::uint32_t telemetry_kinds);
std::uint32_t operation_bits(const DriverCapabilities& capabilities);
std::uint32_t telemetry_bits(const DriverCapabilities& capabilities);

enum class FirmwareSlot { a, b };

std::string_view to_string(FirmwareSlot slot);

struct FirmwareSlots {
  FirmwareSlot active = FirmwareSlot::a;
  std::optional<FirmwareSlot> previous;  // the rollback target, if any
  std::string version_a;
  std::string version_b;
  bool valid_a = false;
  bool valid_b = false;

  FirmwareSlot standby() const;
  const std::string& version(FirmwareSlot slot) const;
  bool valid(FirmwareSlot slot) const;
  const std::string& active_version() const { return version(active); }
};

enum class SelfTestKind { memory = 1, interconnect = 2, compute = 3 };
constexpr EnumTable<SelfTestKind, 3> enum_names(SelfTestKind) {
  return {{
      {SelfTestKind::memory, "memory"},
      {SelfTestKind::interconnect, "interconnect"},
      {SelfTestKind::compute, "compute"},
  }};
}

inline std::string_view to_string(SelfTestKind value) { return enum_name(value); }

struct SelfTestResult {
  SelfTestKind kind = SelfTestKind::memory;
  std::uint32_t level = 1;
  bool passed = false;  // no functional error found; figures are for the caller to judge
  std::uint64_t errors_found = 0;
  double duration_s = 0;
  double memory_bandwidth_gb_per_s = 0;
  double interconnect_bandwidth_gb_per_s = 0;
  double compute_tflop_per_s = 0;
  std::string detail;
};

// One opened backend. Not thread-safe: use one Driver per thread.
class Driver {
 public:
  // Loads the library, checks it implements KILN_DRIVER_ABI_VERSION and opens it with the
  // backend-specific options string (for the sim: docs/driver-abi.md).
  static Result<std::unique_ptr<Driver>> load(const std::string& library_path,
                                              const std::string& options);

  Driver(const Driver&) = delete;
  Driver& operator=(const Driver&) = delete;
  ~Driver();

  const std::string& library_path() const { return library_path_; }

  Result<std::string> driver_version();
  Result<std::uint32_t> chip_count();
  Result<ChipIdentity> chip_identity(std::uint32_t chip);
  Result<ChipTelemetry> chip_telemetry(std::uint32_t chip);
  // A backend built without chip_activity gives an invalid_argument error naming
  // KILN_DRIVER_E_UNSUPPORTED.
  Result<ChipActivity> chip_activity(std::uint32_t chip);
  // What the backend declares it drives: "sim", "cpu" or "silicon"; an invalid_argument error
  // naming KILN_DRIVER_E_UNSUPPORTED from a backend built without backend_kind, and a device
  // error for a kind the ABI does not define.
  Result<std::string> backend_kind();
  // What the backend declares it can do; everything from a backend built without capabilities.
  Result<DriverCapabilities> capabilities();
  Status reset_chip(std::uint32_t chip);

  Result<FirmwareSlots> firmware_slots(std::uint32_t chip);
  Status flash_standby(std::uint32_t chip, const std::string& image_path,
                       const std::string& version);
  Status activate_standby(std::uint32_t chip);
  Status rollback_firmware(std::uint32_t chip);

  Status bind_workload(std::int64_t pid, const std::vector<std::uint32_t>& chips);
  Status unbind_workload(std::int64_t pid);
  // The live process bound to the chip, or nullopt.
  Result<std::optional<std::int64_t>> chip_binding(std::uint32_t chip);

  Result<SelfTestResult> run_self_test(std::uint32_t chip, SelfTestKind kind,
                                       std::uint32_t level);

  // Runs one kernel on the chip with its numerics (drivers/kiln_driver.h run_kernel); a backend
  // built without run_kernel gives an invalid_argument error naming KILN_DRIVER_E_UNSUPPORTED.
  Result<numerics::Matrix> run_kernel(std::uint32_t chip, const numerics::KernelLaunch& launch);

 private:
  Driver(std::string library_path, void* library, const kiln_driver_api* api,
         kiln_driver* handle);

  // Turns a backend status into an Error naming the library, the operation and the chip.
  Status check(std::int32_t status, std::string_view operation) const;

  std::string library_path_;
  void* library_;
  const kiln_driver_api* api_;
  kiln_driver* handle_;
};

}  // namespace kiln::drivers

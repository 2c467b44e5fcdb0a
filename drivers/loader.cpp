#include "drivers/loader.h"

#include <dlfcn.h>

#include <array>
#include <cstddef>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "drivers/kiln_driver.h"

namespace kiln::drivers {
namespace {

std::string_view status_name(std::int32_t status) {
  switch (status) {
    case KILN_DRIVER_OK: return "KILN_DRIVER_OK";
    case KILN_DRIVER_E_INVALID_ARGUMENT: return "KILN_DRIVER_E_INVALID_ARGUMENT";
    case KILN_DRIVER_E_NO_SUCH_CHIP: return "KILN_DRIVER_E_NO_SUCH_CHIP";
    case KILN_DRIVER_E_UNSUPPORTED: return "KILN_DRIVER_E_UNSUPPORTED";
    case KILN_DRIVER_E_CONFIG: return "KILN_DRIVER_E_CONFIG";
    case KILN_DRIVER_E_IO: return "KILN_DRIVER_E_IO";
    case KILN_DRIVER_E_BUSY: return "KILN_DRIVER_E_BUSY";
    case KILN_DRIVER_E_STATE: return "KILN_DRIVER_E_STATE";
    case KILN_DRIVER_E_DEVICE: return "KILN_DRIVER_E_DEVICE";
    case KILN_DRIVER_E_FIRMWARE: return "KILN_DRIVER_E_FIRMWARE";
    case KILN_DRIVER_E_BUFFER_TOO_SMALL: return "KILN_DRIVER_E_BUFFER_TOO_SMALL";
    case KILN_DRIVER_E_INTERNAL: return "KILN_DRIVER_E_INTERNAL";
  }
  return "unknown status";
}

Errc errc_for(std::int32_t status) {
  switch (status) {
    case KILN_DRIVER_E_INVALID_ARGUMENT: return Errc::invalid_argument;
    case KILN_DRIVER_E_NO_SUCH_CHIP: return Errc::not_found;
    case KILN_DRIVER_E_UNSUPPORTED: return Errc::invalid_argument;
    case KILN_DRIVER_E_CONFIG: return Errc::config;
    case KILN_DRIVER_E_IO: return Errc::io;
    case KILN_DRIVER_E_BUSY: return Errc::unavailable;
    case KILN_DRIVER_E_STATE: return Errc::conflict;
    case KILN_DRIVER_E_DEVICE: return Errc::device;
    case KILN_DRIVER_E_FIRMWARE: return Errc::device;
    default: return Errc::internal;
  }
}

// Copies a backend's fixed-size char array, never reading past it even if unterminated.
template <std::size_t N>
std::string from_fixed(const char (&text)[N]) {
  return std::string(text, strnlen(text, N));
}

std::string chip_operation(std::string_view operation, std::uint32_t chip) {
  std::string out(operation);
  out += " on chip ";
  out += std::to_string(chip);
  return out;
}

std::optional<FirmwareSlot> slot_from_abi(std::uint32_t slot) {
  if (slot == KILN_FIRMWARE_SLOT_A) return FirmwareSlot::a;
  if (slot == KILN_FIRMWARE_SLOT_B) return FirmwareSlot::b;
  return std::nullopt;
}

// Every table entry this loader calls must be present; a backend with holes is refused at
// load time rather than crashing on first use.
bool table_complete(const kiln_driver_api& api) {
  return api.open && api.close && api.last_error && api.driver_version && api.chip_count &&
         api.chip_identity && api.chip_telemetry && api.reset_chip && api.firmware_slots &&
         api.flash_standby && api.activate_standby && api.rollback_firmware &&
         api.bind_workload && api.unbind_workload && api.chip_binding && api.run_self_test;
}

// Version 1 as first released ended at run_self_test; later entries are optional and reached
// only when table_size covers them.
constexpr std::size_t kFirstTableSize = offsetof(kiln_driver_api, run_kernel);

bool table_reaches(const kiln_driver_api& api, std::size_t entry_offset, std::size_t entry_size) {
  return api.table_size >= entry_offset + entry_size;
}

// A call to an optional entry the backend was built without: what the backend itself would say.
tl::unexpected<Error> built_without(const std::string& library, std::string_view entry, const std::string& operation,
                                    std::string_view remedy) {
  return fail(Errc::invalid_argument, "chip driver '" + library + "': " + operation +
                                          " failed (KILN_DRIVER_E_UNSUPPORTED): the backend was built without " +
                                          std::string(entry) + "; " + std::string(remedy));
}

}  // namespace

DriverCapabilities capabilities_from_bits(std::uint32_t operations, std::uint32_t telemetry_kinds) {
  const auto has = [](std::uint32_t bits, std::uint32_t bit) { return (bits & bit) != 0; };
  return DriverCapabilities{has(operations, KILN_CAPABILITY_FIRMWARE_SLOTS),
                            has(operations, KILN_CAPABILITY_FIRMWARE_INSTALL),
                            has(operations, KILN_CAPABILITY_RESET),
                            has(operations, KILN_CAPABILITY_BINDINGS),
                            has(operations, KILN_CAPABILITY_SELF_TESTS),
                            has(telemetry_kinds, KILN_TELEMETRY_TEMPERATURE),
                            has(telemetry_kinds, KILN_TELEMETRY_POWER),
                            has(telemetry_kinds, KILN_TELEMETRY_CLOCK),
                            has(telemetry_kinds, KILN_TELEMETRY_MEMORY),
                            has(telemetry_kinds, KILN_TELEMETRY_ECC),
                            has(telemetry_kinds, KILN_TELEMETRY_LINK),
                            has(telemetry_kinds, KILN_TELEMETRY_THROTTLE)};
}

std::uint32_t operation_bits(const DriverCapabilities& c) {
  return (c.firmware_slots ? KILN_CAPABILITY_FIRMWARE_SLOTS : 0u) |
         (c.firmware_install ? KILN_CAPABILITY_FIRMWARE_INSTALL : 0u) | (c.reset ? KILN_CAPABILITY_RESET : 0u) |
         (c.bindings ? KILN_CAPABILITY_BINDINGS : 0u) | (c.self_tests ? KILN_CAPABILITY_SELF_TESTS : 0u);
}

std::uint32_t telemetry_bits(const DriverCapabilities& c) {
  return (c.temperature ? KILN_TELEMETRY_TEMPERATURE : 0u) | (c.power ? KILN_TELEMETRY_POWER : 0u) |
         (c.clock ? KILN_TELEMETRY_CLOCK : 0u) | (c.memory ? KILN_TELEMETRY_MEMORY : 0u) |
         (c.ecc ? KILN_TELEMETRY_ECC : 0u) | (c.link ? KILN_TELEMETRY_LINK : 0u) |
         (c.throttle ? KILN_TELEMETRY_THROTTLE : 0u);
}

std::string_view to_string(FirmwareSlot slot) { return slot == FirmwareSlot::a ? "a" : "b"; }

FirmwareSlot FirmwareSlots::standby() const {
  return active == FirmwareSlot::a ? FirmwareSlot::b : FirmwareSlot::a;
}

const std::string& FirmwareSlots::version(FirmwareSlot slot) const {
  return slot == FirmwareSlot::a ? version_a : version_b;
}

bool FirmwareSlots::valid(FirmwareSlot slot) const {
  return slot == FirmwareSlot::a ? valid_a : valid_b;
}

Result<std::unique_ptr<Driver>> Driver::load(const std::string& library_path,
                                             const std::string& options) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(library_path, ec)) {
    return fail(Errc::not_found, "chip driver library '" + library_path +
                                     "' does not exist or is not a file; set the driver "
                                     "library path in agent.toml to an installed backend");
  }
  // RTLD_LOCAL keeps the backend's own symbols (and its copy of any static library) private.
  void* library = dlopen(library_path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) {
    const char* why = dlerror();
    return fail(Errc::io, "cannot load chip driver library '" + library_path +
                              "': " + (why ? why : "unknown dlopen error") +
                              "; check that it is a shared library built for this host");
  }
  auto close_library = [&] { dlclose(library); };

  dlerror();
  void* symbol = dlsym(library, KILN_DRIVER_ENTRY_SYMBOL);
  if (symbol == nullptr) {
    close_library();
    return fail(Errc::invalid_argument,
                "'" + library_path + "' is not a kiln chip driver: it does not export " +
                    KILN_DRIVER_ENTRY_SYMBOL + "; point the agent at a backend built against "
                    "drivers/kiln_driver.h");
  }
  kiln_driver_entry_fn entry = nullptr;
  static_assert(sizeof(entry) == sizeof(symbol));
  std::memcpy(&entry, &symbol, sizeof(entry));  // dlsym's object pointer to a function pointer

  const kiln_driver_api* api = entry(KILN_DRIVER_ABI_VERSION);
  const std::string wanted = std::to_string(KILN_DRIVER_ABI_VERSION);
  if (api == nullptr) {
    close_library();
    return fail(Errc::unsupported_version,
                "chip driver '" + library_path + "' does not implement driver ABI version " +
                    wanted + "; install a backend built for ABI " + wanted +
                    " or a kiln agent matching the backend");
  }
  if (api->abi_version != KILN_DRIVER_ABI_VERSION) {
    const std::string got = std::to_string(api->abi_version);
    close_library();
    return fail(Errc::unsupported_version,
                "chip driver '" + library_path + "' answered with ABI version " + got +
                    " when asked for version " + wanted + "; install a backend built for ABI " +
                    wanted);
  }
  if (api->table_size < kFirstTableSize || !table_complete(*api)) {
    close_library();
    return fail(Errc::unsupported_version,
                "chip driver '" + library_path + "' claims ABI version " + wanted +
                    " but its function table is incomplete; rebuild the backend against this "
                    "version of drivers/kiln_driver.h");
  }

  std::array<char, KILN_DRIVER_ERROR_MAX> error{};
  kiln_driver* handle = nullptr;
  const std::int32_t status =
      api->open(options.c_str(), &handle, error.data(), static_cast<std::uint32_t>(error.size()));
  error.back() = '\0';
  if (status != KILN_DRIVER_OK || handle == nullptr) {
    close_library();
    std::string message = "chip driver '" + library_path + "' refused to open (" +
                          std::string(status_name(status)) + "): " + error.data();
    return fail(status == KILN_DRIVER_OK ? Errc::internal : errc_for(status), std::move(message));
  }
  return std::unique_ptr<Driver>(new Driver(library_path, library, api, handle));
}

Driver::Driver(std::string library_path, void* library, const kiln_driver_api* api,
               kiln_driver* handle)
    : library_path_(std::move(library_path)), library_(library), api_(api), handle_(handle) {}

Driver::~Driver() {
  api_->close(handle_);
  dlclose(library_);
}

Status Driver::check(std::int32_t status, std::string_view operation) const {
  if (status == KILN_DRIVER_OK) return {};
  const char* message = api_->last_error(handle_);
  std::string text = "chip driver '" + library_path_ + "': " + std::string(operation) +
                     " failed (" + std::string(status_name(status)) + "): " +
                     (message && *message ? message : "the backend gave no message");
  return fail(errc_for(status), std::move(text));
}

Result<std::string> Driver::driver_version() {
  std::array<char, 256> buffer{};
  if (auto ok = check(api_->driver_version(handle_, buffer.data(),
                                           static_cast<std::uint32_t>(buffer.size())),
                      "driver_version");
      !ok) {
    return tl::unexpected(ok.error());
  }
  buffer.back() = '\0';
  return std::string(buffer.data());
}

Result<std::uint32_t> Driver::chip_count() {
  std::uint32_t count = 0;
  if (auto ok = check(api_->chip_count(handle_, &count), "chip_count"); !ok) {
    return tl::unexpected(ok.error());
  }
  return count;
}

Result<ChipIdentity> Driver::chip_identity(std::uint32_t chip) {
  kiln_chip_identity raw{};
  if (auto ok = check(api_->chip_identity(handle_, chip, &raw), chip_operation("chip_identity", chip));
      !ok) {
    return tl::unexpected(ok.error());
  }
  return ChipIdentity{raw.index,         from_fixed(raw.serial),
                      from_fixed(raw.hardware_revision), from_fixed(raw.pci_bus_id),
                      raw.numa_node,     raw.memory_bytes};
}

Result<ChipTelemetry> Driver::chip_telemetry(std::uint32_t chip) {
  kiln_chip_telemetry raw{};
  if (auto ok = check(api_->chip_telemetry(handle_, chip, &raw),
                      chip_operation("chip_telemetry", chip));
      !ok) {
    return tl::unexpected(ok.error());
  }
  return ChipTelemetry{raw.temperature_c,   raw.power_w,         raw.clock_mhz,
                       raw.memory_used_bytes, raw.ecc_corrected, raw.ecc_uncorrected,
                       raw.link_up != 0,    raw.throttled != 0};
}

Result<ChipActivity> Driver::chip_activity(std::uint32_t chip) {
  const std::string operation = chip_operation("chip_activity", chip);
  if (!table_reaches(*api_, offsetof(kiln_driver_api, chip_activity), sizeof(api_->chip_activity)) ||
      api_->chip_activity == nullptr) {
    return built_without(library_path_, "chip_activity", operation,
                         "its chips' utilization and throttle reasons cannot be read");
  }
  kiln_chip_activity raw{};
  if (auto ok = check(api_->chip_activity(handle_, chip, &raw), operation); !ok) return tl::unexpected(ok.error());
  return ChipActivity{raw.utilization, (raw.throttle_reasons & KILN_THROTTLE_THERMAL) != 0,
                      (raw.throttle_reasons & KILN_THROTTLE_POWER) != 0};
}

Result<DriverCapabilities> Driver::capabilities() {
  // A backend from before capabilities declared nothing and did everything it was asked.
  if (!table_reaches(*api_, offsetof(kiln_driver_api, capabilities), sizeof(api_->capabilities)) ||
      api_->capabilities == nullptr) {
    return DriverCapabilities{};
  }
  kiln_driver_capabilities raw{};
  if (auto ok = check(api_->capabilities(handle_, &raw), "capabilities"); !ok) return tl::unexpected(ok.error());
  return capabilities_from_bits(raw.operations, raw.telemetry_kinds);
}

Result<std::string> Driver::backend_kind() {
  if (!table_reaches(*api_, offsetof(kiln_driver_api, backend_kind), sizeof(api_->backend_kind)) ||
      api_->backend_kind == nullptr) {
    return built_without(library_path_, "backend_kind", "backend_kind",
                         "it does not declare what it drives, so its results count as no backend's");
  }
  std::uint32_t kind = 0;
  if (auto ok = check(api_->backend_kind(handle_, &kind), "backend_kind"); !ok) return tl::unexpected(ok.error());
  switch (kind) {
    case KILN_BACKEND_SIM: return std::string("sim");
    case KILN_BACKEND_CPU: return std::string("cpu");
    case KILN_BACKEND_SILICON: return std::string("silicon");
    default: break;
  }
  return fail(Errc::device, "chip driver '" + library_path_ + "' declares backend kind " + std::to_string(kind) +
                                ", which the ABI does not define (1 sim, 2 cpu, 3 silicon); fix the backend");
}

Status Driver::reset_chip(std::uint32_t chip) {
  return check(api_->reset_chip(handle_, chip), chip_operation("reset_chip", chip));
}

Result<FirmwareSlots> Driver::firmware_slots(std::uint32_t chip) {
  kiln_firmware_slots raw{};
  if (auto ok = check(api_->firmware_slots(handle_, chip, &raw),
                      chip_operation("firmware_slots", chip));
      !ok) {
    return tl::unexpected(ok.error());
  }
  const auto active = slot_from_abi(raw.active_slot);
  if (!active) {
    return fail(Errc::internal, "chip driver '" + library_path_ + "' reported active slot " +
                                    std::to_string(raw.active_slot) + " on chip " +
                                    std::to_string(chip) + ", which is neither A nor B; "
                                    "report this to the driver's vendor");
  }
  FirmwareSlots slots;
  slots.active = *active;
  slots.previous = slot_from_abi(raw.previous_slot);
  slots.version_a = from_fixed(raw.slot_version[0]);
  slots.version_b = from_fixed(raw.slot_version[1]);
  slots.valid_a = raw.slot_valid[0] != 0;
  slots.valid_b = raw.slot_valid[1] != 0;
  return slots;
}

Status Driver::flash_standby(std::uint32_t chip, const std::string& image_path,
                             const std::string& version) {
  return check(api_->flash_standby(handle_, chip, image_path.c_str(), version.c_str()),
               chip_operation("flash_standby", chip));
}

Status Driver::activate_standby(std::uint32_t chip) {
  return check(api_->activate_standby(handle_, chip), chip_operation("activate_standby", chip));
}

Status Driver::rollback_firmware(std::uint32_t chip) {
  return check(api_->rollback_firmware(handle_, chip), chip_operation("rollback_firmware", chip));
}

Status Driver::bind_workload(std::int64_t pid, const std::vector<std::uint32_t>& chips) {
  return check(api_->bind_workload(handle_, pid, chips.data(),
                                   static_cast<std::uint32_t>(chips.size())),
               "bind_workload of pid " + std::to_string(pid));
}

Status Driver::unbind_workload(std::int64_t pid) {
  return check(api_->unbind_workload(handle_, pid),
               "unbind_workload of pid " + std::to_string(pid));
}

Result<std::optional<std::int64_t>> Driver::chip_binding(std::uint32_t chip) {
  std::int64_t pid = 0;
  if (auto ok = check(api_->chip_binding(handle_, chip, &pid), chip_operation("chip_binding", chip));
      !ok) {
    return tl::unexpected(ok.error());
  }
  if (pid == 0) return std::optional<std::int64_t>{};
  return std::optional<std::int64_t>{pid};
}

Result<SelfTestResult> Driver::run_self_test(std::uint32_t chip, SelfTestKind kind,
                                             std::uint32_t level) {
  kiln_self_test_result raw{};
  if (auto ok = check(api_->run_self_test(handle_, chip, static_cast<std::uint32_t>(kind), level,
                                          &raw),
                      chip_operation(std::string(to_string(kind)) + " self-test level " +
                                         std::to_string(level),
                                     chip));
      !ok) {
    return tl::unexpected(ok.error());
  }
  SelfTestResult result;
  result.kind = kind;
  result.level = raw.level;
  result.passed = raw.passed != 0;
  result.errors_found = raw.errors_found;
  result.duration_s = raw.duration_s;
  result.memory_bandwidth_gb_per_s = raw.memory_bandwidth_gb_per_s;
  result.interconnect_bandwidth_gb_per_s = raw.interconnect_bandwidth_gb_per_s;
  result.compute_tflop_per_s = raw.compute_tflop_per_s;
  result.detail = from_fixed(raw.detail);
  return result;
}

}  // namespace kiln::drivers

namespace kiln::drivers {

Result<numerics::Matrix> Driver::run_kernel(std::uint32_t chip, const numerics::KernelLaunch& launch) {
  const std::string operation = chip_operation("run_kernel " + launch.kernel, chip);
  if (!table_reaches(*api_, offsetof(kiln_driver_api, run_kernel), sizeof(api_->run_kernel)) ||
      api_->run_kernel == nullptr) {
    return built_without(library_path_, "run_kernel", operation, "use a backend that runs kernels");
  }
  if (launch.kernel.size() >= KILN_KERNEL_NAME_MAX || launch.inputs.size() > KILN_KERNEL_INPUTS_MAX) {
    return fail(Errc::invalid_argument, operation + ": the kernel name must be shorter than " +
                                            std::to_string(KILN_KERNEL_NAME_MAX) + " bytes and take at most " +
                                            std::to_string(KILN_KERNEL_INPUTS_MAX) + " inputs");
  }
  kiln_kernel_launch abi{};
  std::memcpy(abi.kernel, launch.kernel.data(), launch.kernel.size());
  abi.flags = (launch.causal ? KILN_KERNEL_FLAG_CAUSAL : 0u) | (launch.transpose_b ? KILN_KERNEL_FLAG_TRANSPOSE_B : 0u);
  abi.input_count = static_cast<std::uint32_t>(launch.inputs.size());
  for (std::size_t i = 0; i < launch.inputs.size(); ++i) {
    const numerics::Matrix& m = launch.inputs[i];
    abi.inputs[i] = kiln_kernel_matrix{m.data.data(), static_cast<std::uint32_t>(m.rows),
                                       static_cast<std::uint32_t>(m.cols)};
  }
  numerics::Matrix out;
  // The first call learns the output's shape when the guess is too small; the second fills it.
  for (int attempt = 0; attempt < 2; ++attempt) {
    abi.output = out.data.data();
    abi.output_capacity = out.data.size();
    const std::int32_t status = api_->run_kernel(handle_, chip, &abi);
    if (status == KILN_DRIVER_E_BUFFER_TOO_SMALL && attempt == 0) {
      out = numerics::Matrix(static_cast<int>(abi.output_rows), static_cast<int>(abi.output_cols));
      continue;
    }
    if (auto ok = check(status, operation); !ok) return tl::unexpected(ok.error());
    if (static_cast<std::uint64_t>(abi.output_rows) * abi.output_cols > out.data.size()) {
      return fail(Errc::internal, "chip driver '" + library_path_ + "': " + operation +
                                      " reported an output larger than the buffer it filled; report the "
                                      "backend's bug to its vendor");
    }
    out.rows = static_cast<int>(abi.output_rows);
    out.cols = static_cast<int>(abi.output_cols);
    out.data.resize(static_cast<std::size_t>(out.rows) * out.cols);
    return out;
  }
  return fail(Errc::internal, "chip driver '" + library_path_ + "': " + operation +
                                  " asked twice for a larger output buffer; report the backend's bug to its vendor");
}

}  // namespace kiln::drivers

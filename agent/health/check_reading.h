// What the hidden helper `kiln-agent-check` reads from the driver in its own process, and the
// one-line JSON it prints for the runner. The helper only reads; the runner judges the reading
// against the targets (evaluate.h), so targets live in one process and one place.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "common/error.h"
#include "common/health/check_result.h"
#include "drivers/loader.h"

#include "common/enum_names.h"

namespace kiln::agent::health {

// Results and reports are common/health's, where the kiln client reads them too.
using namespace kiln::health;

// driver: loads the backend (ABI check), reports its version and chip count.
// chip_firmware: identity and firmware slots of one chip.
// telemetry: identity and telemetry of one chip (the cheap probe).
// memory, interconnect, compute: identity and one self-test of one chip.
enum class CheckKind { driver, chip_firmware, telemetry, memory, interconnect, compute };
constexpr EnumTable<CheckKind, 6> enum_names(CheckKind) {
  return {{
      {CheckKind::driver, "driver"},
      {CheckKind::chip_firmware, "chip_firmware"},
      {CheckKind::telemetry, "telemetry"},
      {CheckKind::memory, "memory"},
      {CheckKind::interconnect, "interconnect"},
      {CheckKind::compute, "compute"},
  }};
}

inline std::string_view to_string(CheckKind value) { return enum_name(value); }
Result<CheckKind> parse_check_kind(std::string_view text);
// The category a result of this check falls in when the check itself went wrong (timed out,
// crashed): a chip that stops answering management calls is a firmware matter, a self-test
// that hangs belongs to what it tests.
const char* category_of(CheckKind kind);
bool needs_chip(CheckKind kind);

struct DriverInfo {
  std::string version;
  std::uint32_t chip_count = 0;
  // What the driver declares it drives: "sim", "cpu" or "silicon"; empty when it does not say.
  std::string backend;
};

struct CheckReading {
  CheckKind kind = CheckKind::driver;
  std::optional<std::uint32_t> chip;
  std::uint32_t level = 1;       // self-test level
  std::optional<Error> error;    // the driver refused a call; nothing after it was read
  std::optional<DriverInfo> driver;
  std::optional<drivers::ChipIdentity> identity;
  std::optional<drivers::FirmwareSlots> firmware;
  std::optional<drivers::ChipTelemetry> telemetry;
  std::optional<drivers::SelfTestResult> self_test;
  // What the driver declares it can do and read (every reading of a loaded driver has it).
  std::optional<drivers::DriverCapabilities> capabilities;
};

// The helper prints exactly one line starting with this marker and then the JSON, so a
// backend that writes to stdout or stderr cannot garble the result.
inline constexpr std::string_view kReadingMarker = "KILN-CHECK-READING ";

std::string reading_to_json(const CheckReading& reading);
Result<CheckReading> parse_reading_json(std::string_view json);
// Finds the last marker line in a helper's captured output and parses it.
Result<CheckReading> find_reading(std::string_view output);

// Loads the driver and reads what `kind` needs. Blocks as long as the driver does: run it
// only inside the helper process, under a deadline.
CheckReading take_reading(const std::string& driver_library, const std::string& driver_options,
                          CheckKind kind, std::optional<std::uint32_t> chip,
                          std::uint32_t level);

}  // namespace kiln::agent::health

// What one health check found, and the verdict over many. Pure data: the agent's probes,
// diagnostics and install flow, and the kiln client showing a report, all speak in CheckResults.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"

#include "common/enum_names.h"

namespace kiln::health {

// skip: the check did not run (the chip is busy, an earlier check on it timed out, no target
// to compare with); it never hides a failure on its own.
enum class CheckStatus { pass, warn, fail, skip };
constexpr EnumTable<CheckStatus, 4> enum_names(CheckStatus) {
  return {{
      {CheckStatus::pass, "pass"},
      {CheckStatus::warn, "warn"},
      {CheckStatus::fail, "fail"},
      {CheckStatus::skip, "skip"},
  }};
}

inline std::string_view to_string(CheckStatus value) { return enum_name(value); }
Result<CheckStatus> parse_check_status(std::string_view text);

// The part of the node a result is about. Lab engineers sort findings by it.
namespace category {
inline constexpr const char* software = "software";
inline constexpr const char* config = "config";
inline constexpr const char* memory = "memory";
inline constexpr const char* interconnect = "interconnect";
inline constexpr const char* compute = "compute";
inline constexpr const char* thermal = "thermal";
inline constexpr const char* power = "power";
inline constexpr const char* firmware = "firmware";
}  // namespace category

struct CheckResult {
  std::string check;                // "ecc", "memory", "driver", ...
  std::optional<std::uint32_t> chip;  // nullopt for node-wide checks
  CheckStatus status = CheckStatus::skip;
  std::string reason_code;  // "ok" when it passed; stable, for alerts and dashboards
  std::string category;     // one of category::*
  std::string message;      // what was found, with the figures
  std::string recommended_action;  // empty when nothing needs doing
  double duration_s = 0;
  std::map<std::string, double> measured;         // figures with units in the key
  std::map<std::string, std::string> attributes;  // serial, firmware_version, ...
};

// fail if any failed; else warn if any warned; else pass if any passed; skip when nothing ran.
CheckStatus verdict(const std::vector<CheckResult>& results);

// Counts per status, e.g. "30 pass, 1 warn, 2 fail, 0 skip".
std::string summarize(const std::vector<CheckResult>& results);

}  // namespace kiln::health

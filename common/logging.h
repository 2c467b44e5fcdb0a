// One named logger per component, writing to stderr (journald picks it up under systemd).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <spdlog/spdlog.h>

#include "common/error.h"

namespace kiln {

// The levels a config's log_level may name: trace, debug, info, warn, error, critical, off.
const std::vector<std::string_view>& log_level_names();

// `level` is one of log_level_names().
Result<std::shared_ptr<spdlog::logger>> make_logger(const std::string& component, const std::string& level);

// The spdlog level of a pure core's Log action. Each core names its own severities (debug,
// info, warn, error) so that it does not depend on spdlog; its shell maps them here. A severity
// added to a core without a case here does not compile (-Wswitch).
template <class Severity>
constexpr spdlog::level::level_enum spdlog_level(Severity severity) {
  switch (severity) {
    case Severity::debug: return spdlog::level::debug;
    case Severity::info: return spdlog::level::info;
    case Severity::warn: return spdlog::level::warn;
    case Severity::error: return spdlog::level::err;
  }
  return spdlog::level::err;  // not an enumerator: report it rather than lose it
}

}  // namespace kiln

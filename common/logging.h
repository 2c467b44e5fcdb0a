// One named logger per component, writing to stderr (journald picks it up under systemd).
#pragma once

#include <memory>
#include <string>

#include <spdlog/spdlog.h>

#include "common/error.h"

namespace kiln {

// `level` is trace, debug, info, warn, error or off.
Result<std::shared_ptr<spdlog::logger>> make_logger(const std::string& component, const std::string& level);

}  // namespace kiln

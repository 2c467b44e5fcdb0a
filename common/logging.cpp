#include "common/logging.h"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/sinks/stdout_color_sinks.h>

namespace kiln {

const std::vector<std::string_view>& log_level_names() {
  static const std::vector<std::string_view> names = {"trace", "debug", "info", "warn", "error", "critical", "off"};
  return names;
}

Result<std::shared_ptr<spdlog::logger>> make_logger(const std::string& component, const std::string& level) {
  const auto& names = log_level_names();
  if (std::find(names.begin(), names.end(), level) == names.end()) {
    return fail(Errc::config, fmt::format("log level '{}' is not one of {}", level, fmt::join(names, ", ")));
  }
  auto parsed = spdlog::level::from_str(level);
  auto logger = spdlog::get(component);
  if (!logger) logger = spdlog::stderr_color_mt(component);
  logger->set_level(parsed);
  logger->set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ [%n] %v");
  return logger;
}

}  // namespace kiln

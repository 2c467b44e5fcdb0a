#include "common/logging.h"

#include <fmt/format.h>
#include <spdlog/sinks/stdout_color_sinks.h>

namespace kiln {

Result<std::shared_ptr<spdlog::logger>> make_logger(const std::string& component, const std::string& level) {
  auto parsed = spdlog::level::from_str(level);
  if (parsed == spdlog::level::off && level != "off") {
    return fail(Errc::config, fmt::format("log level '{}' is not one of trace, debug, info, warn, error, off", level));
  }
  auto logger = spdlog::get(component);
  if (!logger) logger = spdlog::stderr_color_mt(component);
  logger->set_level(parsed);
  logger->set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ [%n] %v");
  return logger;
}

}  // namespace kiln

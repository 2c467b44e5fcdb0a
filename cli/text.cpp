#include "cli/text.h"

#include <chrono>
#include <ctime>

#include <fmt/format.h>

#include "cli/duration.h"

namespace kiln::cli {

std::int64_t wall_now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string when_text(std::uint64_t at_ms) {
  if (at_ms == 0) return "-";
  const std::time_t seconds = static_cast<std::time_t>(at_ms / 1000);
  std::tm local{};
  ::localtime_r(&seconds, &local);
  const std::int64_t left = static_cast<std::int64_t>(at_ms) - wall_now_ms();
  return fmt::format("{:02}:{:02} ({})", local.tm_hour, local.tm_min,
                     left >= 0 ? "in " + duration_text(static_cast<std::uint64_t>(left))
                               : duration_text(static_cast<std::uint64_t>(-left)) + " ago");
}

std::string utc_time_text(std::int64_t ms) {
  const std::time_t seconds = static_cast<std::time_t>(ms / 1000);
  std::tm tm{};
  ::gmtime_r(&seconds, &tm);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%d %H:%M:%SZ", &tm);
  return text;
}

std::string short_id(const std::string& id) { return id.substr(0, 12); }

}  // namespace kiln::cli

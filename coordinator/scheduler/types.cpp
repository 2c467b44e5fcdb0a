#include "coordinator/scheduler/types.h"

#include <fmt/format.h>

namespace kiln::scheduler {

std::string human_duration(DurationMs ms) {
  if (ms < 0) ms = 0;
  if (ms < kMinuteMs) return fmt::format("{}s", (ms + 999) / 1000);
  if (ms < kHourMs) return fmt::format("{}m", (ms + kMinuteMs - 1) / kMinuteMs);
  return fmt::format("{}h{:02}m", ms / kHourMs, (ms % kHourMs) / kMinuteMs);
}

std::string format_clock(TimeMs t) {
  const TimeMs day_ms = 24 * kHourMs;
  TimeMs day = t >= 0 ? t / day_ms : -1 - (-t - 1) / day_ms;
  TimeMs in_day = t - day * day_ms;
  std::string clock = fmt::format("{:02}:{:02}", in_day / kHourMs, (in_day % kHourMs) / kMinuteMs);
  if (day == 0) return clock;
  return fmt::format("d{} {}", day, clock);
}

std::string Explanation::text() const {
  std::string out;
  if (!pending) return fmt::format("request {} is not pending", request);
  for (const std::string& reason : reasons) {
    if (!out.empty()) out += "; ";
    out += reason;
  }
  if (!out.empty()) out += "; ";
  if (expected_start_ms) {
    out += fmt::format("expected to start at {}", format_clock(*expected_start_ms));
  } else {
    out += "no expected start: no eligible capacity in sight";
  }
  return out;
}

}  // namespace kiln::scheduler

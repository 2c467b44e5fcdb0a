#include "qualification/schedule.h"

#include <chrono>

#include <fmt/format.h>

namespace kiln::qualification {
namespace {

constexpr DurationMs kDayMs = 24 * kHourMs;

// Floor division: times before the epoch still fall on the day they belong to.
TimeMs day_start_ms(TimeMs now_ms) { return now_ms - ((now_ms % kDayMs) + kDayMs) % kDayMs; }

std::string utc_date(TimeMs day_start) {
  const std::chrono::sys_days day{std::chrono::days{day_start / kDayMs}};
  const std::chrono::year_month_day date{day};
  return fmt::format("{:04}-{:02}-{:02}", static_cast<int>(date.year()), static_cast<unsigned>(date.month()),
                     static_cast<unsigned>(date.day()));
}

}  // namespace

Result<int> minute_of_day(std::string_view text) {
  const auto digit = [&](std::size_t i) { return text[i] >= '0' && text[i] <= '9'; };
  if (text.size() == 5 && digit(0) && digit(1) && text[2] == ':' && digit(3) && digit(4)) {
    const int hours = (text[0] - '0') * 10 + (text[1] - '0');
    const int minutes = (text[3] - '0') * 10 + (text[4] - '0');
    if (hours < 24 && minutes < 60) return hours * 60 + minutes;
  }
  return fail(Errc::config, fmt::format("'{}' is not a time of day; write \"HH:MM\" in UTC, 00:00 to 23:59", text));
}

std::string time_of_day_text(int minute) { return fmt::format("{:02}:{:02}", minute / 60, minute % 60); }

std::string utc_time_of_day(TimeMs at_ms) {
  return time_of_day_text(static_cast<int>((at_ms - day_start_ms(at_ms)) / kMinuteMs));
}

std::optional<Night> night_at(const NightlySchedule& schedule, TimeMs now_ms) {
  const TimeMs today = day_start_ms(now_ms);
  TimeMs start = today + schedule.start_minute * kMinuteMs;
  if (start > now_ms) start -= kDayMs;
  // The deadline is the first deadline time after the start: the same day or the next.
  const int window_minutes = ((schedule.deadline_minute - schedule.start_minute) % 1440 + 1440) % 1440;
  const TimeMs deadline = start + (window_minutes == 0 ? kDayMs : window_minutes * kMinuteMs);
  if (now_ms >= deadline) return std::nullopt;
  return Night{"nightly-" + utc_date(day_start_ms(start)), start, deadline};
}

std::optional<Night> nightly_due(const NightlySchedule& schedule, TimeMs now_ms,
                                 const std::set<std::string>& requested_run_ids) {
  if (!schedule.enabled) return std::nullopt;
  auto night = night_at(schedule, now_ms);
  if (!night || requested_run_ids.count(night->run_id) != 0) return std::nullopt;
  return night;
}

}  // namespace kiln::qualification

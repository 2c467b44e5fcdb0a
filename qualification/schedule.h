// The nightly's calendar (qualifier.toml [schedule]): when tonight's nightly starts, under which
// run id, and by when it should be done. Pure: the qualifier passes the time and the run ids
// already requested, so a restarted qualifier or a second one finds tonight's run asked for and
// does not ask again. Times are UTC, minutes after midnight (no daylight saving).
#pragma once

#include <optional>
#include <set>
#include <string>
#include <string_view>

#include "common/error.h"
#include "common/time.h"

namespace kiln::qualification {

struct NightlySchedule {
  bool enabled = true;
  int start_minute = 0;         // "00:00"
  int deadline_minute = 7 * 60;  // "07:00": the first such time after the start
};

// "HH:MM" (00:00 to 23:59) as minutes after midnight; Errc::config otherwise.
Result<int> minute_of_day(std::string_view text);

// "HH:MM" of a minute of the day, and of a time (ms since the epoch) in UTC.
std::string time_of_day_text(int minute);
std::string utc_time_of_day(TimeMs at_ms);

// One night's nightly: its run id, nightly-YYYY-MM-DD of the day it starts (UTC), and its window.
struct Night {
  std::string run_id;
  TimeMs start_ms = 0;
  TimeMs deadline_ms = 0;
};

// The night whose window [start, deadline) holds `now_ms` (ms since the epoch, UTC), if any.
std::optional<Night> night_at(const NightlySchedule& schedule, TimeMs now_ms);

// Tonight's nightly if it is due: the schedule is on, `now_ms` is in a night's window and that
// night's run id is not among `requested_run_ids`. A night the qualifiers missed until its
// deadline is not started late.
std::optional<Night> nightly_due(const NightlySchedule& schedule, TimeMs now_ms,
                                 const std::set<std::string>& requested_run_ids);

}  // namespace kiln::qualification

// The nightly's calendar: tonight's run id and window from the time alone, once per night,
// across midnight and restarts, in UTC.
#include <doctest/doctest.h>

#include "qualification/schedule.h"

namespace q = kiln::qualification;
using kiln::kHourMs;
using kiln::kMinuteMs;
using kiln::kSecondMs;
using kiln::TimeMs;

namespace {

// 2026-12-03 00:00:00 UTC.
constexpr TimeMs kDec3 = 1796256000000;

}  // namespace

TEST_CASE("times of day are HH:MM in UTC") {
  CHECK(*q::minute_of_day("00:00") == 0);
  CHECK(*q::minute_of_day("07:30") == 450);
  CHECK(*q::minute_of_day("23:59") == 1439);
  for (const char* bad : {"24:00", "7:00", "07:60", "0700", "07:00 ", "aa:bb", ""}) {
    CAPTURE(bad);
    CHECK(q::minute_of_day(bad).error().message.find("HH:MM") != std::string::npos);
  }
}

TEST_CASE("the nightly is due from its start to its deadline, under the night's run id, once") {
  const q::NightlySchedule schedule;  // 00:00 to 07:00
  CHECK_FALSE(q::nightly_due(schedule, kDec3 - kSecondMs, {}).has_value());
  const auto due = q::nightly_due(schedule, kDec3, {});
  REQUIRE(due.has_value());
  CHECK(due->run_id == "nightly-2026-12-03");
  CHECK(due->start_ms == kDec3);
  CHECK(due->deadline_ms == kDec3 + 7 * kHourMs);

  // A qualifier restarted at 00:00:30, or a second one, sees the run asked for: not due again.
  CHECK_FALSE(q::nightly_due(schedule, kDec3 + 30 * kSecondMs, {"nightly-2026-12-03"}).has_value());
  // Due the whole window while nobody asked; never after its deadline, never for a missed night.
  CHECK(q::nightly_due(schedule, kDec3 + 7 * kHourMs - 1, {})->run_id == "nightly-2026-12-03");
  CHECK_FALSE(q::nightly_due(schedule, kDec3 + 7 * kHourMs, {}).has_value());
  CHECK_FALSE(q::nightly_due(schedule, kDec3 + 23 * kHourMs, {}).has_value());
  // The next night has its own id.
  CHECK(q::nightly_due(schedule, kDec3 + 24 * kHourMs, {"nightly-2026-12-03"})->run_id == "nightly-2026-12-04");

  q::NightlySchedule off;
  off.enabled = false;
  CHECK_FALSE(q::nightly_due(off, kDec3, {}).has_value());
}

TEST_CASE("a night that starts before midnight is named by its start and ends the next morning") {
  q::NightlySchedule schedule;
  schedule.start_minute = 23 * 60;
  schedule.deadline_minute = 5 * 60;
  const TimeMs start = kDec3 - kHourMs;  // 2026-12-02 23:00
  CHECK_FALSE(q::nightly_due(schedule, start - kMinuteMs, {}).has_value());
  const auto evening = q::nightly_due(schedule, start, {});
  REQUIRE(evening.has_value());
  CHECK(evening->run_id == "nightly-2026-12-02");
  CHECK(evening->deadline_ms == kDec3 + 5 * kHourMs);
  // After midnight it is still the night of the 2nd.
  CHECK(q::nightly_due(schedule, kDec3 + 4 * kHourMs, {})->run_id == "nightly-2026-12-02");
  CHECK_FALSE(q::nightly_due(schedule, kDec3 + 4 * kHourMs, {"nightly-2026-12-02"}).has_value());
  CHECK_FALSE(q::nightly_due(schedule, kDec3 + 5 * kHourMs, {}).has_value());

  // A deadline equal to the start gives the night a whole day.
  schedule.deadline_minute = schedule.start_minute;
  CHECK(q::night_at(schedule, start)->deadline_ms == start + 24 * kHourMs);
}

// Text for the report pages: escaping (every string a report holds goes through escape()) and
// the pages' formats for times, durations and numbers.
#pragma once

#include <string>
#include <string_view>

#include "common/time.h"

namespace kiln::report {

// For element content and quoted attribute values alike: & < > " ' become references, so no
// string from a report (a model, ticket or change name) can open a tag or leave an attribute.
std::string escape(std::string_view text);

std::string utc_time(TimeMs at_ms);          // "2026-12-03 00:00:03 UTC"; "" for 0 (not recorded)
std::string duration_text(DurationMs ms);    // "850 ms", "4.2 s", "3 min 12 s", "2 h 5 min"
std::string number_text(double value);       // 4 significant digits, whole from 10000 on: "1234", "0.01235", "41250"
std::string percent_text(double fraction);   // "+2.50%"

}  // namespace kiln::report

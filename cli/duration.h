// Durations on the command line: `90s`, `30m`, `2h`, `1h30m`, `1.5h`, `500ms`, one parser for
// every option that takes one, and the same units when kiln prints a duration.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/error.h"
#include "common/text/duration_text.h"

namespace kiln::cli {

// Milliseconds of a duration: one or more NUMBER UNIT parts (units ms, s, m, h, d), e.g. `1h30m`.
// Fails, saying what a duration looks like, for anything else, a zero or a bare number.
Result<std::uint64_t> parse_duration_ms(std::string_view text, std::string_view option);

using kiln::duration_text;

}  // namespace kiln::cli

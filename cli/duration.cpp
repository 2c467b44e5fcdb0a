#include "cli/duration.h"

#include <cctype>
#include <cmath>

#include <fmt/format.h>

namespace kiln::cli {

namespace {

// Milliseconds per unit, or 0 for an unknown one.
double unit_ms(std::string_view unit) {
  if (unit == "ms") return 1;
  if (unit == "s") return 1000;
  if (unit == "m") return 60'000;
  if (unit == "h") return 3'600'000;
  if (unit == "d") return 86'400'000;
  return 0;
}

}  // namespace

Result<std::uint64_t> parse_duration_ms(std::string_view text, std::string_view option) {
  const auto bad = [&](std::string_view why) {
    return fail(Errc::invalid_argument, fmt::format("{} {}: {}; give a duration such as 90s, 30m, 2h or 1h30m", option,
                                                    text, why));
  };
  if (text.empty()) return bad("the duration is empty");
  double total_ms = 0;
  std::size_t at = 0;
  while (at < text.size()) {
    const std::size_t number_start = at;
    while (at < text.size() && (std::isdigit(static_cast<unsigned char>(text[at])) || text[at] == '.')) ++at;
    const std::string number(text.substr(number_start, at - number_start));
    if (number.empty() || number.front() == '.' || number.back() == '.' ||
        number.find('.') != number.rfind('.')) {
      return bad("each part is a number and a unit");
    }
    const std::size_t unit_start = at;
    while (at < text.size() && std::isalpha(static_cast<unsigned char>(text[at]))) ++at;
    const std::string_view unit = text.substr(unit_start, at - unit_start);
    if (unit.empty()) return bad("a number needs a unit (ms, s, m, h or d)");
    const double per_unit = unit_ms(unit);
    if (per_unit == 0) return bad(fmt::format("'{}' is not a unit (ms, s, m, h or d)", unit));
    total_ms += std::stod(number) * per_unit;
  }
  if (total_ms < 1) return bad("a duration must be at least 1ms");
  if (total_ms > 365.0 * 86'400'000) return bad("a duration must be at most a year");
  return static_cast<std::uint64_t>(std::llround(total_ms));
}

}  // namespace kiln::cli

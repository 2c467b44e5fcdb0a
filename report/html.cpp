#include "report/html.h"

#include <cmath>
#include <ctime>

#include <fmt/format.h>

namespace kiln::report {

std::string escape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string utc_time(TimeMs at_ms) {
  if (at_ms <= 0) return "";
  const std::time_t seconds = static_cast<std::time_t>(at_ms / 1000);
  std::tm tm{};
  gmtime_r(&seconds, &tm);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%d %H:%M:%S UTC", &tm);
  return text;
}

std::string duration_text(DurationMs ms) {
  if (ms < 0) return "";
  if (ms < kSecondMs) return fmt::format("{} ms", ms);
  if (ms < kMinuteMs) return fmt::format("{:.1f} s", static_cast<double>(ms) / kSecondMs);
  if (ms < kHourMs) return fmt::format("{} min {} s", ms / kMinuteMs, ms % kMinuteMs / kSecondMs);
  return fmt::format("{} h {} min", ms / kHourMs, ms % kHourMs / kMinuteMs);
}

std::string number_text(double value) {
  if (!std::isfinite(value)) return "not a number";
  // Throughputs run to tens of thousands: whole numbers read better there than 4.3e+04.
  if (std::abs(value) >= 1e4 && std::abs(value) < 1e15) return fmt::format("{:.0f}", value);
  return fmt::format("{:.4g}", value);
}

std::string percent_text(double fraction) {
  if (!std::isfinite(fraction)) return "unbounded";
  return fmt::format("{:+.2f}%", fraction * 100.0);
}

}  // namespace kiln::report

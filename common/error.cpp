#include "common/error.h"

namespace kiln {

std::string_view to_string(Errc code) {
  switch (code) {
    case Errc::invalid_argument: return "invalid_argument";
    case Errc::bad_message: return "bad_message";
    case Errc::unsupported_version: return "unsupported_version";
    case Errc::too_large: return "too_large";
    case Errc::not_found: return "not_found";
    case Errc::already_exists: return "already_exists";
    case Errc::unauthorized: return "unauthorized";
    case Errc::unauthenticated: return "unauthenticated";
    case Errc::config: return "config";
    case Errc::io: return "io";
    case Errc::timeout: return "timeout";
    case Errc::device: return "device";
    case Errc::unavailable: return "unavailable";
    case Errc::not_registered: return "not_registered";
    case Errc::conflict: return "conflict";
    case Errc::integrity: return "integrity";
    case Errc::internal: return "internal";
  }
  return "internal";
}

std::optional<Errc> errc_from_string(std::string_view name) {
  for (int i = 0; i <= static_cast<int>(Errc::internal); ++i) {
    if (to_string(static_cast<Errc>(i)) == name) return static_cast<Errc>(i);
  }
  return std::nullopt;
}

std::string Error::describe() const {
  std::string out(to_string(code));
  out += ": ";
  out += message;
  return out;
}

void assertion_failed(const char* expr, const char* file, int line, const char* why) {
  std::fprintf(stderr, "kiln: assertion failed: %s (%s) at %s:%d\n", expr, why, file, line);
  std::abort();
}

}  // namespace kiln

#include "common/error.h"

namespace kiln {

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

#include "common/text/duration_text.h"

#include <fmt/format.h>

namespace kiln {

std::string duration_text(std::uint64_t ms) {
  if (ms < 1000) return fmt::format("{}ms", ms);
  if (ms < 60000) return fmt::format("{:.1f}s", ms / 1000.0);
  if (ms < 3600000) return fmt::format("{}m{:02}s", ms / 60000, (ms / 1000) % 60);
  return fmt::format("{}h{:02}m", ms / 3600000, (ms / 60000) % 60);
}

}  // namespace kiln

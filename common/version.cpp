#include "common/version.h"

#include <fmt/format.h>

#include "common/protocol/messages.h"

namespace kiln {

std::string_view kiln_version() { return KILN_VERSION; }

std::string version_text(std::string_view binary) {
  return fmt::format("{} {} (protocol v{})", binary, kiln_version(), protocol::kProtocolVersion);
}

}  // namespace kiln

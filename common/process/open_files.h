// The limit on this process's open files. Every connection a server holds is a file: a
// coordinator's agents are one each, and the soft limit a service starts with (1024 under
// systemd, whose guidance is that a program needing more raise it itself) would cap its fleet
// near a thousand agents.
#pragma once

#include <cstdint>
#include <string>

#include "common/error.h"

namespace kiln {

struct OpenFilesLimit {
  std::uint64_t before = 0;  // the soft limit found
  std::uint64_t now = 0;     // the soft limit after raising it
  std::uint64_t hard = 0;    // how far it may go without privileges
};

// Raises the soft limit to the hard one. An error only when the limits cannot be read or set.
Result<OpenFilesLimit> raise_open_files_limit();

}  // namespace kiln

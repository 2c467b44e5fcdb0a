// SHA-256 of a file, read in chunks (OpenSSL): what content-addressed artifacts are named and
// verified by.
#pragma once

#include <cstdint>
#include <string>

#include "common/error.h"

namespace kiln {

// Lowercase hex digest of the regular file at `path`; refuses one above size_limit_bytes
// (Errc::too_large), a missing one (Errc::not_found) or anything but a regular file.
Result<std::string> sha256_of_file(const std::string& path, std::uint64_t size_limit_bytes);

}  // namespace kiln

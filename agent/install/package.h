// Firmware and driver packages as a stack bundle names them, and their verification: the
// file's SHA-256 must match the bundle's digest before any of it runs or is flashed.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/error.h"

namespace kiln::agent::install {

enum class PackageKind { firmware, driver };

std::string_view to_string(PackageKind kind);
Result<PackageKind> parse_package_kind(std::string_view text);

// One entry of a stack bundle: what to install, and the digest the bundle vouches for.
struct PackageEntry {
  PackageKind kind = PackageKind::firmware;
  std::string version;
  std::string path;    // the package file: a firmware image, or a driver installer program
  std::string sha256;  // 64 hex digits
};

// Packages larger than this are refused before hashing (a driver installer is some hundred
// megabytes; a firmware image tens).
inline constexpr std::uint64_t kDefaultPackageSizeLimitBytes = 4ull << 30;

// The entry's own fields: a version of printable characters without spaces, and a digest of
// 64 hex digits.
Status validate_entry(const PackageEntry& entry);

// Lowercase hex SHA-256 of the file, read in chunks; refuses files above the limit.
Result<std::string> sha256_file(const std::string& path, std::uint64_t size_limit_bytes);

// Checks the file against the entry's digest: integrity when it differs, not_found when the
// file is missing, too_large above the limit.
Status verify_package(const PackageEntry& entry, std::uint64_t size_limit_bytes);

// Copies the package into staging_dir while hashing the copy, and checks that digest: what
// runs or is flashed afterwards is exactly the verified bytes, even if someone swaps the
// original file meanwhile. The copy is owner-only (0700, so a driver installer can run).
// Returns the staged file's path; on a mismatch the copy is removed.
Result<std::string> stage_package(const PackageEntry& entry, const std::string& staging_dir,
                                  std::uint64_t size_limit_bytes);

}  // namespace kiln::agent::install

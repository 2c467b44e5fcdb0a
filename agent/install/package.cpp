#include "agent/install/package.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <vector>

#include "common/sha256.h"

namespace kiln::agent::install {
namespace {

namespace fs = std::filesystem;

constexpr std::size_t kChunkBytes = 1 << 20;

std::string lowercase(std::string text) {
  for (char& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return text;
}

// Owns one file descriptor.
class UniqueFd {
 public:
  explicit UniqueFd(int fd) : fd_(fd) {}
  ~UniqueFd() { reset(); }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  int get() const { return fd_; }
  void reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_;
};

Status write_all(int fd, const char* data, std::size_t size, const std::string& path) {
  while (size > 0) {
    const ssize_t wrote = ::write(fd, data, size);
    if (wrote < 0 && errno == EINTR) continue;
    if (wrote <= 0) {
      return fail(Errc::io, "cannot write '" + path + "': " + std::strerror(errno) +
                                "; check free space in the agent's work_dir");
    }
    data += wrote;
    size -= static_cast<std::size_t>(wrote);
  }
  return {};
}

// Hashes the file, optionally copying every chunk to copy_fd as it goes.
Result<std::string> hash_stream(const std::string& path, std::uint64_t size_limit_bytes,
                                int copy_fd, const std::string& copy_path) {
  // O_NONBLOCK: a FIFO planted as the package must not block the open; regular files ignore it.
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
  if (fd.get() < 0) {
    const int error = errno;
    return fail(error == ENOENT ? Errc::not_found : Errc::io,
                "cannot open package '" + path + "': " + std::strerror(error) +
                    "; check the path in the bundle and that the package was downloaded");
  }
  struct stat info {};
  if (::fstat(fd.get(), &info) != 0 || !S_ISREG(info.st_mode)) {
    return fail(Errc::invalid_argument,
                "package '" + path + "' is not a regular file; give the package file itself");
  }
  if (static_cast<std::uint64_t>(info.st_size) > size_limit_bytes) {
    return fail(Errc::too_large, "package '" + path + "' is " + std::to_string(info.st_size) +
                                     " bytes, above the limit of " +
                                     std::to_string(size_limit_bytes) +
                                     "; it is not a kiln package, or the limit must be raised");
  }
  auto digest = Sha256::start();
  if (!digest) return tl::unexpected(digest.error());
  std::vector<char> buffer(kChunkBytes);
  std::uint64_t total = 0;
  for (;;) {
    const ssize_t got = ::read(fd.get(), buffer.data(), buffer.size());
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      return fail(Errc::io, "cannot read package '" + path + "': " + std::strerror(errno));
    }
    if (got == 0) break;
    total += static_cast<std::uint64_t>(got);
    // The file may grow after fstat; the limit holds for what is actually read.
    if (total > size_limit_bytes) {
      return fail(Errc::too_large, "package '" + path + "' grew above the limit of " +
                                       std::to_string(size_limit_bytes) +
                                       " bytes while being read; it is being rewritten, retry "
                                       "once it is complete");
    }
    digest->update(buffer.data(), static_cast<std::size_t>(got));
    if (copy_fd >= 0) {
      if (auto ok = write_all(copy_fd, buffer.data(), static_cast<std::size_t>(got), copy_path);
          !ok) {
        return tl::unexpected(ok.error());
      }
    }
  }
  return digest->finish_hex();
}

Status compare(const PackageEntry& entry, const std::string& actual) {
  if (lowercase(entry.sha256) == actual) return {};
  return fail(Errc::integrity,
              std::string(to_string(entry.kind)) + " package '" + entry.path + "' version " +
                  entry.version + " does not match its bundle: SHA-256 is " + actual +
                  ", the bundle says " + lowercase(entry.sha256) +
                  ". Refused before anything ran; the file is damaged or was tampered with: "
                  "fetch it again from the release store");
}

}  // namespace

std::string_view to_string(PackageKind kind) {
  return kind == PackageKind::firmware ? "firmware" : "driver";
}

Result<PackageKind> parse_package_kind(std::string_view text) {
  if (text == "firmware") return PackageKind::firmware;
  if (text == "driver") return PackageKind::driver;
  return fail(Errc::invalid_argument,
              "unknown package kind '" + std::string(text) + "'; use firmware or driver");
}

Status validate_entry(const PackageEntry& entry) {
  if (entry.version.empty() || entry.version.size() > 64) {
    return fail(Errc::invalid_argument, "package version '" + entry.version +
                                            "' must be 1 to 64 characters, e.g. 1.2.0");
  }
  for (char c : entry.version) {
    if (c <= ' ' || c > '~') {
      return fail(Errc::invalid_argument, "package version '" + entry.version +
                                              "' may hold only printable characters without "
                                              "spaces, e.g. 1.2.0");
    }
  }
  if (entry.sha256.size() != 64 ||
      entry.sha256.find_first_not_of("0123456789abcdefABCDEF") != std::string::npos) {
    return fail(Errc::invalid_argument,
                "package digest '" + entry.sha256 +
                    "' is not a SHA-256: give the 64 hex digits from the bundle (sha256sum FILE)");
  }
  if (entry.path.empty()) {
    return fail(Errc::invalid_argument, "the package path is empty; give the package file");
  }
  return {};
}

Result<std::string> sha256_file(const std::string& path, std::uint64_t size_limit_bytes) {
  return hash_stream(path, size_limit_bytes, -1, "");
}

Status verify_package(const PackageEntry& entry, std::uint64_t size_limit_bytes) {
  if (auto ok = validate_entry(entry); !ok) return ok;
  auto actual = sha256_file(entry.path, size_limit_bytes);
  if (!actual) return tl::unexpected(actual.error());
  return compare(entry, *actual);
}

Result<std::string> stage_package(const PackageEntry& entry, const std::string& staging_dir,
                                  std::uint64_t size_limit_bytes) {
  if (auto ok = validate_entry(entry); !ok) return tl::unexpected(ok.error());
  std::error_code ec;
  fs::create_directories(staging_dir, ec);
  if (ec) {
    return fail(Errc::io, "cannot create the staging folder '" + staging_dir + "': " +
                              ec.message() + "; check the agent's work_dir");
  }
  const std::string staged =
      (fs::path(staging_dir) / (std::string(to_string(entry.kind)) + "-" +
                                lowercase(entry.sha256).substr(0, 16)))
          .string();
  fs::remove(staged, ec);
  UniqueFd out(::open(staged.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0700));
  if (out.get() < 0) {
    return fail(Errc::io, "cannot create '" + staged + "': " + std::strerror(errno) +
                              "; check the agent's work_dir");
  }
  auto actual = hash_stream(entry.path, size_limit_bytes, out.get(), staged);
  const bool synced = actual && ::fsync(out.get()) == 0;
  out.reset();
  Status verdict = actual ? compare(entry, *actual) : Status(tl::unexpected(actual.error()));
  if (verdict && !synced) {
    verdict = fail(Errc::io, "cannot flush '" + staged + "' to disk; check the agent's work_dir");
  }
  if (!verdict) {
    fs::remove(staged, ec);
    return tl::unexpected(verdict.error());
  }
  return staged;
}

}  // namespace kiln::agent::install

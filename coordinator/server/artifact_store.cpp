#include "coordinator/server/artifact_store.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "common/protocol/artifacts.h"
#include "common/sha256.h"

namespace kiln::coordinator {
namespace {

namespace fs = std::filesystem;

Status not_a_digest(const std::string& digest) {
  return fail(Errc::invalid_argument,
              fmt::format("\"{}\" is not a SHA-256 digest; give its 64 lowercase hex digits", digest));
}

Status append(const std::string& path, const std::string& data) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (fd < 0) {
    return fail(Errc::io, fmt::format("cannot open {}: {}; check the artifact directory", path, std::strerror(errno)));
  }
  const char* at = data.data();
  std::size_t left = data.size();
  while (left > 0) {
    const ssize_t wrote = ::write(fd, at, left);
    if (wrote < 0 && errno == EINTR) continue;
    if (wrote <= 0) {
      const int error = errno;
      ::close(fd);
      return fail(Errc::io, fmt::format("cannot write {}: {}; check free space in the artifact directory", path,
                                        std::strerror(error)));
    }
    at += wrote;
    left -= static_cast<std::size_t>(wrote);
  }
  const bool synced = ::fsync(fd) == 0;
  ::close(fd);
  if (!synced) return fail(Errc::io, fmt::format("cannot flush {} to disk", path));
  return {};
}

}  // namespace

Result<ArtifactStore> ArtifactStore::open(std::string dir, std::uint64_t max_artifact_bytes) {
  std::error_code ec;
  for (const char* sub : {"sha256", "partial"}) {
    fs::create_directories(fs::path(dir) / sub, ec);
    if (ec) {
      return fail(Errc::io, fmt::format("cannot create the artifact directory {}: {}; fix artifact_dir in the "
                                        "coordinator's config",
                                        (fs::path(dir) / sub).string(), ec.message()));
    }
  }
  return ArtifactStore(std::move(dir), max_artifact_bytes);
}

std::string ArtifactStore::complete_path(const std::string& digest) const {
  return (fs::path(dir_) / "sha256" / digest).string();
}

std::optional<std::uint64_t> ArtifactStore::size_of(const std::string& digest) const {
  std::error_code ec;
  const auto size = fs::file_size(complete_path(digest), ec);
  if (ec) return std::nullopt;
  return size;
}

std::string ArtifactStore::partial_path(const std::string& digest) const {
  return (fs::path(dir_) / "partial" / digest).string();
}

Result<protocol::ArtifactProgress> ArtifactStore::put(const protocol::PutArtifact& put) {
  if (!protocol::is_sha256_hex(put.sha256)) return tl::unexpected(not_a_digest(put.sha256).error());
  if (put.size_bytes > max_artifact_bytes_) {
    return fail(Errc::too_large, fmt::format("artifact {} is {} bytes, over the coordinator's max_artifact_bytes of "
                                             "{}; serve it from an HTTP artifact store or a shared mount instead",
                                             put.sha256, put.size_bytes, max_artifact_bytes_));
  }
  protocol::ArtifactProgress progress{put.sha256, put.size_bytes, 0, false};
  std::error_code ec;
  const std::string complete = complete_path(put.sha256);
  if (const auto held = fs::file_size(complete, ec); !ec) {
    if (held != put.size_bytes) {
      return fail(Errc::conflict, fmt::format("the coordinator holds artifact {} with {} bytes, not {}; the size "
                                              "given is wrong",
                                              put.sha256, held, put.size_bytes));
    }
    progress.received_bytes = held;
    progress.complete = true;
    return progress;
  }
  const std::string partial = partial_path(put.sha256);
  const auto partial_size = fs::file_size(partial, ec);
  progress.received_bytes = ec ? 0 : partial_size;
  if (put.data.empty() && put.size_bytes != 0) return progress;
  if (put.offset != progress.received_bytes) return progress;
  if (put.offset + put.data.size() > put.size_bytes) {
    return fail(Errc::invalid_argument, fmt::format("the piece at offset {} of {} bytes runs past the artifact's "
                                                    "size_bytes of {}",
                                                    put.offset, put.data.size(), put.size_bytes));
  }
  if (auto ok = append(partial, put.data); !ok) return tl::unexpected(ok.error());
  progress.received_bytes += put.data.size();
  if (progress.received_bytes < put.size_bytes) return progress;
  auto digest = sha256_of_file(partial, max_artifact_bytes_);
  if (!digest) return tl::unexpected(digest.error());
  if (*digest != put.sha256) {
    fs::remove(partial, ec);
    return fail(Errc::integrity, fmt::format("the {} bytes uploaded as artifact {} have SHA-256 {}; the upload was "
                                             "discarded: upload the file again, from offset 0",
                                             put.size_bytes, put.sha256, *digest));
  }
  fs::rename(partial, complete, ec);
  if (ec) {
    return fail(Errc::io, fmt::format("cannot move {} into place: {}; check the artifact directory", partial,
                                      ec.message()));
  }
  progress.complete = true;
  return progress;
}

Result<protocol::ArtifactChunk> ArtifactStore::get(const protocol::GetArtifact& get,
                                                   std::size_t max_chunk_bytes) const {
  if (!protocol::is_sha256_hex(get.sha256)) return tl::unexpected(not_a_digest(get.sha256).error());
  const std::string path = complete_path(get.sha256);
  std::error_code ec;
  const auto size = fs::file_size(path, ec);
  if (ec) {
    return fail(Errc::not_found, fmt::format("the coordinator holds no artifact {}; upload it first (kiln-qualifier "
                                             "does for its runs) or name an HTTP artifact store in agent.toml",
                                             get.sha256));
  }
  if (get.offset > size) {
    return fail(Errc::invalid_argument,
                fmt::format("offset {} is past the end of artifact {} ({} bytes)", get.offset, get.sha256, size));
  }
  protocol::ArtifactChunk chunk{get.sha256, size, get.offset, {}};
  const std::size_t want =
      static_cast<std::size_t>(std::min<std::uint64_t>({get.max_bytes, max_chunk_bytes, size - get.offset}));
  chunk.data.resize(want);
  std::ifstream in(path, std::ios::binary);
  in.seekg(static_cast<std::streamoff>(get.offset));
  in.read(chunk.data.data(), static_cast<std::streamsize>(want));
  if (!in) return fail(Errc::io, fmt::format("cannot read artifact {} from {}", get.sha256, path));
  return chunk;
}

}  // namespace kiln::coordinator

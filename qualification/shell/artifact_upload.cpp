#include "qualification/shell/artifact_upload.h"

#include <fstream>

#include <fmt/format.h>

#include "common/sha256.h"

namespace kiln::qualification::shell {
namespace {

// Each put_artifact's bytes: well within the default 1 MiB message limit.
constexpr std::size_t kPieceBytes = 256 * 1024;
// Files above this are not job inputs the coordinator should carry; it refuses them anyway.
constexpr std::uint64_t kMaxFileBytes = 1ULL << 40;

}  // namespace

Result<protocol::ArtifactRef> upload_artifact(cli::Client& client, const std::string& name,
                                              const std::filesystem::path& file) {
  auto digest = sha256_of_file(file.string(), kMaxFileBytes);
  if (!digest) {
    return fail(digest.error().code, fmt::format("cannot upload {} as artifact {}: {}", file.string(), name,
                                                 digest.error().message));
  }
  std::error_code ec;
  const std::uint64_t size = std::filesystem::file_size(file, ec);
  if (ec) return fail(Errc::io, fmt::format("cannot read the size of {}: {}", file.string(), ec.message()));
  protocol::ArtifactRef artifact{name, *digest, size};
  std::ifstream in(file, std::ios::binary);
  protocol::PutArtifact piece{artifact.sha256, size, 0, {}};
  for (;;) {
    auto progress = cli::expect_reply<protocol::ArtifactProgress>(client.request(piece));
    if (!progress) {
      return fail(progress.error().code, fmt::format("uploading {} ({}) to the coordinator failed: {}",
                                                     file.string(), artifact.sha256, progress.error().message));
    }
    if (progress->complete) return artifact;
    // The file changed under us, or the coordinator's copy is longer than the file: start over
    // would not help, the bytes are no longer the digest's.
    if (progress->received_bytes >= size) {
      return fail(Errc::conflict, fmt::format("the coordinator has all {} bytes of {} but not its digest; {} changed "
                                              "while it was uploaded, try again",
                                              size, artifact.sha256, file.string()));
    }
    piece.offset = progress->received_bytes;
    piece.data.resize(static_cast<std::size_t>(std::min<std::uint64_t>(kPieceBytes, size - piece.offset)));
    in.seekg(static_cast<std::streamoff>(piece.offset));
    in.read(piece.data.data(), static_cast<std::streamsize>(piece.data.size()));
    if (!in) return fail(Errc::io, fmt::format("cannot read {} at offset {}", file.string(), piece.offset));
  }
}

}  // namespace kiln::qualification::shell

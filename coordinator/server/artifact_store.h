// The coordinator's content-addressed artifact store (docs/protocol.md §14): files a job needs,
// uploaded by clients in pieces (put_artifact) and read by agents (get_artifact), each kept
// under its SHA-256 in a directory beside the database:
//   <dir>/sha256/<digest>   complete, verified artifacts
//   <dir>/partial/<digest>  uploads under way; one resumes where the last piece ended
// Files, so this is shell code; the core never sees artifact bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "common/error.h"
#include "common/protocol/messages.h"

namespace kiln::coordinator {

class ArtifactStore {
 public:
  // Creates the directories when missing.
  static Result<ArtifactStore> open(std::string dir, std::uint64_t max_artifact_bytes);

  // Appends the piece when it starts where the upload stands (else only says where it stands,
  // so the client resumes from there); once the last byte is in, the file's digest must be the
  // one named (else the upload is discarded, Errc::integrity) and the artifact is stored.
  Result<protocol::ArtifactProgress> put(const protocol::PutArtifact& put);

  // Up to min(get.max_bytes, max_chunk_bytes) bytes at get.offset.
  Result<protocol::ArtifactChunk> get(const protocol::GetArtifact& get, std::size_t max_chunk_bytes) const;

  // The size of a stored artifact; none when it is not (completely) stored.
  std::optional<std::uint64_t> size_of(const std::string& digest) const;

  const std::string& dir() const { return dir_; }

 private:
  ArtifactStore(std::string dir, std::uint64_t max_artifact_bytes)
      : dir_(std::move(dir)), max_artifact_bytes_(max_artifact_bytes) {}
  std::string complete_path(const std::string& digest) const;
  std::string partial_path(const std::string& digest) const;

  std::string dir_;
  std::uint64_t max_artifact_bytes_ = 0;
};

}  // namespace kiln::coordinator

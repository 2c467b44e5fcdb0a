// Uploading a job's files to the coordinator's artifact store (put_artifact), so agents without
// the submitter's directories fetch them by digest (docs/protocol.md §14).
#pragma once

#include <filesystem>
#include <string>

#include "common/error.h"
#include "common/protocol/messages.h"
#include "client/client.h"

namespace kiln::qualification::shell {

// The file's digest and size, and the coordinator holding it: a file it has already costs one
// round trip, an interrupted upload resumes where the coordinator's copy ends. The artifact
// is named `name` in the job.
Result<protocol::ArtifactRef> upload_artifact(cli::Client& client, const std::string& name,
                                              const std::filesystem::path& file);

}  // namespace kiln::qualification::shell

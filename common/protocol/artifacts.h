// A job's artifacts (docs/protocol.md §14): the rules both peers hold them to, and how the
// agent turns {artifact:NAME} in a job's args into the path of the verified file. Pure: no files.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "common/protocol/messages_types.h"

namespace kiln::protocol {

// 64 lowercase hex digits.
bool is_sha256_hex(std::string_view text);

// Why `name` cannot be an artifact's file name, or nothing: letters, digits, '.', '_' and '-',
// not starting with '.' (so never "..", a hidden file or a path).
std::optional<std::string> artifact_name_problem(std::string_view name);

// The artifacts are well formed (names valid and distinct, digests lowercase hex) and every
// {artifact:NAME} in the args names one of them. Errc::invalid_argument saying what to fix.
Status check_job_artifacts(const std::vector<std::string>& args, const std::vector<ArtifactRef>& artifacts);

// The args with each {artifact:NAME} replaced by <artifacts_dir>/NAME and each {artifacts} by
// artifacts_dir; other text, braces included, stays as it is. Fails as check_job_artifacts does.
Result<std::vector<std::string>> substitute_artifacts(const std::vector<std::string>& args,
                                                      const std::vector<ArtifactRef>& artifacts,
                                                      const std::string& artifacts_dir);

}  // namespace kiln::protocol

// release.toml: where `kiln release` works and whom it tells. The working clone of the
// environments repository, the remote it pushes promotion branches and merges to, and the forge
// (Gitea or GitLab) on which it opens a pull request for each promotion. docs/releases.md.
#pragma once

#include <string>

#include "common/error.h"
#include "common/time.h"

namespace kiln::release {

struct ForgeConfig {
  std::string kind;     // "gitea" or "gitlab"; empty: no forge
  std::string api_url;  // http://host:port/api/v1 (Gitea) or http://host/api/v4 (GitLab)
  std::string project;  // owner/name (Gitea), the project's path or id (GitLab)
  std::string token_file;
  DurationMs timeout_ms = 10000;
};

struct ReleaseConfig {
  std::string repo;                 // the working clone
  std::string main_branch = "main";
  std::string remote;               // push here; empty: everything stays in the clone
  ForgeConfig forge;
};

// Reads release.toml's [release] table. Errc::config with file:line:column for a bad file.
Result<ReleaseConfig> load_release_config(const std::string& path);
Result<ReleaseConfig> release_config_from_text(std::string_view text, const std::string& path);

}  // namespace kiln::release

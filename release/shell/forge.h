// Opens the pull (merge) request of a pushed promotion branch on a forge, over its HTTP API:
// Gitea's POST /repos/{owner}/{repo}/pulls or GitLab's POST /projects/{id}/merge_requests.
// libcurl stays inside forge.cpp.
#pragma once

#include <string>

#include "common/error.h"
#include "release/shell/release_config.h"

namespace kiln::release {

struct PullRequest {
  std::string title;
  std::string body;
  std::string head;  // the promotion branch
  std::string base;  // main
};

// The forge's URL of the new request (its html_url / web_url), or "" when it gave none.
// Errc::config for a token file that cannot be read or is empty, Errc::unavailable when the forge
// cannot be reached or answers 5xx, Errc::conflict for 409 (already open), Errc::internal for
// other statuses; each message names the URL and the status.
Result<std::string> open_pull_request(const ForgeConfig& forge, const PullRequest& request);

}  // namespace kiln::release

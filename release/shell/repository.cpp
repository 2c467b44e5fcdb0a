#include "release/shell/repository.h"

#include <map>
#include <sstream>

#include <fmt/format.h>

namespace kiln::release {

Result<Snapshot> snapshot_at(const Git& git, const std::string& rev) {
  auto listing = git.check({"ls-tree", "-r", "--name-only", rev});
  if (!listing) return tl::unexpected(listing.error());
  std::map<std::string, std::string> files;
  std::istringstream paths(*listing);
  for (std::string path; std::getline(paths, path);) {
    if (path.empty() || !path.ends_with(".toml")) continue;
    if (!path.starts_with("bundles/") && !path.starts_with("environments/") && path != kCompatibilityPath) continue;
    auto text = git.check({"show", rev + ":" + path});
    if (!text) return tl::unexpected(text.error());
    files[path] = std::move(*text);
  }
  auto snapshot = read_snapshot(files);
  if (!snapshot) {
    return fail(snapshot.error().code,
                fmt::format("the environments repository at {}: {}", rev, snapshot.error().message));
  }
  return snapshot;
}

}  // namespace kiln::release

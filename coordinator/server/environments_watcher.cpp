#include "coordinator/server/environments_watcher.h"

#include <chrono>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "release/shell/repository.h"

namespace kiln::coordinator {

EnvironmentsWatcher::EnvironmentsWatcher(std::string repo, std::string branch, std::uint32_t poll_interval_ms)
    : repo_(std::move(repo)), branch_(std::move(branch)), poll_interval_ms_(poll_interval_ms) {
  thread_ = std::thread([this] { run(); });
}

EnvironmentsWatcher::~EnvironmentsWatcher() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

std::optional<Result<DesiredFleet>> EnvironmentsWatcher::take() {
  std::lock_guard lock(mutex_);
  return std::exchange(latest_, std::nullopt);
}

void EnvironmentsWatcher::run() {
  // Reads only: the identity is never used for a commit.
  const release::Git git(repo_, "kiln-coordinator", 30000);
  for (;;) {
    Result<DesiredFleet> reading = [&]() -> Result<DesiredFleet> {
      auto commit = git.check({"rev-parse", "--verify", "--quiet", branch_ + "^{commit}"});
      if (!commit) {
        return fail(Errc::unavailable, fmt::format("cannot read branch {} of the environments repository {}: {}; "
                                                   "check [environments] repo and branch in coordinator.toml",
                                                   branch_, repo_, commit.error().message));
      }
      while (!commit->empty() && commit->back() == '\n') commit->pop_back();
      auto snapshot = release::snapshot_at(git, *commit);
      if (!snapshot) return tl::unexpected(snapshot.error());
      return desired_fleet(repo_, *commit, *snapshot);
    }();
    std::unique_lock lock(mutex_);
    latest_ = std::move(reading);
    if (wake_.wait_for(lock, std::chrono::milliseconds(poll_interval_ms_), [&] { return stopping_; })) return;
  }
}

DesiredFleet desired_fleet(const std::string& repo, const std::string& commit, const release::Snapshot& snapshot) {
  DesiredFleet fleet{repo, commit, {}};
  for (const auto& [name, desired] : release::desired_state(snapshot)) {
    DesiredEnvironment environment;
    environment.name = name;
    environment.nodes = desired.nodes;
    environment.node_labels = desired.node_labels;
    if (desired.bundle) {
      environment.bundle_id = desired.bundle->id;
      for (auto [layer, package] : environment.packages()) {
        const auto pinned = desired.bundle->layers.find(std::string(layer));
        if (pinned == desired.bundle->layers.end()) continue;
        package->version = pinned->second.version;
        const std::string_view digest = pinned->second.digest;
        package->sha256 = std::string(digest.starts_with("sha256:") ? digest.substr(7) : digest);
      }
    }
    fleet.environments.push_back(std::move(environment));
  }
  return fleet;
}

}  // namespace kiln::coordinator

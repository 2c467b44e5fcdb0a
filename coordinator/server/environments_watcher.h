// Watches the environments repository for the coordinator's rollouts: a thread reads the
// watched branch every poll interval with git by argv (so a slow disk or a large repository
// never holds up the poll loop) and leaves the newest reading for the loop to take.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "common/error.h"
#include "coordinator/core/rollouts.h"
#include "release/environments.h"

namespace kiln::coordinator {

class EnvironmentsWatcher {
 public:
  EnvironmentsWatcher(std::string repo, std::string branch, std::uint32_t poll_interval_ms);
  ~EnvironmentsWatcher();
  EnvironmentsWatcher(const EnvironmentsWatcher&) = delete;
  EnvironmentsWatcher& operator=(const EnvironmentsWatcher&) = delete;

  // The reading made since the last call, if any: the desired fleet (package sizes not filled
  // in: the artifact store knows them), or why the branch could not be read.
  std::optional<Result<DesiredFleet>> take();

 private:
  void run();

  std::string repo_;
  std::string branch_;
  std::uint32_t poll_interval_ms_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::optional<Result<DesiredFleet>> latest_;
  std::thread thread_;
};

// What the repository's files at `commit` ask of the fleet.
DesiredFleet desired_fleet(const std::string& repo, const std::string& commit, const release::Snapshot& snapshot);

}  // namespace kiln::coordinator

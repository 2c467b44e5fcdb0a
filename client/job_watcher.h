// Follows jobs the way a waiting client should: by watch_jobs long polls, so that it asks the
// coordinator once per change of its jobs (and once per wait_ms of silence) whatever their
// duration; by get_job polls every poll interval only when the coordinator is older than
// watch_jobs and refuses it (docs/protocol.md, "watch_jobs"). No safety poll is needed: a watch
// lost with its connection (a restart, a failover) is asked again on the new one (Client: it may
// be repeated), and as it says what was seen, whatever changed meanwhile is answered at once.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <vector>

#include "common/error.h"
#include "common/protocol/messages.h"
#include "client/client.h"

namespace kiln::cli {

class JobWatcher {
 public:
  // `wait_ms`: how long one watch may wait for a change; `poll_interval`: between get_job polls
  // of an older coordinator.
  JobWatcher(Client& client, std::uint32_t wait_ms, std::chrono::milliseconds poll_interval)
      : client_(client), wait_ms_(wait_ms), poll_interval_(poll_interval), polling_(!client.watches_jobs()) {}

  // Follows a job from now on; the next call of changes() reports it as it is.
  void follow(std::uint64_t job_id);
  // Stops following a job (it ended, and its follower is done with it).
  void forget(std::uint64_t job_id) { jobs_.erase(job_id); }
  void set_wait_ms(std::uint32_t wait_ms) { wait_ms_ = wait_ms; }

  // Waits for a change of a job followed (at most wait_ms, or one poll interval) and returns the
  // jobs that changed, as they are now: none when nothing did. A job new to it is reported at once.
  Result<std::vector<protocol::JobSummary>> changes();
  // True once the coordinator refused watch_jobs: it is followed by polling.
  bool polling() const { return polling_; }

 private:
  struct Followed {
    protocol::JobSummary job;
    bool reported = false;
  };
  Result<std::vector<protocol::JobSummary>> watch();
  Result<std::vector<protocol::JobSummary>> poll();
  // Reads a job with get_job (one the coordinator let go of, or every job when polling).
  Result<protocol::JobSummary> read(std::uint64_t job_id);
  std::vector<protocol::JobSummary> take_changed(const std::vector<protocol::JobSummary>& now);

  Client& client_;
  std::uint32_t wait_ms_;
  std::chrono::milliseconds poll_interval_;
  std::map<std::uint64_t, Followed> jobs_;
  bool polling_;
  bool polled_once_ = false;
};

}  // namespace kiln::cli

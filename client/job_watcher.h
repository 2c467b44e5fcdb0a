// Follows jobs, leases and the node list the way a waiting client should: by watch_jobs long
// polls, so that it asks the coordinator once per change of what it follows (and once per wait_ms
// of silence) whatever the jobs' duration; by get_job and list_leases polls every poll interval
// only when the coordinator is older than watch_jobs and refuses it (docs/protocol.md,
// "watch_jobs"). A coordinator that knows watch_jobs but not its leases and nodes_revision (its
// replies carry no nodes_revision) has the leases polled after each watch, a poll interval apart,
// and the node list reported as changed every time, so that its callers read it as before.
// No safety poll is needed: a watch lost with its connection (a restart, a failover) is asked
// again on the new one (Client: it may be repeated), and as it says what was seen, whatever
// changed meanwhile is answered at once.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <vector>

#include "common/error.h"
#include "common/protocol/messages.h"
#include "client/client.h"

namespace kiln::cli {

// What changed since the last call of JobWatcher::changes().
struct WatchedChanges {
  std::vector<protocol::JobSummary> jobs;      // followed jobs, as they are now
  // Followed leases, as they are now; one the coordinator no longer holds as `ended`.
  std::vector<protocol::LeaseSummary> leases;
  // The node list may differ from the revision given to follow_nodes: read it again.
  bool nodes_changed = false;

  bool empty() const { return jobs.empty() && leases.empty() && !nodes_changed; }
};

// A followed lease the coordinator no longer holds (it ended long enough ago to be forgotten), as
// it is reported: ended, saying so.
protocol::LeaseSummary ended_lease(std::uint64_t lease_id);

class JobWatcher {
 public:
  // `wait_ms`: how long one watch may wait for a change; `poll_interval`: between polls of an
  // older coordinator.
  JobWatcher(Client& client, std::uint32_t wait_ms, std::chrono::milliseconds poll_interval)
      : client_(client), wait_ms_(wait_ms), poll_interval_(poll_interval), polling_(!client.watches_jobs()) {}

  // Follows a job from now on; the next call of changes() reports it as it is.
  void follow(std::uint64_t job_id);
  // Stops following a job (it ended, and its follower is done with it).
  void forget(std::uint64_t job_id) { jobs_.erase(job_id); }
  // Follows a lease likewise (a gang's, until it is granted).
  void follow_lease(std::uint64_t lease_id);
  void forget_lease(std::uint64_t lease_id) { leases_.erase(lease_id); }
  // Follows the node list from `revision`, as node_list gave it (0: the coordinator is older than
  // revisions, and every call of changes() says the list may have changed).
  void follow_nodes(std::uint64_t revision);
  void set_wait_ms(std::uint32_t wait_ms) { wait_ms_ = wait_ms; }

  // Waits for a change of what is followed (at most wait_ms, or one poll interval) and returns
  // it: nothing when nothing changed. A job or lease new to it is reported at once.
  Result<WatchedChanges> changes();
  // True once the coordinator refused watch_jobs: jobs are followed by polling.
  bool polling() const { return polling_; }
  // Whether the coordinator pushes the leases' and the node list's changes (it said so in a reply).
  bool pushes_leases_and_nodes() const { return pushes_ == Pushes::yes; }

 private:
  struct Followed {
    protocol::JobSummary job;
    bool reported = false;
  };
  struct FollowedLease {
    protocol::LeaseSummary lease;
    bool reported = false;
  };
  enum class Pushes { unknown, yes, no };

  Result<WatchedChanges> watch();
  Result<WatchedChanges> poll();
  // Reads a job with get_job (one the coordinator let go of, or every job when polling).
  Result<protocol::JobSummary> read(std::uint64_t job_id);
  // Reads the followed leases with list_leases (a coordinator that does not push them).
  Result<std::vector<protocol::LeaseSummary>> read_leases();
  std::vector<protocol::JobSummary> take_changed(const std::vector<protocol::JobSummary>& now);
  std::vector<protocol::LeaseSummary> take_changed_leases(const std::vector<protocol::LeaseSummary>& now);

  Client& client_;
  std::uint32_t wait_ms_;
  std::chrono::milliseconds poll_interval_;
  std::map<std::uint64_t, Followed> jobs_;
  std::map<std::uint64_t, FollowedLease> leases_;
  bool follows_nodes_ = false;
  std::uint64_t nodes_revision_ = 0;
  bool polling_;
  Pushes pushes_ = Pushes::unknown;
  bool polled_once_ = false;
};

}  // namespace kiln::cli

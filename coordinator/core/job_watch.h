// Parked watch_jobs requests (docs/protocol.md, "watch_jobs"): a client that follows jobs (kiln
// submit --wait, a qualification run) asks once per change of what it follows, not once per poll.
// A watch names each job with the state and attempt its client last saw, each lease with the
// state it last saw, and optionally the node list's revision it last read; it is answered at once
// when one of them differs (or the coordinator does not hold a job or lease of it), else parked
// until a job or lease of it is saved in another state (or attempt), or a node saved when it
// follows the node list, or until its wait passes. The core's rooms do not know of it: the router
// hands it every job, lease and node saved (action::SaveJob, SaveLease, SaveNode), in order.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/protocol/messages.h"
#include "common/time.h"
#include "coordinator/core/actions.h"
#include "coordinator/core/records.h"

namespace kiln::coordinator {

class JobWatches {
 public:
  // The lease of an id as the core holds it; nullptr when it holds none.
  using LeaseLookup = std::function<const protocol::LeaseSummary*(std::uint64_t lease_id)>;

  // At most `max_parked` watches parked at once, and `max_parked_per_client` of one connection.
  // The node list's first revision is the wall clock at start, so that a revision read from an
  // earlier run of the coordinator is never taken for one of this run.
  JobWatches(ActionSink& sink, std::size_t max_parked, std::size_t max_parked_per_client, TimeMs start_wall_ms)
      : sink_(sink), max_parked_(max_parked), max_parked_per_client_(max_parked_per_client),
        nodes_revision_(static_cast<std::uint64_t>(std::max<TimeMs>(1, start_wall_ms))) {}

  // A watch_jobs of `client` (its request id `corr`), over the jobs and leases the core holds.
  void watch(const std::string& client, std::uint64_t corr, const protocol::WatchJobs& watch,
             const std::map<std::uint64_t, JobRecord>& jobs, const LeaseLookup& leases, TimeMs now);
  // A job as it was saved: the parked watches it is news to are answered with it.
  void job_saved(const JobRecord& job);
  // A lease as it was saved: likewise.
  void lease_saved(const protocol::LeaseSummary& lease);
  // A node's record was saved at `wall_ms`: the node list has a new revision, and the parked
  // watches that follow it are answered.
  void node_saved(TimeMs wall_ms);
  // The parked watches whose wait has passed are answered with nothing changed.
  void answer_due(TimeMs now);
  std::optional<TimeMs> next_deadline() const;
  std::size_t parked() const { return parked_.size(); }
  // What node_list carries: a watch naming another revision is answered at once.
  std::uint64_t nodes_revision() const { return nodes_revision_; }

 private:
  struct Parked {
    std::string client;
    std::uint64_t corr = 0;
    std::map<std::uint64_t, protocol::WatchedJob> seen;           // by job id
    std::map<std::uint64_t, protocol::LeaseState> seen_leases;    // by lease id
    bool follows_nodes = false;
    TimeMs deadline_ms = 0;
  };
  void park(const std::string& client, std::uint64_t corr, const protocol::WatchJobs& watch, TimeMs now);
  void answer(std::uint64_t number, protocol::JobEvents events);

  ActionSink& sink_;
  std::size_t max_parked_;
  std::size_t max_parked_per_client_;
  std::uint64_t nodes_revision_;
  std::uint64_t next_number_ = 1;
  std::map<std::uint64_t, Parked> parked_;                       // by watch number
  std::multimap<std::uint64_t, std::uint64_t> by_job_;           // job id -> watch number
  std::multimap<std::uint64_t, std::uint64_t> by_lease_;         // lease id -> watch number
  std::set<std::uint64_t> following_nodes_;                      // watch numbers
  std::set<std::pair<TimeMs, std::uint64_t>> deadlines_;         // deadline, watch number
  std::map<std::string, std::size_t> parked_by_client_;
};

}  // namespace kiln::coordinator

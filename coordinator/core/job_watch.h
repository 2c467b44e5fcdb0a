// Parked watch_jobs requests (docs/protocol.md, "watch_jobs"): a client that follows jobs (kiln
// submit --wait, a qualification run) asks once per change of its jobs, not once per poll. A
// watch names each job with the state and attempt its client last saw; it is answered at once
// when one of them differs (or the coordinator does not hold the job), else parked until a job
// of it is saved in another state or attempt, or until its wait passes. The core's rooms do not
// know of it: the router hands it every job saved (action::SaveJob), in order.
#pragma once

#include <cstdint>
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
  // At most `max_parked` watches parked at once, and `max_parked_per_client` of one connection.
  JobWatches(ActionSink& sink, std::size_t max_parked, std::size_t max_parked_per_client)
      : sink_(sink), max_parked_(max_parked), max_parked_per_client_(max_parked_per_client) {}

  // A watch_jobs of `client` (its request id `corr`), over the jobs the core holds.
  void watch(const std::string& client, std::uint64_t corr, const protocol::WatchJobs& watch,
             const std::map<std::uint64_t, JobRecord>& jobs, TimeMs now);
  // A job as it was saved: the parked watches it is news to are answered with it.
  void job_saved(const JobRecord& job);
  // The parked watches whose wait has passed are answered with no job.
  void answer_due(TimeMs now);
  std::optional<TimeMs> next_deadline() const;
  std::size_t parked() const { return parked_.size(); }

 private:
  struct Parked {
    std::string client;
    std::uint64_t corr = 0;
    std::map<std::uint64_t, protocol::WatchedJob> seen;  // by job id
    TimeMs deadline_ms = 0;
  };
  void answer(std::uint64_t number, protocol::JobEvents events);

  ActionSink& sink_;
  std::size_t max_parked_;
  std::size_t max_parked_per_client_;
  std::uint64_t next_number_ = 1;
  std::map<std::uint64_t, Parked> parked_;                       // by watch number
  std::multimap<std::uint64_t, std::uint64_t> by_job_;           // job id -> watch number
  std::set<std::pair<TimeMs, std::uint64_t>> deadlines_;         // deadline, watch number
  std::map<std::string, std::size_t> parked_by_client_;
};

}  // namespace kiln::coordinator

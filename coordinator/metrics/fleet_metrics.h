// What the coordinator's /metrics says (docs/metrics.md): the fleet and its queue. Pure. The
// gauges are read from the core's state when asked for; the counters and the queue-wait
// histogram follow the jobs and leases the core saves and the audit lines it writes, as the
// server carries those actions out. Everything here runs on the server's loop thread, the one
// that owns the core.
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "common/metrics/exposition.h"
#include "common/protocol/messages.h"
#include "common/time.h"
#include "coordinator/core/coordinator_core.h"
#include "coordinator/core/records.h"

namespace kiln::coordinator {

// Client request buckets, in seconds: half a millisecond to ten seconds.
inline const std::vector<double> kClientRequestBucketsSeconds = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                                                 0.1,    0.25,  0.5,    1,     2.5,  5,     10};
// Store commit buckets, in seconds: a tenth of a millisecond (an fsync on a local SSD) to ten seconds.
inline const std::vector<double> kStoreCommitBucketsSeconds = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005,
                                                               0.01,   0.025,   0.05,   0.1,   0.25,   0.5,
                                                               1,      2.5,     5,      10};
// A request whose answer has not gone out after this long is forgotten (a client that asked for
// no answer, or a bug): the table of requests awaiting answers stays bounded.
inline constexpr std::int64_t kForgetUnansweredUs = 60'000'000;

// Queue wait buckets, in seconds: a second to a day.
inline const std::vector<double> kQueueWaitBucketsSeconds = {1,    5,    15,    30,    60,    120,   300,
                                                            600,  1800, 3600,  7200,  14400, 43200, 86400};

class FleetMetrics {
 public:
  // `recovered`: the jobs and leases the core holds at start-up; the active ones are followed
  // from here (a queued job's wait counts from its submission), the ended ones are not counted
  // again. `quarantined_at_wall_ms`: when each node was last quarantined, from the audit log.
  FleetMetrics(const std::map<std::uint64_t, JobRecord>& recovered_jobs,
               const std::vector<protocol::LeaseSummary>& recovered_leases,
               std::map<std::string, TimeMs> quarantined_at_wall_ms);

  // A job or lease the core saved, at `now_ms` on the core's clock (its records' clock).
  void job_saved(const JobRecord& job, TimeMs now_ms);
  void lease_saved(const LeaseRecord& lease, TimeMs now_ms);
  // A line the core appended to the audit log (quarantines are timed by theirs).
  void audited(const protocol::AuditEntry& entry);
  // A client's request of `type` (its envelope's id `id`) that the loop took, and a message that
  // went out to a client: the first answer to a request (its correlation id) times it, from the
  // loop taking it to its answer leaving after the writes it waited for. `now_us`: a monotonic
  // clock, in microseconds.
  void client_request_taken(const std::string& peer, std::uint64_t id, std::string_view type, std::int64_t now_us);
  void client_answer_sent(const std::string& peer, std::uint64_t corr, std::int64_t now_us);
  // One group commit of the store (the writes of a turn of the loop made durable), `took_us` from
  // its start to its end on the loop.
  void store_committed(std::int64_t took_us);

  // The exposition text, from the core's state now and what was observed.
  std::string render(const CoordinatorCore& core) const;

 private:
  static constexpr std::size_t kClasses = 5;
  using PerClass = std::array<double, kClasses>;

  struct ActiveJob {
    protocol::PriorityClass cls = protocol::PriorityClass::experiment;
    protocol::JobState state = protocol::JobState::queued;
    TimeMs queued_since_ms = 0;
    std::uint32_t preemptions = 0;
  };
  struct ActiveLease {
    protocol::PriorityClass cls = protocol::PriorityClass::experiment;
    protocol::LeaseState state = protocol::LeaseState::pending;
    TimeMs pending_since_ms = 0;
    TimeMs granted_at_ms = 0;  // while granted or under notice
    std::size_t chips = 0;     // held while granted or under notice
  };

  void preempted(protocol::PriorityClass cls, std::uint32_t times, double chip_seconds);

  std::map<std::uint64_t, ActiveJob> jobs_;
  std::map<std::uint64_t, ActiveLease> leases_;
  std::map<std::string, TimeMs> quarantined_at_wall_ms_;
  std::vector<metrics::Histogram> queue_wait_;  // by class
  PerClass preemptions_{};
  PerClass preemption_lost_chip_seconds_{};
  std::map<std::pair<protocol::PriorityClass, protocol::JobState>, double> jobs_finished_;

  struct Awaited {
    std::string type;
    std::int64_t taken_us = 0;
  };
  using RequestKey = std::pair<std::string, std::uint64_t>;  // peer, request id
  std::map<RequestKey, Awaited> awaited_;
  std::deque<std::pair<std::int64_t, RequestKey>> awaited_in_order_;  // to forget the unanswered
  std::map<std::string, metrics::Histogram, std::less<>> client_request_seconds_;  // by request type
  metrics::Histogram store_commit_seconds_{kStoreCommitBucketsSeconds};
};

// The newest "quarantined" audit line of each node among `lines` (oldest first): the time the
// gauge kiln_node_quarantined_since_timestamp_seconds reports after a coordinator restart.
std::map<std::string, TimeMs> quarantine_times(const std::vector<protocol::AuditEntry>& lines);

}  // namespace kiln::coordinator

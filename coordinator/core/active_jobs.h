// The active jobs (queued, assigned or running) indexed by what the core asks of them at every
// message: how many wait, which are on a node, which chips of a node they hold, and when the next
// placed one times out. Kept up to date from every save of a job, so that a submission, a
// heartbeat or a turn of the loop costs the same with ten queued jobs or ten thousand.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "common/time.h"
#include "coordinator/core/records.h"

namespace kiln::coordinator {

class ActiveJobIndex {
 public:
  // The job as saved: indexed while queued, assigned or running, dropped once it ends.
  // `timeout_slack_ms` is added to its timeout (CoordinatorKnobs::job_timeout_slack_ms).
  void update(const JobRecord& job, DurationMs timeout_slack_ms);

  std::size_t queued() const { return queued_; }
  // Active jobs whose record names this node (queued pinned ones included).
  const std::set<std::uint64_t>& on_node(const std::string& node_id) const;
  // Active jobs submitted into this developer lease, in id order.
  const std::set<std::uint64_t>& in_lease(std::uint64_t lease_id) const;
  const std::map<std::uint64_t, std::set<std::uint64_t>>& by_lease() const { return by_lease_; }
  // The chips the assigned and running jobs on the node hold.
  std::set<std::uint32_t> chips_on(const std::string& node_id) const;
  // When the first assigned or running job passes its timeout plus the slack.
  std::optional<TimeMs> next_timeout() const;
  // Assigned or running jobs past their timeout plus the slack at `now`, in id order.
  std::vector<std::uint64_t> overdue(TimeMs now) const;
  // The nodes whose assigned or running jobs changed since the last call.
  std::set<std::string> take_nodes_changed() { return std::exchange(nodes_changed_, {}); }

 private:
  struct Entry {
    bool queued = true;
    std::string node_id;
    std::uint64_t lease_id = 0;        // the developer lease it runs in, 0 for none
    std::vector<std::uint32_t> chips;  // when placed
    TimeMs timeout_at_ms = 0;          // when placed: the first time it is overdue
  };
  void drop(std::uint64_t job_id, const Entry& entry);

  std::map<std::uint64_t, Entry> entries_;
  std::size_t queued_ = 0;
  std::map<std::string, std::set<std::uint64_t>> by_node_;
  std::map<std::string, std::set<std::uint64_t>> placed_by_node_;  // assigned or running
  std::map<std::uint64_t, std::set<std::uint64_t>> by_lease_;
  std::set<std::pair<TimeMs, std::uint64_t>> timeouts_;
  std::set<std::string> nodes_changed_;
};

}  // namespace kiln::coordinator

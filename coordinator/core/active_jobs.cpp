#include "coordinator/core/active_jobs.h"

#include <algorithm>

namespace kiln::coordinator {

namespace {

bool is_active(protocol::JobState state) {
  return state == protocol::JobState::queued || state == protocol::JobState::assigned ||
         state == protocol::JobState::running;
}

const std::set<std::uint64_t> kNoJobs;

template <class Key>
void erase_from(std::map<Key, std::set<std::uint64_t>>& by_key, const Key& key, std::uint64_t job_id) {
  auto on = by_key.find(key);
  if (on == by_key.end()) return;
  on->second.erase(job_id);
  if (on->second.empty()) by_key.erase(on);
}

}  // namespace

void ActiveJobIndex::drop(std::uint64_t job_id, const Entry& entry) {
  if (entry.queued) {
    --queued_;
  } else {
    timeouts_.erase({entry.timeout_at_ms, job_id});
    nodes_changed_.insert(entry.node_id);
    erase_from(placed_by_node_, entry.node_id, job_id);
  }
  if (!entry.node_id.empty()) erase_from(by_node_, entry.node_id, job_id);
  if (entry.lease_id != 0) erase_from(by_lease_, entry.lease_id, job_id);
}

void ActiveJobIndex::update(const JobRecord& job, DurationMs timeout_slack_ms) {
  const std::uint64_t id = job.summary.job_id;
  if (auto held = entries_.find(id); held != entries_.end()) {
    drop(id, held->second);
    entries_.erase(held);
  }
  if (!is_active(job.summary.state)) return;
  Entry entry;
  entry.queued = job.summary.state == protocol::JobState::queued;
  entry.node_id = job.summary.node_id;
  entry.lease_id = job.lease_id;
  if (entry.queued) {
    ++queued_;
  } else {
    entry.chips = job.summary.chip_indices;
    // Overdue once now passes started + timeout + slack.
    entry.timeout_at_ms = job.started_at_ms + job.timeout_ms + timeout_slack_ms + 1;
    timeouts_.insert({entry.timeout_at_ms, id});
    nodes_changed_.insert(entry.node_id);
    placed_by_node_[entry.node_id].insert(id);
  }
  if (!entry.node_id.empty()) by_node_[entry.node_id].insert(id);
  if (entry.lease_id != 0) by_lease_[entry.lease_id].insert(id);
  entries_.emplace(id, std::move(entry));
}

const std::set<std::uint64_t>& ActiveJobIndex::on_node(const std::string& node_id) const {
  auto it = by_node_.find(node_id);
  return it == by_node_.end() ? kNoJobs : it->second;
}

const std::set<std::uint64_t>& ActiveJobIndex::in_lease(std::uint64_t lease_id) const {
  auto it = by_lease_.find(lease_id);
  return it == by_lease_.end() ? kNoJobs : it->second;
}

std::set<std::uint32_t> ActiveJobIndex::chips_on(const std::string& node_id) const {
  std::set<std::uint32_t> chips;
  auto placed = placed_by_node_.find(node_id);
  if (placed == placed_by_node_.end()) return chips;
  for (std::uint64_t id : placed->second) {
    const Entry& entry = entries_.at(id);
    chips.insert(entry.chips.begin(), entry.chips.end());
  }
  return chips;
}

std::optional<TimeMs> ActiveJobIndex::next_timeout() const {
  if (timeouts_.empty()) return std::nullopt;
  return timeouts_.begin()->first;
}

std::vector<std::uint64_t> ActiveJobIndex::overdue(TimeMs now) const {
  std::vector<std::uint64_t> out;
  for (auto it = timeouts_.begin(); it != timeouts_.end() && it->first <= now; ++it) out.push_back(it->second);
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace kiln::coordinator

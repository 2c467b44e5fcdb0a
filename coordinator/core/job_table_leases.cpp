// The job table's side of developer leases: the jobs that run inside them.
#include "coordinator/core/job_table.h"

#include <algorithm>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "common/exhaustive.h"
#include "common/protocol/artifacts.h"
#include "common/text/utf8.h"
#include "coordinator/core/core_rules.h"
#include "coordinator/core/job_retention.h"
#include "coordinator/core/lease_lifecycle.h"

namespace kiln::coordinator {

using namespace detail;

void JobTable::cancel_running_in_lease(std::uint64_t lease_id, const std::string& why) {
  for (std::uint64_t id : in_lease(lease_id)) {
    JobRecord& job = jobs_.at(id);
    if (job.summary.state == JobState::queued || job.cancel_requested) continue;
    request_cancel(job, why);
  }
}

void JobTable::dispatch_in_lease(const protocol::LeaseSummary& lease, TimeMs now) {
  std::vector<std::uint64_t> ids = in_lease(lease.lease_id);
  std::map<std::string, std::set<std::uint32_t>> busy;
  for (std::uint64_t id : ids) {
    const JobRecord& job = jobs_.at(id);
    if (job.summary.state == JobState::queued) continue;
    busy[job.summary.node_id].insert(job.summary.chip_indices.begin(), job.summary.chip_indices.end());
  }
  for (std::uint64_t id : ids) {
    JobRecord& job = jobs_.at(id);
    if (job.summary.state != JobState::queued) continue;
    if (job.summary.gang_size > 0) {
      // A gang is placed as a whole, in its place among the lease's jobs: by its rank 0.
      if (job.summary.gang_rank == 0) dispatch_gang(job, lease, busy, now);
      continue;
    }
    for (const auto& p : lease.placement) {
      std::vector<std::uint32_t> free = free_lease_chips(p, busy, job.summary.chips);
      if (free.size() < job.summary.chips) continue;
      busy[p.node_id].insert(free.begin(), free.end());
      start_attempt(job, p.node_id, std::move(free), now);
      break;
    }
  }
}

std::vector<std::uint32_t> JobTable::free_lease_chips(const protocol::LeasePlacement& p,
                                                      const std::map<std::string, std::set<std::uint32_t>>& busy,
                                                      std::uint32_t chips) const {
  if (!ctx_.registry.has_session(p.node_id)) return {};
  // A quarantined node takes only its diagnostics, also on chips a developer's lease holds.
  if (ctx_.registry.nodes().at(p.node_id).summary.state == NodeState::quarantined) return {};
  // Only chips the node reported healthy in its latest hello.
  std::set<std::uint32_t> reported;
  for (const auto& chip : ctx_.registry.nodes().at(p.node_id).summary.chips) {
    if (chip.healthy) reported.insert(chip.index);
  }
  const auto taken = busy.find(p.node_id);
  std::vector<std::uint32_t> free;
  for (std::uint32_t chip : p.chip_indices) {
    if (reported.count(chip) && (taken == busy.end() || !taken->second.count(chip)) && free.size() < chips) {
      free.push_back(chip);
    }
  }
  return free;
}

void JobTable::dispatch_gang(const JobRecord& rank0, const protocol::LeaseSummary& lease,
                             std::map<std::string, std::set<std::uint32_t>>& busy, TimeMs now) {
  const std::uint64_t gang_id = rank0.summary.gang_id;
  // Ranks in order on the lease's nodes in order, each on a node no other rank has.
  std::vector<std::pair<std::string, std::vector<std::uint32_t>>> places;
  std::set<std::string> taken;
  for (std::uint32_t rank = 0; rank < rank0.summary.gang_size; ++rank) {
    const JobRecord& job = jobs_.at(gang_id + rank);
    // A gang that lost a rank is ending: what is left of it does not start.
    if (job.summary.state != JobState::queued) return;
    for (const auto& p : lease.placement) {
      if (taken.count(p.node_id)) continue;
      std::vector<std::uint32_t> free = free_lease_chips(p, busy, job.summary.chips);
      if (free.size() < job.summary.chips) continue;
      taken.insert(p.node_id);
      places.emplace_back(p.node_id, std::move(free));
      break;
    }
    if (places.size() == rank) return;  // this rank has no node yet: none starts
  }
  for (std::uint32_t rank = 0; rank < rank0.summary.gang_size; ++rank) {
    auto& [node_id, chips] = places[rank];
    busy[node_id].insert(chips.begin(), chips.end());
    start_attempt(jobs_.at(gang_id + rank), node_id, std::move(chips), now);
  }
}

void JobTable::take_over_lease_chips(std::uint64_t lease_id, scheduler::LeaseId held, TimeMs now) {
  const TimeMs t = ctx_.to_scheduler_time(now);
  std::vector<scheduler::Scheduler::Handover> handovers;
  std::vector<std::uint64_t> handed;
  for (std::uint64_t id : in_lease(lease_id)) {
    const JobRecord& job = jobs_.at(id);
    if (job.summary.state == JobState::queued || attempts_.own_lease(id)) continue;
    scheduler::Placement placement{job.summary.node_id, {}};
    for (std::uint32_t chip : job.summary.chip_indices) placement.chips.push_back(static_cast<int>(chip));
    handovers.push_back({job_request(job), {placement}, ctx_.to_scheduler_time(job.started_at_ms)});
    handed.push_back(id);
  }
  if (handovers.empty()) {
    (void)ctx_.scheduler().release(held, t);
    return;
  }
  auto leases = ctx_.scheduler().transfer_lease(held, handovers, t);
  if (!leases) {
    ctx_.log(action::Severity::warn, fmt::format("lease L{}: {}", lease_id, leases.error().message));
    return;
  }
  for (std::size_t i = 0; i < handed.size() && i < leases->size(); ++i)
    attempts_.of(handed[i]).own_lease = (*leases)[i];
}

void JobTable::lease_ended(std::uint64_t lease_id, const std::string& why, TimeMs now) {
  for (std::uint64_t id : in_lease(lease_id)) {
    JobRecord& job = jobs_.at(id);
    const std::string reason = fmt::format("its lease L{} ended: {}", lease_id, why);
    if (job.summary.state == JobState::queued) {
      finish(job, JobState::cancelled, reason, now);
    } else if (!job.cancel_requested) {
      request_cancel(job, reason);
    }
  }
}

}  // namespace kiln::coordinator

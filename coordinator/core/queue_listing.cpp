// `list_queue`: the scheduler's queue as people see it, each waiting job or lease with why it
// waits and when it should start. Read-only: it changes nothing in the core or the scheduler.
#include "coordinator/core/scheduler_decisions.h"

#include <algorithm>

#include "common/exhaustive.h"
#include "common/text/utf8.h"
#include "coordinator/core/job_table.h"
#include "coordinator/core/lease_lifecycle.h"

namespace kiln::coordinator {

namespace {
// The reply stays well below the 1 MiB message limit, whatever the reasons say.
constexpr std::size_t kMaxQueueListBytes = 512 * 1024;
}  // namespace

protocol::QueueList SchedulerDecisions::queue_list(const protocol::ListQueue& request, TimeMs now,
                                                   const JobTable& jobs, const LeaseLifecycle& leases) const {
  // The scheduler explains only the head of its queue, one more than the page to know whether
  // there is more; the requests not listed (chips held while an attempt stops) may take places
  // in it, so a head that fell short of the page is asked for again, twice as long.
  for (std::size_t head = std::size_t{request.limit} + 1;; head *= 2) {
    const auto explanations = ctx_.scheduler().explain_queue(ctx_.to_scheduler_time(now), head);
    protocol::QueueList out = queue_page(explanations, request.limit, jobs, leases);
    if (out.more || explanations.size() < head) return out;
  }
}

protocol::QueueList SchedulerDecisions::queue_page(const std::vector<scheduler::Explanation>& explanations,
                                                   std::size_t limit, const JobTable& jobs,
                                                   const LeaseLifecycle& leases) const {
  protocol::QueueList out;
  std::size_t bytes = 0;
  for (const scheduler::Explanation& e : explanations) {
    const auto owner = ctx_.bridge.owner_of(e.request);
    if (!owner) continue;
    protocol::QueueEntry entry;
    const bool listed = std::visit(
        Exhaustive{
            [&](const request_owner::Job& o) {
              const JobRecord* record = jobs.find(o.job_id);
              if (!record) return false;
              const protocol::JobSummary& job = record->summary;
              entry.job_id = job.job_id;
              entry.priority_class = job.priority_class;
              entry.owner = job.submitted_by;
              entry.workload = job.workload;
              entry.chips = job.chips;
              entry.hardware_revision = job.hardware_revision;
              entry.node_id = record->requested_node_id;
              entry.queued_at_ms = static_cast<std::uint64_t>(std::max<TimeMs>(0, record->submitted_at_ms));
              return true;
            },
            [&](const request_owner::DevLease& o) {
              const DevLease* lease = leases.find(o.lease_id);
              if (!lease) return false;
              const protocol::LeaseSummary& l = lease->summary;
              entry.lease_id = l.lease_id;
              entry.priority_class = l.priority_class;
              entry.owner = l.owner;
              entry.chips = l.chips;
              entry.nodes = l.nodes;
              entry.hardware_revision = l.hardware_revision;
              entry.queued_at_ms = l.requested_at_ms;
              return true;
            },
            // Chips held while an attempt stops are not work anyone waits for.
            [](const request_owner::StopHold&) { return false; },
        },
        *owner);
    if (!listed) continue;
    for (const std::string& reason : e.reasons) {
      if (entry.reasons.size() == 64) break;
      entry.reasons.push_back(text::utf8_head(reason, protocol::kMessageText.max_len));
      bytes += entry.reasons.back().size();
    }
    if (e.expected_start_ms) {
      entry.expected_start_ms =
          static_cast<std::uint64_t>(std::max<TimeMs>(0, ctx_.from_scheduler_time(*e.expected_start_ms)));
    }
    bytes += 256;
    if (out.entries.size() >= limit || bytes > kMaxQueueListBytes) {
      out.more = true;
      break;
    }
    out.entries.push_back(std::move(entry));
  }
  return out;
}

}  // namespace kiln::coordinator

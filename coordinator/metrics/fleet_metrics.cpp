#include "coordinator/metrics/fleet_metrics.h"

#include <algorithm>

#include <fmt/format.h>

#include "common/text/utf8.h"

namespace kiln::coordinator {
namespace {

using protocol::JobState;
using protocol::LeaseState;
using protocol::NodeState;
using protocol::PriorityClass;

constexpr auto kClassValues = enum_values<PriorityClass>();
constexpr std::size_t kReasonMaxBytes = 200;

std::size_t index_of(PriorityClass cls) { return static_cast<std::size_t>(cls); }

metrics::Labels class_label(PriorityClass cls) { return {{"class", std::string(protocol::enum_name(cls))}}; }

double seconds(TimeMs ms) { return static_cast<double>(std::max<TimeMs>(ms, 0)) / 1000.0; }

// ready: up with no chip in use; busy: up with some chip in use.
std::string_view node_state_name(const NodeRecord& node) {
  switch (node.summary.state) {
    case NodeState::up: return node.summary.chips_used > 0 ? "busy" : "ready";
    case NodeState::draining: return "draining";
    case NodeState::quarantined: return "quarantined";
    case NodeState::lost: return "lost";
  }
  return "lost";
}

// A quarantine reason as one short line: the first line, cut at a character boundary.
std::string one_line(const std::string& reason) {
  return text::utf8_head(reason.substr(0, reason.find('\n')), kReasonMaxBytes);
}

std::size_t chip_count(const std::vector<protocol::LeasePlacement>& placement) {
  std::size_t chips = 0;
  for (const auto& p : placement) chips += p.chip_indices.size();
  return chips;
}

}  // namespace

FleetMetrics::FleetMetrics(const std::map<std::uint64_t, JobRecord>& recovered_jobs,
                           const std::vector<protocol::LeaseSummary>& recovered_leases,
                           std::map<std::string, TimeMs> quarantined_at_wall_ms)
    : quarantined_at_wall_ms_(std::move(quarantined_at_wall_ms)),
      queue_wait_(kClasses, metrics::Histogram(kQueueWaitBucketsSeconds)) {
  static_assert(kClassValues.size() == kClasses);
  for (const auto& [id, job] : recovered_jobs) {
    if (protocol::is_terminal(job.summary.state)) continue;
    jobs_[id] = ActiveJob{job.summary.priority_class, job.summary.state, job.submitted_at_ms, job.preemptions};
  }
  for (const auto& lease : recovered_leases) {
    if (lease.state == LeaseState::ended) continue;
    leases_[lease.lease_id] = ActiveLease{lease.priority_class, lease.state, static_cast<TimeMs>(lease.requested_at_ms),
                                          static_cast<TimeMs>(lease.granted_at_ms), chip_count(lease.placement)};
  }
}

void FleetMetrics::client_request_taken(const std::string& peer, std::uint64_t id, std::string_view type,
                                        std::int64_t now_us) {
  while (!awaited_in_order_.empty() && awaited_in_order_.front().first + kForgetUnansweredUs < now_us) {
    const auto& [taken_us, key] = awaited_in_order_.front();
    // A peer may reuse an id after its first request was answered: forget only the one taken then.
    if (auto it = awaited_.find(key); it != awaited_.end() && it->second.taken_us == taken_us) awaited_.erase(it);
    awaited_in_order_.pop_front();
  }
  RequestKey key{peer, id};
  awaited_[key] = Awaited{std::string(type), now_us};
  awaited_in_order_.emplace_back(now_us, std::move(key));
}

void FleetMetrics::client_answer_sent(const std::string& peer, std::uint64_t corr, std::int64_t now_us) {
  auto it = awaited_.find(RequestKey{peer, corr});
  if (it == awaited_.end()) return;  // a later message of the same answer, or no request of ours
  auto histogram = client_request_seconds_.find(it->second.type);
  if (histogram == client_request_seconds_.end()) {
    histogram = client_request_seconds_.emplace(it->second.type, metrics::Histogram(kClientRequestBucketsSeconds)).first;
  }
  histogram->second.observe(static_cast<double>(std::max<std::int64_t>(0, now_us - it->second.taken_us)) / 1e6);
  awaited_.erase(it);
}

void FleetMetrics::store_committed(std::int64_t took_us) {
  store_commit_seconds_.observe(static_cast<double>(std::max<std::int64_t>(0, took_us)) / 1e6);
}

void FleetMetrics::preempted(PriorityClass cls, std::uint32_t times, double chip_seconds) {
  preemptions_[index_of(cls)] += times;
  preemption_lost_chip_seconds_[index_of(cls)] += chip_seconds;
}

void FleetMetrics::job_saved(const JobRecord& job, TimeMs now_ms) {
  const JobState state = job.summary.state;
  auto it = jobs_.find(job.summary.job_id);
  if (it == jobs_.end()) {
    // An ended job saved again (a rerun noted on it) was counted when it ended.
    if (protocol::is_terminal(state)) return;
    it = jobs_.emplace(job.summary.job_id,
                       ActiveJob{job.summary.priority_class, JobState::queued, job.submitted_at_ms, job.preemptions})
             .first;
  }
  ActiveJob& active = it->second;
  // A preempted attempt let go of its chips and the job is queued again: the attempt's run, on
  // each of its chips, is the work lost (all of it unless the workload checkpointed).
  if (job.preemptions > active.preemptions) {
    preempted(active.cls, job.preemptions - active.preemptions,
              static_cast<double>(job.summary.chips) * seconds(now_ms - job.started_at_ms));
    active.preemptions = job.preemptions;
  }
  if (state == JobState::queued && active.state != JobState::queued) active.queued_since_ms = now_ms;
  if (active.state == JobState::queued && (state == JobState::assigned || state == JobState::running)) {
    const TimeMs started = job.started_at_ms > 0 ? job.started_at_ms : now_ms;
    queue_wait_[index_of(active.cls)].observe(seconds(started - active.queued_since_ms));
  }
  if (protocol::is_terminal(state)) {
    jobs_finished_[{active.cls, state}] += 1;
    jobs_.erase(it);
    return;
  }
  active.state = state;
}

void FleetMetrics::lease_saved(const LeaseRecord& record, TimeMs now_ms) {
  const protocol::LeaseSummary& lease = record.summary;
  auto it = leases_.find(lease.lease_id);
  if (it == leases_.end()) {
    if (lease.state == LeaseState::ended) return;
    it = leases_.emplace(lease.lease_id, ActiveLease{lease.priority_class, LeaseState::pending, record.requested_at_ms})
             .first;
  }
  ActiveLease& active = it->second;
  if (active.state == LeaseState::pending && lease.state == LeaseState::granted) {
    const TimeMs granted = lease.granted_at_ms > 0 ? static_cast<TimeMs>(lease.granted_at_ms) : now_ms;
    queue_wait_[index_of(active.cls)].observe(seconds(granted - active.pending_since_ms));
  }
  if (lease.state == LeaseState::granted || lease.state == LeaseState::preempting) {
    active.granted_at_ms = static_cast<TimeMs>(lease.granted_at_ms);
    active.chips = chip_count(lease.placement);
  }
  // Out of its notice, requeued or ended: the chips were taken. A developer's lease loses the time
  // it had held them.
  if (active.state == LeaseState::preempting && lease.state != LeaseState::preempting) {
    preempted(active.cls, 1, static_cast<double>(active.chips) * seconds(now_ms - active.granted_at_ms));
  }
  if (lease.state == LeaseState::pending && active.state != LeaseState::pending) active.pending_since_ms = now_ms;
  if (lease.state == LeaseState::ended) {
    leases_.erase(it);
    return;
  }
  active.state = lease.state;
}

void FleetMetrics::audited(const protocol::AuditEntry& entry) {
  const auto times = quarantine_times({entry});
  for (const auto& [node, at_ms] : times) quarantined_at_wall_ms_[node] = at_ms;
}

std::map<std::string, TimeMs> quarantine_times(const std::vector<protocol::AuditEntry>& lines) {
  constexpr std::string_view kNodePrefix = "node ";
  std::map<std::string, TimeMs> times;
  for (const auto& line : lines) {
    if (line.action != "quarantined" || !line.subject.starts_with(kNodePrefix)) continue;
    times[line.subject.substr(kNodePrefix.size())] = line.at_ms;
  }
  return times;
}

std::string FleetMetrics::render(const CoordinatorCore& core) const {
  metrics::Exposition out;
  const auto& nodes = core.nodes();

  out.gauge("kiln_agents_connected", "Agents with a live session with the coordinator.");
  out.sample({}, static_cast<double>(std::count_if(nodes.begin(), nodes.end(), [&](const auto& entry) {
               return core.peer_of(entry.first).has_value();
             })));

  std::map<std::string_view, double> by_state = {{"ready", 0}, {"busy", 0}, {"draining", 0}, {"quarantined", 0},
                                                 {"lost", 0}};
  for (const auto& [id, node] : nodes) by_state[node_state_name(node)] += 1;
  out.gauge("kiln_nodes",
            "Nodes by state: ready (up, no chip in use), busy (up, some chip in use), draining, quarantined, lost.");
  for (const char* state : {"ready", "busy", "draining", "quarantined", "lost"}) out.sample({{"state", state}}, by_state[state]);

  out.gauge("kiln_node_quarantined_since_timestamp_seconds",
            "When each quarantined node was quarantined (Unix seconds), with the reason's first line.");
  for (const auto& [id, node] : nodes) {
    if (node.summary.state != NodeState::quarantined) continue;
    const auto at = quarantined_at_wall_ms_.find(id);
    // Not in the audit lines read: the start of its flapping window, its first quarantine there.
    const TimeMs since_ms = at != quarantined_at_wall_ms_.end() ? at->second : node.flap_window_start_ms;
    out.sample({{"node", id}, {"reason", one_line(node.summary.quarantine_reason)}}, seconds(since_ms));
  }

  PerClass queued{};
  for (const auto& [id, job] : jobs_) {
    if (job.state == JobState::queued) queued[index_of(job.cls)] += 1;
  }
  out.gauge("kiln_jobs_queued", "Jobs waiting for chips, by scheduling class.");
  for (PriorityClass cls : kClassValues) out.sample(class_label(cls), queued[index_of(cls)]);

  out.histogram("kiln_queue_wait_seconds",
                "From entering the queue (submission, or a requeue after preemption or failover) to dispatch, for "
                "jobs; from request to grant for developer leases; by scheduling class.");
  for (PriorityClass cls : kClassValues) out.sample(class_label(cls), queue_wait_[index_of(cls)]);

  out.histogram("kiln_client_request_seconds",
                "From the coordinator's loop taking a client's request to its answer going out, after the writes it "
                "waited for were durable; by request type.");
  for (const auto& [type, histogram] : client_request_seconds_) out.sample({{"type", type}}, histogram);

  out.histogram("kiln_store_commit_seconds",
                "Each group commit of the store, from its start to its end on the coordinator's loop: the writes of "
                "one turn made durable together, before the answers that waited for them go out.");
  out.sample({}, store_commit_seconds_);

  std::map<std::string, double> chips;
  for (const auto& [id, node] : nodes) {
    chips[node.summary.hardware_revision] += node.summary.state == NodeState::lost ? 0 : node.summary.chips_total;
  }
  out.gauge("kiln_chips", "Chips of the nodes that are not lost, by hardware revision.");
  for (const auto& [revision, count] : chips) out.sample({{"hw_revision", revision}}, count);

  std::map<std::pair<std::string, std::string>, double> leased;
  for (PriorityClass cls : kClassValues) {
    for (const auto& [revision, count] : chips) leased[{std::string(protocol::enum_name(cls)), revision}] = 0;
  }
  for (const auto& lease : core.scheduler().leases()) {
    for (const auto& placement : lease.placement) {
      const auto node = nodes.find(placement.node);
      if (node == nodes.end()) continue;
      leased[{std::string(scheduler::to_string(lease.cls)), node->second.summary.hardware_revision}] +=
          static_cast<double>(placement.chips.size());
    }
  }
  out.gauge("kiln_chips_leased", "Chips held by the scheduler's leases now, by scheduling class and hardware revision.");
  for (const auto& [key, count] : leased) out.sample({{"class", key.first}, {"hw_revision", key.second}}, count);

  out.counter("kiln_preemptions_total",
              "Jobs and developer leases that lost their chips to a preemption, by the class of the preempted work.");
  for (PriorityClass cls : kClassValues) out.sample(class_label(cls), preemptions_[index_of(cls)]);
  out.counter("kiln_preemption_lost_chip_seconds_total",
              "Chip-seconds of work lost to preemption: a preempted job attempt's run (all of it unless the "
              "workload checkpointed), or the time a developer lease had held its chips.");
  for (PriorityClass cls : kClassValues) out.sample(class_label(cls), preemption_lost_chip_seconds_[index_of(cls)]);

  out.counter("kiln_jobs_finished_total", "Jobs that ended, by scheduling class and outcome (the job's final state).");
  for (PriorityClass cls : kClassValues) {
    for (JobState state : enum_values<JobState>()) {
      if (!protocol::is_terminal(state)) continue;
      const auto it = jobs_finished_.find({cls, state});
      out.sample({{"class", std::string(protocol::enum_name(cls))}, {"outcome", std::string(protocol::enum_name(state))}},
                 it == jobs_finished_.end() ? 0 : it->second);
    }
  }
  return out.text();
}

}  // namespace kiln::coordinator

// The job table (job_table.h): its jobs from the store and back, which ended ones it holds, the
// views and checks over them, its deadlines and ticks.
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

void JobTable::recover(std::vector<JobRecord> jobs) {
  for (auto& job : jobs) {
    next_job_id_ = std::max(next_job_id_, job.summary.job_id + 1);
    if (!protocol::is_terminal(job.summary.state)) activate(job.summary.job_id, job);
    index_.update(job, ctx_.knobs.job_timeout_slack_ms);
    // An attempt assigned or running before the restart was dispatched; its chips are held
    // again when its agent reports it (reconcile_reported_jobs).
    if (job.summary.state == JobState::assigned || job.summary.state == JobState::running) {
      attempts_.to(job.summary.job_id, AttemptPhase::dispatched);
    }
    track_retention(job);
    jobs_.emplace(job.summary.job_id, std::move(job));
  }
}

void JobTable::take_recalled(JobRecord job) {
  KILN_ASSERT(protocol::is_terminal(job.summary.state) && may_recall(job.summary.job_id),
              "only ended jobs are let go, so only ended jobs are recalled");
  track_retention(job);
  jobs_.emplace(job.summary.job_id, std::move(job));
}

void JobTable::track_retention(const JobRecord& job) {
  const std::uint64_t id = job.summary.job_id;
  bool pinned = false;
  if (const std::string node = rollout_install_node(job); !node.empty()) {
    auto [newest, inserted] = newest_rollout_install_.try_emplace(node, id);
    if (!inserted && newest->second < id) {
      // The install it replaces as its node's newest no longer decides anything.
      const std::uint64_t before = std::exchange(newest->second, id);
      if (auto it = jobs_.find(before); it != jobs_.end() && protocol::is_terminal(it->second.summary.state)) {
        ended_.insert(before);
      }
    }
    pinned = newest->second == id;
  }
  if (!protocol::is_terminal(job.summary.state) || pinned) return;
  if (may_be_rerun(job)) {
    // Until forget_ended() finds its window passed (at once, for one that ended long ago).
    ended_.erase(id);
    rerun_candidates_.emplace(job.finished_at_ms, id);
  } else {
    rerun_candidates_.erase({job.finished_at_ms, id});
    ended_.insert(id);
  }
}

void JobTable::forget_ended(TimeMs now) {
  forgotten_at_ = now;
  while (!rerun_candidates_.empty() &&
         rerun_candidates_.begin()->first < now - ctx_.knobs.quarantine_rerun_window_ms) {
    ended_.insert(rerun_candidates_.begin()->second);
    rerun_candidates_.erase(rerun_candidates_.begin());
  }
  const std::size_t limit = std::max<std::size_t>(ctx_.knobs.ended_jobs_in_memory, 1);
  for (auto it = ended_.begin(); it != ended_.end() && ended_.size() > limit;) {
    // A job whose earlier attempt is still being stopped is looked up until it has stopped.
    if (attempts_.all().count(*it)) {
      ++it;
      continue;
    }
    jobs_.erase(*it);
    it = ended_.erase(it);
  }
}

std::size_t JobTable::requeue_recovered(TimeMs now, const LeaseLifecycle& leases) {
  std::size_t resubmitted = 0;
  for (std::uint64_t id : std::vector<std::uint64_t>(active_jobs_.begin(), active_jobs_.end())) {
    JobRecord& job = jobs_.at(id);
    if (job.lease_id != 0) {
      // A job inside a lease waits for the lease's chips, or runs on them (or, its lease ended
      // or requeued while it ran, on chips of its own given back when its agent registers).
      const DevLease* lease = leases.find(job.lease_id);
      if (job.summary.state == JobState::queued && (!lease || lease->summary.state == LeaseState::ended)) {
        finish(job, JobState::cancelled,
               fmt::format("its lease L{} had ended when the coordinator restarted", job.lease_id), now);
      }
      continue;
    }
    if (job.summary.state != JobState::queued) continue;
    if (auto s = submit_to_scheduler(job, now); !s) {
      finish(job, JobState::failed, "cannot be scheduled after the restart: " + s.error().message, now);
    } else {
      ++resubmitted;
    }
  }
  return resubmitted;
}

std::optional<TimeMs> JobTable::next_deadline() const {
  std::optional<TimeMs> next;
  auto consider = [&](TimeMs t) {
    if (!next || t < *next) next = t;
  };
  if (auto timeout = index_.next_timeout()) consider(*timeout);
  for (const auto& [id, attempt] : attempts_.all()) {
    if (attempt.phase == AttemptPhase::under_notice) consider(attempt.grace_deadline_ms);
    if (attempt.earlier_stopping) consider(stopping_given_up_at(attempt.earlier_stopping->since_ms));
  }
  for (const auto& [node_id, stopping] : stopping_on_node_) {
    for (const auto& [id, since] : stopping) consider(stopping_given_up_at(since));
  }
  return next;
}

void JobTable::time_out_overdue(TimeMs now) {
  for (std::uint64_t id : index_.overdue(now)) {
    JobRecord& job = jobs_.at(id);
    if (auto peer = ctx_.peer_of(job.summary.node_id)) {
      ctx_.to_agent(*peer, protocol::JobCancel{id, "the coordinator timed it out: no result after its timeout"});
    }
    const std::string node_id = job.summary.node_id;
    // Its chips stay held until the agent shows the workload gone.
    (void)hold_chips_of_stopping_job(job, now);
    finish(job, JobState::timed_out,
           fmt::format("no result from node {} within its timeout of {} ms", node_id, job.timeout_ms), now);
  }
}

void JobTable::give_up_stopping(TimeMs now) {
  std::vector<std::uint64_t> stopped;
  for (const auto& [id, attempt] : attempts_.all()) {
    if (attempt.earlier_stopping && now >= stopping_given_up_at(attempt.earlier_stopping->since_ms)) {
      stopped.push_back(id);
    }
  }
  for (std::uint64_t id : stopped) attempt_stopped(id, now);
  for (auto it = stopping_on_node_.begin(); it != stopping_on_node_.end();) {
    if (std::erase_if(it->second, [&](const auto& entry) { return now >= stopping_given_up_at(entry.second); }) > 0) {
      ctx_.bridge.node_changed(it->first);
    }
    it = it->second.empty() ? stopping_on_node_.erase(it) : std::next(it);
  }
  // Only nodes with a deferred start have anything to start: read once, not once per node.
  std::set<std::string> deferred_on;
  for (const auto& [id, attempt] : attempts_.all()) {
    if (attempt.phase == AttemptPhase::start_deferred) deferred_on.insert(jobs_.at(id).summary.node_id);
  }
  for (const std::string& node_id : deferred_on) start_deferred_on(node_id, now);
}

void JobTable::get(const std::string& client, std::uint64_t corr, const protocol::GetJob& get) const {
  auto it = jobs_.find(get.job_id);
  if (it == jobs_.end()) {
    ctx_.reply_error(client, corr, Errc::not_found,
                     fmt::format("no job {}; `kiln jobs` lists the known jobs", get.job_id));
    return;
  }
  const JobRecord& job = it->second;
  protocol::SubmitJob submission;
  submission.workload = job.summary.workload;
  submission.args = job.summary.args;
  submission.chips = job.summary.chips;
  submission.hardware_revision = job.summary.hardware_revision;
  submission.node_id = job.requested_node_id;
  submission.timeout_ms = job.timeout_ms;
  submission.priority_class = job.summary.priority_class;
  submission.max_attempts = job.summary.max_attempts;
  submission.seed = job.seed;
  submission.benchmark = job.benchmark;
  submission.bundle_id = job.summary.bundle_id;
  submission.config_hash = job.summary.config_hash;
  submission.artifacts = job.artifacts;
  ctx_.sink.to_client(client, protocol::JobDetail{job.summary, job.output_tail, job.result, std::move(submission)}, corr);
}

protocol::JobList JobTable::list(const protocol::ListJobs& request) const {
  protocol::JobList list;
  const std::size_t limit = std::min<std::size_t>(request.limit, ctx_.knobs.max_jobs_listed);
  for (auto it = jobs_.rbegin(); it != jobs_.rend() && list.jobs.size() < limit; ++it) {
    if (request.active_only && protocol::is_terminal(it->second.summary.state)) continue;
    list.jobs.push_back(it->second.summary);
  }
  return list;
}

std::vector<std::uint64_t> JobTable::in_lease(std::uint64_t lease_id) const {
  const std::set<std::uint64_t>& ids = index_.in_lease(lease_id);
  return {ids.begin(), ids.end()};
}

bool JobTable::runs_in_lease(std::uint64_t lease_id) const {
  const std::vector<std::uint64_t> ids = in_lease(lease_id);
  return std::any_of(ids.begin(), ids.end(), [&](std::uint64_t id) { return jobs_.at(id).summary.state != JobState::queued; });
}

const JobRecord* JobTable::find(std::uint64_t job_id) const {
  auto it = jobs_.find(job_id);
  return it == jobs_.end() ? nullptr : &it->second;
}

std::optional<std::string> JobTable::retention_error() const {
  std::size_t candidates = 0;
  for (const auto& [id, job] : jobs_) {
    if (!protocol::is_terminal(job.summary.state)) {
      if (ended_.count(id)) return fmt::format("job {} is {} but may be let go", id, protocol::enum_name(job.summary.state));
      continue;
    }
    const std::string node = rollout_install_node(job);
    const bool pinned = !node.empty() && newest_rollout_install_.at(node) == id;
    const bool candidate = rerun_candidates_.count({job.finished_at_ms, id}) == 1;
    candidates += candidate ? 1 : 0;
    const bool within_window = job.finished_at_ms >= forgotten_at_ - ctx_.knobs.quarantine_rerun_window_ms;
    if (candidate != (!pinned && may_be_rerun(job) && within_window)) {
      return fmt::format("job {} is {}filed as a failure that may be rerun", id, candidate ? "" : "not ");
    }
    if (ended_.count(id) != (!pinned && !candidate ? 1u : 0u)) {
      return fmt::format("job {} is {}filed as one that may be let go", id, ended_.count(id) ? "" : "not ");
    }
  }
  if (candidates != rerun_candidates_.size()) return "a failure filed as one that may be rerun is no longer held";
  for (std::uint64_t id : ended_) {
    if (!jobs_.count(id)) return fmt::format("job {} is filed as one that may be let go but is no longer held", id);
  }
  if (ended_.size() > std::max<std::size_t>(ctx_.knobs.ended_jobs_in_memory, 1)) {
    for (std::uint64_t id : ended_) {
      if (!attempts_.all().count(id)) {
        return fmt::format("{} ended jobs are held that may be let go (job {} among them), beyond "
                           "ended_jobs_in_memory {}",
                           ended_.size(), id, ctx_.knobs.ended_jobs_in_memory);
      }
    }
  }
  return std::nullopt;
}

std::optional<std::string> JobTable::index_error() const {
  std::size_t queued = 0;
  std::map<std::string, std::set<std::uint32_t>> chips;
  std::map<std::uint64_t, std::set<std::uint64_t>> by_lease;
  std::optional<TimeMs> next_timeout;
  for (std::uint64_t id : active_jobs_) {
    const JobRecord& job = jobs_.at(id);
    if (job.lease_id != 0) by_lease[job.lease_id].insert(id);
    if (!index_.on_node(job.summary.node_id).count(id) && !job.summary.node_id.empty()) {
      return fmt::format("job {} on {} is not indexed on its node", id, job.summary.node_id);
    }
    if (job.summary.state == JobState::queued) {
      ++queued;
      continue;
    }
    chips[job.summary.node_id].insert(job.summary.chip_indices.begin(), job.summary.chip_indices.end());
    const TimeMs timeout = job.started_at_ms + job.timeout_ms + ctx_.knobs.job_timeout_slack_ms + 1;
    if (!next_timeout || timeout < *next_timeout) next_timeout = timeout;
  }
  if (queued != index_.queued()) return fmt::format("{} jobs are queued, the index counts {}", queued, index_.queued());
  if (next_timeout != index_.next_timeout()) return "the index's next job timeout is not the earliest";
  if (by_lease != index_.by_lease()) return "the index's jobs by developer lease are wrong";
  for (const auto& [node_id, held] : chips) {
    if (held != index_.chips_on(node_id)) return fmt::format("the index's chips of the jobs on {} are wrong", node_id);
  }
  return std::nullopt;
}

void JobTable::save(const JobRecord& job) {
  index_.update(job, ctx_.knobs.job_timeout_slack_ms);
  track_retention(job);
  ctx_.save(job);
}

void JobTable::activate(std::uint64_t id, const JobRecord& job) {
  active_jobs_.insert(id);
  if (takes_whole_node(job)) active_maintenance_jobs_.insert(id);
}

std::optional<std::uint64_t> JobTable::maintenance_waiting_on(const std::string& node_id) const {
  for (std::uint64_t id : active_maintenance_jobs_) {
    const JobRecord& job = jobs_.at(id);
    if (job.requested_node_id == node_id && job.summary.state == JobState::queued) return id;
  }
  return std::nullopt;
}

std::size_t JobTable::unheld_stopping_on(const std::string& node_id) const {
  auto it = stopping_on_node_.find(node_id);
  return it == stopping_on_node_.end() ? 0 : it->second.size();
}

}  // namespace kiln::coordinator

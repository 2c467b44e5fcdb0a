#include "client/job_watcher.h"

#include <algorithm>
#include <thread>

#include <fmt/format.h>

namespace kiln::cli {

namespace {

// At most this many jobs, and leases, in one watch_jobs (its protocol bound); more are watched in turns.
constexpr std::size_t kMaxJobsPerWatch = 1000;

}  // namespace

protocol::LeaseSummary ended_lease(std::uint64_t lease_id) {
  protocol::LeaseSummary lease;
  lease.lease_id = lease_id;
  lease.state = protocol::LeaseState::ended;
  lease.detail = fmt::format("the coordinator no longer holds lease L{}: it ended a while ago", lease_id);
  return lease;
}

void JobWatcher::follow(std::uint64_t job_id) {
  Followed followed;
  followed.job.job_id = job_id;
  jobs_.emplace(job_id, std::move(followed));
}

void JobWatcher::follow_lease(std::uint64_t lease_id) {
  FollowedLease followed;
  followed.lease.lease_id = lease_id;
  leases_.emplace(lease_id, std::move(followed));
}

void JobWatcher::follow_nodes(std::uint64_t revision) {
  follows_nodes_ = true;
  nodes_revision_ = revision;
  if (revision != 0) pushes_ = Pushes::yes;
}

Result<WatchedChanges> JobWatcher::changes() {
  if (jobs_.empty() && leases_.empty() && !follows_nodes_) return WatchedChanges{};
  // A watch needs something to name: a job, or (to a coordinator that may read them) a lease or
  // the node list's revision.
  const bool can_watch = !jobs_.empty() ||
                         (pushes_ != Pushes::no && (!leases_.empty() || (follows_nodes_ && nodes_revision_ != 0)));
  if (!polling_ && can_watch) {
    auto changed = watch();
    if (changed || changed.error().code != Errc::bad_message) return changed;
    // A coordinator older than watch_jobs does not know the message: follow by polling, as it
    // did. One older than leases in it refuses a watch without a job: poll those.
    if (jobs_.empty()) {
      pushes_ = Pushes::no;
    } else {
      polling_ = true;
    }
  }
  return poll();
}

Result<WatchedChanges> JobWatcher::watch() {
  protocol::WatchJobs request;
  request.wait_ms = wait_ms_;
  const bool asks_leases = pushes_ != Pushes::no;
  // Leases a coordinator may not push are read after the watch: it waits a poll interval at most.
  if (!leases_.empty() && pushes_ != Pushes::yes) {
    request.wait_ms = std::min<std::uint32_t>(wait_ms_, static_cast<std::uint32_t>(poll_interval_.count()));
  }
  for (const auto& [job_id, followed] : jobs_) {
    // A job not yet reported is asked for as it is now, without waiting.
    if (!followed.reported) request.wait_ms = 0;
    if (request.jobs.size() < kMaxJobsPerWatch) {
      request.jobs.push_back(protocol::WatchedJob{job_id, followed.job.state, followed.job.attempt});
    }
  }
  if (asks_leases) {
    for (const auto& [lease_id, followed] : leases_) {
      if (!followed.reported) request.wait_ms = 0;
      if (request.leases.size() < kMaxJobsPerWatch) request.leases.push_back({lease_id, followed.lease.state});
    }
  }
  if (follows_nodes_) request.nodes_revision = nodes_revision_;
  auto events = expect_reply<protocol::JobEvents>(client_.request(std::move(request)));
  if (!events) return tl::unexpected(events.error());
  pushes_ = events->nodes_revision != 0 ? Pushes::yes : Pushes::no;
  std::vector<protocol::JobSummary> now = std::move(events->jobs);
  for (std::uint64_t job_id : events->unknown_job_ids) {
    auto job = read(job_id);
    if (!job) return tl::unexpected(job.error());
    now.push_back(std::move(*job));
  }
  WatchedChanges changes;
  changes.jobs = take_changed(now);
  if (asks_leases && pushes_ == Pushes::yes) {
    std::vector<protocol::LeaseSummary> leases = std::move(events->leases);
    for (std::uint64_t lease_id : events->unknown_lease_ids) leases.push_back(ended_lease(lease_id));
    changes.leases = take_changed_leases(leases);
  } else if (!leases_.empty()) {
    auto leases = read_leases();
    if (!leases) return tl::unexpected(leases.error());
    changes.leases = take_changed_leases(*leases);
  }
  changes.nodes_changed = follows_nodes_ && (pushes_ != Pushes::yes || events->nodes_revision != nodes_revision_);
  return changes;
}

Result<WatchedChanges> JobWatcher::poll() {
  if (polled_once_) std::this_thread::sleep_for(poll_interval_);
  polled_once_ = true;
  std::vector<protocol::JobSummary> now;
  for (const auto& [job_id, followed] : jobs_) {
    if (followed.reported && protocol::is_terminal(followed.job.state)) continue;
    auto job = read(job_id);
    if (!job) return tl::unexpected(job.error());
    now.push_back(std::move(*job));
  }
  WatchedChanges changes;
  changes.jobs = take_changed(now);
  if (!leases_.empty()) {
    auto leases = read_leases();
    if (!leases) return tl::unexpected(leases.error());
    changes.leases = take_changed_leases(*leases);
  }
  changes.nodes_changed = follows_nodes_;
  return changes;
}

Result<protocol::JobSummary> JobWatcher::read(std::uint64_t job_id) {
  auto detail = expect_reply<protocol::JobDetail>(client_.request(protocol::GetJob{job_id}));
  if (!detail) return tl::unexpected(detail.error());
  return std::move(detail->job);
}

Result<std::vector<protocol::LeaseSummary>> JobWatcher::read_leases() {
  auto list = expect_reply<protocol::LeaseList>(client_.request(protocol::ListLeases{true}));
  if (!list) return tl::unexpected(list.error());
  std::vector<protocol::LeaseSummary> now;
  for (const auto& [lease_id, followed] : leases_) {
    const auto it = std::find_if(list->leases.begin(), list->leases.end(),
                                 [&](const protocol::LeaseSummary& lease) { return lease.lease_id == lease_id; });
    now.push_back(it == list->leases.end() ? ended_lease(lease_id) : *it);
  }
  return now;
}

std::vector<protocol::JobSummary> JobWatcher::take_changed(const std::vector<protocol::JobSummary>& now) {
  std::vector<protocol::JobSummary> changed;
  for (const protocol::JobSummary& job : now) {
    auto it = jobs_.find(job.job_id);
    if (it == jobs_.end()) continue;
    Followed& followed = it->second;
    if (followed.reported && followed.job.state == job.state && followed.job.attempt == job.attempt) continue;
    followed.job = job;
    followed.reported = true;
    changed.push_back(job);
  }
  return changed;
}

std::vector<protocol::LeaseSummary> JobWatcher::take_changed_leases(const std::vector<protocol::LeaseSummary>& now) {
  std::vector<protocol::LeaseSummary> changed;
  for (const protocol::LeaseSummary& lease : now) {
    auto it = leases_.find(lease.lease_id);
    if (it == leases_.end()) continue;
    FollowedLease& followed = it->second;
    if (followed.reported && followed.lease.state == lease.state) continue;
    followed.lease = lease;
    followed.reported = true;
    changed.push_back(lease);
  }
  return changed;
}

}  // namespace kiln::cli

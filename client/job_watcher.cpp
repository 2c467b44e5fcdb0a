#include "client/job_watcher.h"

#include <thread>

namespace kiln::cli {

namespace {

// At most this many jobs in one watch_jobs (its protocol bound); more are watched in turns.
constexpr std::size_t kMaxJobsPerWatch = 1000;

}  // namespace

void JobWatcher::follow(std::uint64_t job_id) {
  Followed followed;
  followed.job.job_id = job_id;
  jobs_.emplace(job_id, std::move(followed));
}

Result<std::vector<protocol::JobSummary>> JobWatcher::changes() {
  if (jobs_.empty()) return std::vector<protocol::JobSummary>{};
  if (!polling_) {
    auto changed = watch();
    // A coordinator older than watch_jobs does not know the message: follow by polling, as it did.
    if (changed || changed.error().code != Errc::bad_message) return changed;
    polling_ = true;
  }
  return poll();
}

Result<std::vector<protocol::JobSummary>> JobWatcher::watch() {
  protocol::WatchJobs request;
  request.wait_ms = wait_ms_;
  for (const auto& [job_id, followed] : jobs_) {
    // A job not yet reported is asked for as it is now, without waiting.
    if (!followed.reported) request.wait_ms = 0;
    if (request.jobs.size() < kMaxJobsPerWatch) {
      request.jobs.push_back(protocol::WatchedJob{job_id, followed.job.state, followed.job.attempt});
    }
  }
  auto events = expect_reply<protocol::JobEvents>(client_.request(std::move(request)));
  if (!events) return tl::unexpected(events.error());
  std::vector<protocol::JobSummary> now = std::move(events->jobs);
  for (std::uint64_t job_id : events->unknown_job_ids) {
    auto job = read(job_id);
    if (!job) return tl::unexpected(job.error());
    now.push_back(std::move(*job));
  }
  return take_changed(now);
}

Result<std::vector<protocol::JobSummary>> JobWatcher::poll() {
  if (polled_once_) std::this_thread::sleep_for(poll_interval_);
  polled_once_ = true;
  std::vector<protocol::JobSummary> now;
  for (const auto& [job_id, followed] : jobs_) {
    if (followed.reported && protocol::is_terminal(followed.job.state)) continue;
    auto job = read(job_id);
    if (!job) return tl::unexpected(job.error());
    now.push_back(std::move(*job));
  }
  return take_changed(now);
}

Result<protocol::JobSummary> JobWatcher::read(std::uint64_t job_id) {
  auto detail = expect_reply<protocol::JobDetail>(client_.request(protocol::GetJob{job_id}));
  if (!detail) return tl::unexpected(detail.error());
  return std::move(detail->job);
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

}  // namespace kiln::cli

#include "coordinator/core/job_retention.h"

#include <algorithm>
#include <map>

namespace kiln::coordinator {

std::string rollout_install_node(const JobRecord& job) {
  if (job.summary.submitted_by != kRolloutSubmitter || job.summary.workload != protocol::kInstallWorkload) return "";
  return job.requested_node_id;
}

bool may_be_rerun(const JobRecord& job) {
  const auto state = job.summary.state;
  return job.summary.priority_class != protocol::PriorityClass::experiment &&
         (state == protocol::JobState::failed || state == protocol::JobState::timed_out) && job.rerun_job_id == 0 &&
         job.rerun_of == 0 && job.lease_id == 0 && job.requested_node_id.empty() &&
         !protocol::is_maintenance_workload(job.summary.workload);
}

std::vector<JobRecord> jobs_held_at_start(std::vector<JobRecord> stored, std::size_t ended_jobs_in_memory,
                                          TimeMs reruns_since_ms) {
  std::sort(stored.begin(), stored.end(),
            [](const JobRecord& a, const JobRecord& b) { return a.summary.job_id < b.summary.job_id; });
  std::map<std::string, std::uint64_t> newest_install;
  for (const JobRecord& job : stored) {
    if (std::string node = rollout_install_node(job); !node.empty()) newest_install[node] = job.summary.job_id;
  }
  // The N-th newest ended job: it and every job after it are held.
  std::uint64_t newest_from = 0;
  std::size_t ended = 0;
  for (auto it = stored.rbegin(); it != stored.rend() && ended < std::max<std::size_t>(ended_jobs_in_memory, 1); ++it) {
    if (protocol::is_terminal(it->summary.state)) {
      ++ended;
      newest_from = it->summary.job_id;
    }
  }
  std::vector<JobRecord> held;
  for (JobRecord& job : stored) {
    const std::string node = rollout_install_node(job);
    if (!protocol::is_terminal(job.summary.state) || job.summary.job_id >= newest_from ||
        (!node.empty() && newest_install.at(node) == job.summary.job_id) ||
        (may_be_rerun(job) && job.finished_at_ms >= reruns_since_ms)) {
      held.push_back(std::move(job));
    }
  }
  return held;
}

}  // namespace kiln::coordinator

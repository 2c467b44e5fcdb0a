#include "qualification/run_context.h"

#include <algorithm>

#include <fmt/format.h>

#include "qualification/run_measure.h"

namespace kiln::qualification {

std::uint64_t JobBook::enqueue(JobRequest request, JobOwner owner, bool derive_seed, int attempt) {
  const std::uint64_t tag = next_tag_++;
  request.tag = tag;
  if (derive_seed) request.seed = job_seed(request.seed, tag);
  const bool first_measure = request.purpose == JobPurpose::measure && attempt == 1;
  jobs_[tag] = RunJob{std::move(request), std::move(owner), attempt, JobState::queued};
  (first_measure ? measure_queue_ : followup_queue_).push_back(tag);
  return tag;
}

void JobBook::cancel(std::uint64_t tag) {
  auto it = jobs_.find(tag);
  if (it == jobs_.end()) return;
  RunJob& job = it->second;
  if (job.state == JobState::queued) {
    std::erase(followup_queue_, tag);
    std::erase(measure_queue_, tag);
    job.state = JobState::cancelled;
  } else if (job.state == JobState::running) {
    job.state = JobState::cancelled;
    --in_flight_;
    push(run_action::CancelJob{tag});
  }
}

void JobBook::cancel_all_unfinished() {
  for (auto& [tag, job] : jobs_) {
    if (job.state == JobState::queued || job.state == JobState::running) cancel(tag);
  }
}

RunJob* JobBook::start_next(std::size_t max_in_flight) {
  if (in_flight_ >= max_in_flight) return nullptr;
  for (auto* queue : {&followup_queue_, &measure_queue_}) {
    if (queue->empty()) continue;
    RunJob& job = jobs_.at(queue->front());
    queue->pop_front();
    job.state = JobState::running;
    ++in_flight_;
    return &job;
  }
  return nullptr;
}

Result<RunJob*> JobBook::answer(std::uint64_t tag, std::string_view run_id) {
  auto it = jobs_.find(tag);
  if (it == jobs_.end()) {
    return fail(Errc::conflict, fmt::format("no job with tag {} in run {}; answer only the jobs it started", tag,
                                            run_id));
  }
  RunJob& job = it->second;
  if (job.state == JobState::cancelled) return nullptr;
  if (job.state != JobState::running) {
    return fail(Errc::conflict, fmt::format("job {} of run {} was {}; answer each started job once", tag, run_id,
                                            job.state == JobState::queued ? "never started" : "already answered"));
  }
  job.state = JobState::answered;
  --in_flight_;
  return &job;
}

std::optional<RunAction> JobBook::pop_action() {
  if (actions_.empty()) return std::nullopt;
  RunAction action = std::move(actions_.front());
  actions_.pop_front();
  return action;
}

std::size_t FleetView::free_nodes(const std::string& revision) const {
  return static_cast<std::size_t>(std::count_if(nodes_.begin(), nodes_.end(), [&](const NodeCandidate& node) {
    return node.revision == revision && node.free && usable(node);
  }));
}

long FleetView::healthy_nodes(const std::string& revision) const {
  return std::count_if(nodes_.begin(), nodes_.end(),
                       [&](const NodeCandidate& node) { return node.revision == revision && usable(node); });
}

std::vector<NodeCandidate> FleetView::healthy() const {
  std::vector<NodeCandidate> out;
  std::copy_if(nodes_.begin(), nodes_.end(), std::back_inserter(out), [&](const NodeCandidate& n) { return usable(n); });
  return out;
}

}  // namespace kiln::qualification

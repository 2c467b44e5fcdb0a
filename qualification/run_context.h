// What the phases of a run share (run.h composes them): the job table with its two queues and
// the actions for the shell, and the run's view of the fleet's nodes. Pure.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "qualification/run_types.h"
#include "qualification/triage.h"

namespace kiln::qualification {

enum class JobState { queued, running, answered, cancelled };

// Where a job belongs besides its request; kept when the job is started again.
struct JobOwner {
  std::size_t pair = 0;                  // the (model, revision) it serves; a probe: its bisection's owner
  std::optional<std::size_t> bisection;  // a probe's bisection
  std::size_t candidate = 0;             // a probe's index into its bisection's candidates
};

struct RunJob {
  JobRequest request;
  JobOwner owner;
  int attempt = 1;
  JobState state = JobState::queued;
};

// The run's jobs by tag and the actions for the shell. Follow-ups (triage reruns, gate rounds,
// probes) start before first measure jobs; at most max_in_flight run at once.
class JobBook {
 public:
  // Tags from 1. A first measure attempt goes to the measure queue, every other job to the
  // follow-up queue. `derive_seed`: the job's seed becomes job_seed(request.seed, tag).
  std::uint64_t enqueue(JobRequest request, JobOwner owner, bool derive_seed, int attempt = 1);
  // A queued job leaves its queue; a running one is cancelled on the shell (CancelJob). Answered,
  // cancelled and unknown tags are left alone.
  void cancel(std::uint64_t tag);
  void cancel_all_unfinished();
  // The next job to start (running from now on), or nullopt when none is queued or max_in_flight
  // jobs are running.
  RunJob* start_next(std::size_t max_in_flight);
  // A running job's answer: it is answered from now on. Fails (conflict) for an unknown tag, one
  // never started or one already answered; nullptr for a late answer to a cancelled job.
  Result<RunJob*> answer(std::uint64_t tag, std::string_view run_id);

  template <class Action>
  void push(Action action) {
    actions_.emplace_back(std::move(action));
  }
  void log(std::string text) { push(run_action::Log{std::move(text)}); }
  std::optional<RunAction> pop_action();
  bool has_actions() const { return !actions_.empty(); }

 private:
  std::map<std::uint64_t, RunJob> jobs_;
  std::deque<std::uint64_t> followup_queue_;
  std::deque<std::uint64_t> measure_queue_;
  std::size_t in_flight_ = 0;
  std::uint64_t next_tag_ = 1;
  std::deque<RunAction> actions_;
};

// The healthy nodes the shell last reported, less the ones this run quarantined.
class FleetView {
 public:
  void set(std::vector<NodeCandidate> nodes) { nodes_ = std::move(nodes); }
  bool known() const { return !nodes_.empty(); }
  // True the first time: the shell is to quarantine it.
  bool quarantine(const std::string& node_id) { return quarantined_.insert(node_id).second; }

  std::size_t free_nodes(const std::string& revision) const;
  long healthy_nodes(const std::string& revision) const;
  std::vector<NodeCandidate> healthy() const;

 private:
  bool usable(const NodeCandidate& node) const { return node.healthy && quarantined_.count(node.id) == 0; }
  std::vector<NodeCandidate> nodes_;
  std::set<std::string> quarantined_;
};

}  // namespace kiln::qualification

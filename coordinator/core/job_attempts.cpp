// The job table: submission, dispatch, results, failover, reruns, what agents report about
// their jobs, the chips an attempt being stopped still holds, and the scheduler's decisions
// about jobs' own requests.
#include "coordinator/core/job_attempts.h"

#include <algorithm>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "common/protocol/artifacts.h"
#include "common/text/utf8.h"
#include "coordinator/core/core_rules.h"
#include "coordinator/core/job_retention.h"
#include "coordinator/core/lease_lifecycle.h"
#include "coordinator/core/scheduler_decisions.h"

namespace kiln::coordinator {

using namespace detail;

namespace {

// A workload under preemption notice that exits cleanly with a result saying "completed"
// (or saying nothing) finished its work; anything else let go of its chips at a checkpoint.
bool finished_its_work(const protocol::JobFinished& fin) {
  if (fin.outcome != protocol::JobOutcome::succeeded) return false;
  auto doc = nlohmann::json::parse(fin.result, nullptr, /*allow_exceptions=*/false);
  if (!doc.is_object()) return true;
  auto status = doc.find("status");
  return status == doc.end() || !status->is_string() || status->get<std::string>() != "preempted";
}

// A workload that ran to its end and found its outputs wrong exits 1 with its result document
// (docs/workloads.md, "Ending a workload"): a rank that did so ran, and its gang with it is
// judged from the ranks' documents, so it ends no one.
bool ran_and_reported(const JobRecord& job) {
  return job.summary.state == JobState::failed && job.summary.exit_code == 1 && !job.result.empty();
}

}  // namespace

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

std::size_t JobTable::requeue_recovered(TimeMs now) {
  std::size_t resubmitted = 0;
  for (std::uint64_t id : std::vector<std::uint64_t>(active_jobs_.begin(), active_jobs_.end())) {
    JobRecord& job = jobs_.at(id);
    if (job.lease_id != 0) {
      // A job inside a lease waits for the lease's chips, or runs on them (or, its lease ended
      // or requeued while it ran, on chips of its own given back when its agent registers).
      const DevLease* lease = leases_.find(job.lease_id);
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

void JobTable::job_started(const std::string& node_id, const protocol::JobStarted& started) {
  auto it = jobs_.find(started.job_id);
  if (it == jobs_.end()) return;
  JobRecord& job = it->second;
  if (job.summary.node_id != node_id || job.summary.attempt != started.attempt ||
      job.summary.state != JobState::assigned) {
    return;
  }
  job.summary.state = JobState::running;
  save(job);
}

const JobRecord* JobTable::job_finished(const std::string& node_id, const protocol::JobFinished& fin, TimeMs now) {
  auto it = jobs_.find(fin.job_id);
  if (it == jobs_.end()) return nullptr;
  JobRecord& job = it->second;
  const bool current = !protocol::is_terminal(job.summary.state) && job.summary.state != JobState::queued &&
                       job.summary.node_id == node_id && job.summary.attempt == fin.attempt;
  const auto held = attempts_.own_lease(job.summary.job_id);
  if (current && attempts_.in(job.summary.job_id, AttemptPhase::under_notice) && held && !job.cancel_requested &&
      !finished_its_work(fin)) {
    // It let go at a checkpoint under a preemption notice: the scheduler requeues it keeping
    // its age (on_requeued), and the chips go to the request that preempted it.
    job.output_tail = fin.output_tail;
    ctx_.log(action::Severity::info, fmt::format("job {} attempt {} let go of its chips after the preemption notice "
                                                 "({})",
                                                 job.summary.job_id, fin.attempt, protocol::enum_name(fin.outcome)));
    if (auto s = ctx_.scheduler().checkpoint_ack(*held, ctx_.to_scheduler_time(now)); !s) {
      ctx_.log(action::Severity::warn, fmt::format("job {}: {}", job.summary.job_id, s.error().message));
    }
    // The requeue is saved before the acknowledgement below: acknowledged first, a crash in
    // between would leave the store holding the attempt as running, and a restart would count
    // it lost although its agent has forgotten it.
    scheduling_.pump(now);
  } else if (current) {
    job.output_tail = fin.output_tail;
    job.result = fin.result;
    job.summary.exit_code = fin.exit_code;
    job.summary.duration_ms = fin.duration_ms;
    JobState state = JobState::failed;
    switch (fin.outcome) {
      case protocol::JobOutcome::succeeded: state = JobState::succeeded; break;
      case protocol::JobOutcome::failed:
      case protocol::JobOutcome::failed_to_start: state = JobState::failed; break;
      case protocol::JobOutcome::timed_out: state = JobState::timed_out; break;
      case protocol::JobOutcome::cancelled: state = JobState::cancelled; break;
    }
    std::string detail = fin.detail;
    if (detail.empty()) {
      detail = fmt::format("{} on {} after {} ms (exit code {})", protocol::enum_name(fin.outcome), node_id,
                           fin.duration_ms, fin.exit_code);
    }
    // The agent knows it was stopped, not why.
    if (state == JobState::cancelled && !job.cancel_reason.empty()) {
      detail = text::utf8_head(fmt::format("{} ({})", job.cancel_reason, detail), protocol::kMessageText.max_len);
    }
    finish(job, state, std::move(detail), now);
    return &job;
  } else {
    ctx_.log(action::Severity::debug, fmt::format("ignoring a stale result for job {} attempt {} from node {}",
                                                  fin.job_id, fin.attempt, node_id));
    const auto& stopping = attempts_.earlier_stopping(fin.job_id);
    const bool stopping_attempt = stopping && stopping->attempt == fin.attempt && stopping->node_id == node_id;
    // An agent keeps an unacknowledged result while it runs a later attempt of the same job,
    // so only the end of the job's latest attempt shows the stopping one gone; an older one
    // waits for the heartbeats.
    const bool latest_attempt = fin.attempt >= job.summary.attempt;
    if (stopping_attempt || (latest_attempt && (ctx_.bridge.stop_hold_of(fin.job_id, node_id) ||
                                                (stopping_on_node_.count(node_id) != 0 &&
                                                 stopping_on_node_.at(node_id).count(fin.job_id) != 0)))) {
      old_attempt_gone(fin.job_id, node_id, now);
    }
  }
  return nullptr;
}

JobRecord JobTable::new_job(const Caller& caller, const protocol::SubmitJob& submit, std::uint64_t lease_id,
                            TimeMs now) const {
  const DevLease* lease = lease_id != 0 ? leases_.find(lease_id) : nullptr;
  JobRecord job;
  job.summary.job_id = next_job_id_;
  job.summary.state = JobState::queued;
  job.summary.priority_class = lease ? lease->summary.priority_class : submit.priority_class;
  job.summary.workload = submit.workload;
  job.summary.args = submit.args;
  job.summary.chips = submit.chips;
  job.summary.hardware_revision = submit.hardware_revision;
  job.requested_node_id = submit.node_id;
  job.summary.max_attempts = submit.max_attempts;
  job.summary.submitted_by = caller.key_name;
  job.timeout_ms = submit.timeout_ms;
  job.seed = submit.seed;
  job.benchmark = submit.benchmark;
  job.summary.bundle_id = submit.bundle_id;
  job.summary.config_hash = submit.config_hash;
  job.artifacts = submit.artifacts;
  job.lease_id = lease_id;
  // Maintenance takes the whole node: nothing else may share its chips while it runs.
  if (protocol::is_maintenance_workload(submit.workload)) {
    job.summary.chips = ctx_.registry.nodes().at(submit.node_id).summary.chips_total;
  }
  job.submitted_at_ms = now;
  if (lease_id != 0) job.summary.detail = fmt::format("runs inside lease L{}", lease_id);
  return job;
}

void JobTable::submit(const std::string& client, const Caller& caller, const protocol::Envelope& m,
                      const protocol::SubmitJob& submit, std::uint64_t lease_id, TimeMs now) {
  auto id = accept(caller, submit, lease_id, now);
  if (!id) {
    ctx_.reply_error(client, m.header.id, id.error().code, std::move(id.error().message));
    return;
  }
  ctx_.sink.push(action::ToClient{client, protocol::JobAccepted{*id}, m.header.id});
}

Result<std::uint64_t> JobTable::accept(const Caller& caller, const protocol::SubmitJob& submit,
                                       std::uint64_t lease_id, TimeMs now) {
  if (auto refused = refuse_submit(caller, submit, lease_id)) return tl::unexpected(std::move(*refused));
  JobRecord job = new_job(caller, submit, lease_id, now);
  if (lease_id == 0) {
    if (auto s = submit_to_scheduler(job, now); !s) return tl::unexpected(s.error());
  }
  const std::uint64_t id = next_job_id_++;
  activate(id, job);
  auto& stored = jobs_[id] = std::move(job);
  save(stored);
  ctx_.log(action::Severity::info,
           fmt::format("job {} ({} on {} chips, {}{}) submitted by {}", id, submit.workload, submit.chips,
                       protocol::enum_name(stored.summary.priority_class),
                       lease_id ? fmt::format(", in lease L{}", lease_id) : "", caller.key_name));
  if (submit.workload == protocol::kInstallWorkload) {
    ctx_.audit(caller, "install_requested", "node " + submit.node_id,
               fmt::format("job {}: {} {}", id, submit.workload, fmt::join(submit.args, " ")));
  }
  scheduling_.sync_node_states(now);
  return id;
}

void JobTable::submit_gang(const std::string& client, const Caller& caller, const protocol::Envelope& m,
                           const protocol::SubmitGang& gang, TimeMs now) {
  if (auto refused = refuse_gang(caller, gang)) {
    ctx_.reply_error(client, m.header.id, refused->code, std::move(refused->message));
    return;
  }
  // Consecutive ids: rank r is job gang_id + r, so every rank finds the others.
  const std::uint64_t gang_id = next_job_id_;
  const auto size = static_cast<std::uint32_t>(gang.jobs.size());
  protocol::GangAccepted accepted;
  for (std::uint32_t rank = 0; rank < size; ++rank) {
    JobRecord job = new_job(caller, gang.jobs[rank], gang.lease_id, now);
    job.summary.gang_id = gang_id;
    job.summary.gang_rank = rank;
    job.summary.gang_size = size;
    job.summary.detail = fmt::format("rank {} of {} of gang {} inside lease L{}; the ranks start together", rank,
                                     size, gang_id, gang.lease_id);
    const std::uint64_t id = next_job_id_++;
    activate(id, job);
    save(jobs_[id] = std::move(job));
    accepted.job_ids.push_back(id);
  }
  ctx_.sink.push(action::ToClient{client, std::move(accepted), m.header.id});
  ctx_.log(action::Severity::info, fmt::format("gang {} ({} ranks of {}, jobs {} to {}) submitted by {} in lease L{}",
                                               gang_id, size, gang.jobs.front().workload, gang_id,
                                               gang_id + size - 1, caller.key_name, gang.lease_id));
  scheduling_.sync_node_states(now);
}

std::optional<Error> JobTable::refuse_gang(const Caller& caller, const protocol::SubmitGang& gang) {
  const DevLease* lease = leases_.find(gang.lease_id);
  if (lease && lease->summary.state != LeaseState::ended && gang.jobs.size() > lease->summary.nodes) {
    return Error{Errc::invalid_argument,
                 lease->summary.nodes == 0
                     ? fmt::format("lease L{} holds chips on one node; a gang runs one rank per node of a lease of "
                                   "whole nodes: lease {} nodes (kiln lease --nodes {})",
                                   gang.lease_id, gang.jobs.size(), gang.jobs.size())
                     : fmt::format("a gang of {} ranks needs {} nodes, lease L{} holds {}; submit at most {} ranks "
                                   "or lease more nodes",
                                   gang.jobs.size(), gang.jobs.size(), gang.lease_id, lease->summary.nodes,
                                   lease->summary.nodes)};
  }
  for (std::size_t rank = 0; rank < gang.jobs.size(); ++rank) {
    if (auto refused = refuse_submit(caller, gang.jobs[rank], gang.lease_id)) {
      refused->message = fmt::format("rank {}: {}", rank, refused->message);
      return refused;
    }
  }
  // The checks above count the queue without the other ranks.
  const std::size_t queued = index_.queued();
  if (queued + gang.jobs.size() > ctx_.knobs.max_queued_jobs) {
    return Error{Errc::unavailable, fmt::format("the queue has room for {} more jobs, the gang has {} ranks; try again "
                                                "later",
                                                ctx_.knobs.max_queued_jobs - queued, gang.jobs.size())};
  }
  if (in_lease(gang.lease_id).size() + gang.jobs.size() > 1024) {
    return Error{Errc::unavailable, fmt::format("lease L{} would have more than 1024 jobs queued or running; wait "
                                                "for some to end",
                                                gang.lease_id)};
  }
  return std::nullopt;
}

std::optional<Error> JobTable::refuse_submit(const Caller& caller, const protocol::SubmitJob& submit,
                                             std::uint64_t lease_id) {
  const bool maintenance = protocol::is_maintenance_workload(submit.workload);
  if (lease_id != 0) {
    if (auto refused = refuse_submit_in_lease(caller, submit, lease_id)) return refused;
  } else if (maintenance) {
    if (!client_role_may_run_maintenance(caller.role, submit.workload)) {
      return Error{Errc::unauthorized,
                   fmt::format("role {} may not run {}; diagnostics are for lab, ops and admin, installs for ops "
                               "and admin",
                               protocol::enum_name(caller.role), submit.workload)};
    }
    if (submit.node_id.empty()) {
      return Error{Errc::invalid_argument,
                   fmt::format("{} runs on one node: name it (kiln diag --node ID)", submit.workload)};
    }
  } else if (submit.workload.starts_with("kiln.")) {
    return Error{Errc::invalid_argument,
                 fmt::format("'{}' is not a built-in workload; built-ins are {} and {}", submit.workload,
                             protocol::kDiagWorkload, protocol::kInstallWorkload)};
  } else if (!client_role_may_submit(caller.role, submit.priority_class)) {
    return Error{Errc::unauthorized,
                 fmt::format("role {} may not submit {} jobs; developers and lab engineers submit "
                             "experiments, CI submits presubmit, nightly, bisect and release work",
                             protocol::enum_name(caller.role), protocol::enum_name(submit.priority_class))};
  }
  if (auto artifacts = protocol::check_job_artifacts(submit.args, submit.artifacts); !artifacts) {
    return artifacts.error();
  }
  if (!maintenance && submit.chips > 8) {
    return Error{Errc::invalid_argument,
                 fmt::format("a job runs on one node and may ask for 1 to 8 chips, not {}", submit.chips)};
  }
  if (!submit.node_id.empty() && ctx_.registry.nodes().count(submit.node_id) == 0) {
    return Error{Errc::not_found,
                 fmt::format("node {} is not registered; `kiln nodes` lists the nodes", submit.node_id)};
  }
  if (!maintenance) {
    if (auto never = ctx_.registry.never_runs(submit.workload)) {
      return Error{Errc::invalid_argument, fmt::format("this job could never start: {}", *never)};
    }
  }
  if (!maintenance && lease_id == 0) {
    if (auto never = ctx_.registry.never_placeable(submit.hardware_revision, 0, submit.chips, submit.node_id)) {
      return Error{Errc::invalid_argument, fmt::format("this job could never start: {}", *never)};
    }
  }
  const std::size_t queued = index_.queued();
  if (queued >= ctx_.knobs.max_queued_jobs) {
    return Error{Errc::unavailable, fmt::format("the queue is full ({} jobs waiting); try again later", queued)};
  }
  return std::nullopt;
}

std::optional<Error> JobTable::refuse_submit_in_lease(const Caller& caller, const protocol::SubmitJob& submit,
                                                      std::uint64_t lease_id) {
  const DevLease* lease = leases_.find(lease_id);
  if (!lease || lease->summary.state == LeaseState::ended) {
    return Error{Errc::not_found,
                 fmt::format("lease L{} is not active; `kiln leases` lists the active leases", lease_id)};
  }
  if (lease->summary.owner != caller.key_name && !privileged(caller.role)) {
    return Error{Errc::unauthorized,
                 fmt::format("lease L{} belongs to {}; run jobs in a lease of your own", lease_id,
                             lease->summary.owner)};
  }
  if (protocol::is_maintenance_workload(submit.workload)) {
    return Error{Errc::invalid_argument,
                 fmt::format("{} takes a whole node and cannot run inside a lease; submit it without --lease",
                             submit.workload)};
  }
  std::size_t largest = 0;
  for (const auto& p : lease->summary.placement) largest = std::max(largest, p.chip_indices.size());
  // A pending lease of whole nodes does not know its node size yet; 8 is the most a job takes.
  const std::size_t per_node = lease->summary.nodes == 0 ? lease->summary.chips : largest > 0 ? largest : 8;
  if (submit.chips > per_node) {
    return Error{Errc::invalid_argument,
                 fmt::format("the job asks for {} chips but lease L{} holds {} chips per node; ask for fewer",
                             submit.chips, lease_id, per_node)};
  }
  if (in_lease(lease_id).size() >= 1024) {
    return Error{Errc::unavailable,
                 fmt::format("lease L{} already has 1024 jobs queued or running; wait for some to end", lease_id)};
  }
  if (!submit.node_id.empty()) {
    return Error{Errc::invalid_argument,
                 "a job inside a lease runs on the lease's chips; drop --node"};
  }
  return std::nullopt;
}

void JobTable::cancel(const std::string& client, const Caller& caller, const protocol::Envelope& m,
                      const protocol::CancelJob& cancel, TimeMs now) {
  auto it = jobs_.find(cancel.job_id);
  if (it == jobs_.end()) {
    ctx_.reply_error(client, m.header.id, Errc::not_found, fmt::format("no job {}", cancel.job_id));
    return;
  }
  JobRecord& job = it->second;
  if (!privileged(caller.role) && job.summary.submitted_by != caller.key_name) {
    ctx_.reply_error(client, m.header.id, Errc::unauthorized,
                     fmt::format("job {} was submitted by {}; only its submitter, ops or admin may cancel it",
                                 cancel.job_id, job.summary.submitted_by));
    return;
  }
  if (protocol::is_terminal(job.summary.state)) {
    ctx_.reply_error(client, m.header.id, Errc::conflict,
                     fmt::format("job {} already ended ({})", cancel.job_id, protocol::enum_name(job.summary.state)));
    return;
  }
  if (job.summary.state == JobState::queued) {
    finish(job, JobState::cancelled, fmt::format("cancelled by {} while queued", caller.key_name), now);
  } else {
    request_cancel(job, fmt::format("cancelled by {}", caller.key_name));
  }
  ctx_.sink.push(action::ToClient{client, protocol::Ok{"cancel requested"}, m.header.id});
}

void JobTable::request_cancel(JobRecord& job, const std::string& why) {
  job.cancel_requested = true;
  job.cancel_reason = text::utf8_head(why, protocol::kMessageText.max_len);
  save(job);
  if (auto peer = ctx_.peer_of(job.summary.node_id)) ctx_.to_agent(*peer, protocol::JobCancel{job.summary.job_id, why});
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

JobTable::HelloOutcome JobTable::reconcile_hello(const NodeRecord& node, const protocol::Hello& hello,
                                                 protocol::Welcome& welcome, TimeMs now) {
  const std::set<std::uint64_t> running(hello.running_jobs.begin(), hello.running_jobs.end());
  const std::vector<std::uint64_t> unrestorable = reconcile_reported_jobs(hello, welcome, now);
  // A revoked attempt the agent no longer runs has stopped; a new attempt waiting for it
  // starts after the welcome.
  HelloOutcome outcome;
  for (const auto& [id, attempt] : attempts_.all()) {
    if (attempt.earlier_stopping && attempt.earlier_stopping->node_id == hello.node_id && !running.count(id)) {
      outcome.stopped.push_back(id);
    }
  }
  outcome.lost = fail_vanished_jobs(hello, now) + unrestorable.size();
  for (std::uint64_t id : unrestorable) {
    attempt_lost(jobs_.at(id), fmt::format("its chips on {} could not be given back after a restart", hello.node_id),
                 now);
  }
  hold_chips_told_to_stop(node, welcome.cancel_jobs, now);
  return outcome;
}

void JobTable::resume_on(const std::string& peer, const std::string& node_id, const std::set<std::uint64_t>& running,
                         const std::vector<std::uint64_t>& stopped, TimeMs now) {
  // A cancel decided while the node had no session (its lease ended while the coordinator was
  // down, say) reaches the agent now.
  for (std::uint64_t id : index_.on_node(node_id)) {
    const JobRecord& job = jobs_.at(id);
    if (job.cancel_requested && running.count(id) && attempts_.own_lease(id)) {
      ctx_.to_agent(peer, protocol::JobCancel{id, job.lease_id != 0 ? fmt::format("its lease L{} ended", job.lease_id)
                                                                    : std::string("cancel requested")});
    }
  }
  for (std::uint64_t id : stopped) attempt_stopped(id, now);
  start_deferred_on(node_id, now);
}

std::vector<std::uint64_t> JobTable::reconcile_reported_jobs(const protocol::Hello& hello, protocol::Welcome& welcome,
                                                             TimeMs now) {
  const std::set<std::uint64_t> running(hello.running_jobs.begin(), hello.running_jobs.end());
  std::set<std::uint64_t> reported = running;
  reported.insert(hello.finished_jobs.begin(), hello.finished_jobs.end());
  std::vector<std::uint64_t> unrestorable;
  for (std::uint64_t id : reported) {
    auto it = jobs_.find(id);
    const bool ours = it != jobs_.end() && !protocol::is_terminal(it->second.summary.state) &&
                      it->second.summary.state != JobState::queued && it->second.summary.node_id == hello.node_id;
    if (!ours) {
      if (running.count(id)) welcome.cancel_jobs.push_back(id);
      continue;
    }
    JobRecord& job = it->second;
    // After a coordinator restart the scheduler does not know the chips this job holds yet; a
    // job that ended meanwhile holds them until its job_finished (which follows) is stored.
    if ((job.lease_id == 0 || !leases_.runs_on_lease_chips(job)) && !attempts_.own_lease(id)) {
      scheduler::Placement placement{hello.node_id, {}};
      for (std::uint32_t chip : job.summary.chip_indices) placement.chips.push_back(static_cast<int>(chip));
      auto lease = ctx_.scheduler().restore_lease(
          job_request(job), {placement}, ctx_.to_scheduler_time(job.started_at_ms), ctx_.to_scheduler_time(now));
      if (!lease) {
        ctx_.log(action::Severity::warn, fmt::format("job {} cannot keep its chips on {}: {}; it is stopped", id,
                                                     hello.node_id, lease.error().message));
        if (running.count(id)) welcome.cancel_jobs.push_back(id);
        unrestorable.push_back(id);
        continue;
      }
      attempts_.of(id).own_lease = *lease;
    }
    // A deferred start has not been sent: what runs under its id is the earlier attempt.
    if (job.summary.state == JobState::assigned && running.count(id) && !attempts_.in(id, AttemptPhase::start_deferred)) {
      job.summary.state = JobState::running;
      save(job);
    }
  }
  return unrestorable;
}

std::size_t JobTable::fail_vanished_jobs(const protocol::Hello& hello, TimeMs now) {
  const std::set<std::uint64_t> reported = [&] {
    std::set<std::uint64_t> ids(hello.running_jobs.begin(), hello.running_jobs.end());
    ids.insert(hello.finished_jobs.begin(), hello.finished_jobs.end());
    return ids;
  }();
  std::vector<std::uint64_t> vanished;
  for (std::uint64_t id : index_.on_node(hello.node_id)) {
    const JobRecord& job = jobs_.at(id);
    if (job.summary.state != JobState::queued && !reported.count(id) &&
        !attempts_.in(id, AttemptPhase::start_deferred)) {
      vanished.push_back(id);
    }
  }
  for (std::uint64_t id : vanished) {
    JobRecord& job = jobs_.at(id);
    // The agent may yet get a start that crossed this hello: until its heartbeats show the job
    // is not there, its chips stay held and a new attempt on this node waits (deferred start).
    const std::uint32_t attempt = job.summary.attempt;
    const bool held = hold_chips_of_stopping_job(job, now).has_value();
    attempt_lost(job, fmt::format("node {} re-registered without it (the agent restarted)", hello.node_id), now);
    if (held) attempts_.of(id).earlier_stopping = StoppingAttempt{hello.node_id, attempt, now};
  }
  return vanished.size();
}

void JobTable::hold_chips_told_to_stop(const NodeRecord& node, const std::vector<std::uint64_t>& cancelled,
                                       TimeMs now) {
  // What it is told to stop keeps its chips until it is gone: held where the core knows them,
  // otherwise the whole node takes no new work meanwhile.
  const std::string& node_id = node.summary.node_id;
  ctx_.bridge.node_changed(node_id);
  auto& stopping_here = stopping_on_node_[node_id];
  stopping_here.clear();
  for (std::uint64_t id : cancelled) {
    auto last = last_placement_.find(id);
    std::vector<std::uint32_t> chips;
    if (last != last_placement_.end()) {
      if (auto here = last->second.find(node_id); here != last->second.end()) chips = here->second;
    }
    if (chips.empty()) {
      // Where it runs is unknown (it predates this coordinator): hold every chip not leased.
      std::set<std::uint32_t> leased;
      for (const auto& lease : ctx_.scheduler().leases()) {
        for (const auto& p : lease.placement) {
          if (p.node == node_id) leased.insert(p.chips.begin(), p.chips.end());
        }
      }
      for (const auto& chip : node.summary.chips) {
        if (chip.healthy && !leased.count(chip.index)) chips.push_back(chip.index);
      }
    }
    hold_stopping_chips(id, node_id, chips, now);
    if (!ctx_.bridge.stop_hold_of(id, node_id)) stopping_here.emplace(id, now);
    // A job queued again meanwhile starts on this node only once this old attempt is gone.
    if (auto job = jobs_.find(id); job != jobs_.end() && job->second.summary.state == JobState::queued) {
      attempts_.of(id).earlier_stopping = StoppingAttempt{node_id, job->second.summary.attempt, now};
    }
  }
}

void JobTable::reconcile_heartbeat(const std::string& peer, const std::string& node_id, const protocol::Heartbeat& beat,
                                   TimeMs now) {
  const std::set<std::uint64_t> running(beat.running_jobs.begin(), beat.running_jobs.end());
  std::vector<std::uint64_t> gone;
  if (auto stopping_here = stopping_on_node_.find(node_id); stopping_here != stopping_on_node_.end()) {
    for (const auto& [id, since] : stopping_here->second) {
      if (!running.count(id)) gone.push_back(id);
    }
  }
  for (std::uint64_t job : ctx_.bridge.stop_held_jobs_on(node_id)) {
    if (!running.count(job)) gone.push_back(job);
  }
  for (std::uint64_t id : gone) old_attempt_gone(id, node_id, now);
  for (std::uint64_t id : running) {
    auto it = jobs_.find(id);
    const bool ours =
        it != jobs_.end() && !protocol::is_terminal(it->second.summary.state) && it->second.summary.node_id == node_id;
    if (!ours) {
      ctx_.to_agent(peer, protocol::JobCancel{id, "the coordinator no longer assigns this job to this node"});
      if (!ctx_.bridge.stop_hold_of(id, node_id) && stopping_on_node_[node_id].emplace(id, now).second) {
        ctx_.bridge.node_changed(node_id);
      }
    } else if (attempts_.in(id, AttemptPhase::start_deferred)) {
      // What runs is the attempt being stopped; the new one waits for it to go.
      ctx_.to_agent(peer, protocol::JobCancel{id, "an earlier attempt of this job must stop before the next starts"});
    }
  }
}

std::size_t JobTable::fail_over_from(const std::string& node_id, TimeMs now) {
  std::vector<std::uint64_t> affected;
  for (std::uint64_t id : index_.on_node(node_id)) {
    if (jobs_.at(id).summary.state != JobState::queued) affected.push_back(id);
  }
  for (std::uint64_t id : affected) {
    attempt_lost(jobs_.at(id),
                 fmt::format("node {} went silent for {} heartbeats", node_id, ctx_.knobs.liveness_missed_beats), now);
  }
  std::vector<std::uint64_t> stopped;
  for (const auto& [id, attempt] : attempts_.all()) {
    if (attempt.earlier_stopping && attempt.earlier_stopping->node_id == node_id) stopped.push_back(id);
  }
  for (std::uint64_t id : stopped) attempt_stopped(id, now);
  return affected.size();
}

bool JobTable::may_rerun(const JobRecord& job, const NodeRecord& node, TimeMs now) const {
  return may_be_rerun(job) && job.summary.node_id == node.summary.node_id &&
         now - job.finished_at_ms <= ctx_.knobs.quarantine_rerun_window_ms;
}

void JobTable::rerun_failures_of(const NodeRecord& node, TimeMs now) {
  std::vector<std::uint64_t> failed;
  for (const auto& [finished_at_ms, id] : rerun_candidates_) {
    if (may_rerun(jobs_.at(id), node, now)) failed.push_back(id);
  }
  std::sort(failed.begin(), failed.end());
  for (std::uint64_t id : failed) rerun(id, node, now);
}

void JobTable::rerun(std::uint64_t id, const NodeRecord& node, TimeMs now) {
  JobRecord rerun = rerun_record(jobs_.at(id), now);
  // Same revision, and the quarantined node takes no work: the rerun lands on a healthy peer.
  rerun.summary.hardware_revision = node.summary.hardware_revision;
  rerun.summary.detail = fmt::format("rerun of job {}, which failed on {}, quarantined since", id,
                                     node.summary.node_id);
  rerun.rerun_of = id;
  if (auto s = submit_to_scheduler(rerun, now); !s) {
    ctx_.log(action::Severity::warn, fmt::format("cannot rerun job {}: {}", id, s.error().message));
    return;
  }
  const std::uint64_t rerun_id = next_job_id_++;
  activate(rerun_id, rerun);
  save(jobs_[rerun_id] = std::move(rerun));
  JobRecord& first = jobs_.at(id);
  first.rerun_job_id = rerun_id;
  save(first);
  ctx_.log(action::Severity::info,
           fmt::format("job {} failed on quarantined node {}: rerun as job {} on a healthy node "
                       "of revision {}",
                       id, node.summary.node_id, rerun_id, node.summary.hardware_revision));
}

void JobTable::attempt_lost(JobRecord& job, const std::string& why, TimeMs now) {
  forget_request(job, now);
  const DevLease* lease = job.lease_id != 0 ? leases_.find(job.lease_id) : nullptr;
  if (job.cancel_requested) {
    finish(job, JobState::cancelled, fmt::format("cancelled; attempt {} ended: {}", job.summary.attempt, why), now);
  } else if (job.lease_id != 0 && (!lease || lease->summary.state == LeaseState::ended)) {
    finish(job, JobState::cancelled,
           fmt::format("attempt {} ended: {}; its lease L{} has ended", job.summary.attempt, why, job.lease_id), now);
  } else if (job.summary.gang_size > 0) {
    // Its peers hold their rendezvous with this attempt: a new one alone would meet nobody.
    finish(job, JobState::lost,
           fmt::format("attempt {} lost: {}; a rank of a gang is not retried alone", job.summary.attempt, why), now);
  } else if (job.summary.attempt - std::min(job.summary.attempt, job.preemptions) < job.summary.max_attempts &&
             job.summary.attempt < 100) {
    job.summary.state = JobState::queued;
    job.summary.detail = fmt::format("attempt {} lost: {}; requeued", job.summary.attempt, why);
    if (!job.summary.node_id.empty()) {
      auto& placed = last_placement_[job.summary.job_id][job.summary.node_id];
      for (std::uint32_t chip : job.summary.chip_indices) {
        if (std::find(placed.begin(), placed.end(), chip) == placed.end()) placed.push_back(chip);
      }
    }
    job.summary.chip_indices.clear();
    job.summary.node_id.clear();
    if (job.lease_id == 0) {
      if (auto s = submit_to_scheduler(job, now); !s) {
        finish(job, JobState::lost, fmt::format("attempt {} lost: {}; cannot be requeued: {}", job.summary.attempt,
                                                why, s.error().message),
               now);
        return;
      }
    }
    save(job);
    ctx_.log(action::Severity::warn, fmt::format("job {}: {}", job.summary.job_id, job.summary.detail));
  } else {
    finish(job, JobState::lost,
           fmt::format("attempt {} of {} lost: {}", job.summary.attempt, job.summary.max_attempts, why), now);
  }
}

void JobTable::finish(JobRecord& job, JobState state, std::string detail, TimeMs now) {
  KILN_ASSERT(protocol::is_terminal(state), "finish() takes a terminal state");
  job.summary.state = state;
  job.summary.detail = std::move(detail);
  job.finished_at_ms = now;
  active_jobs_.erase(job.summary.job_id);
  active_maintenance_jobs_.erase(job.summary.job_id);
  forget_request(job, now);
  save(job);
  ctx_.log(state == JobState::succeeded ? action::Severity::info : action::Severity::warn,
           fmt::format("job {} {}: {}", job.summary.job_id, protocol::enum_name(state), job.summary.detail));
  // A job that fails on a node already quarantined is rerun as one that failed just before
  // the quarantine is (rerun_failures_of): the order of the two does not change the outcome.
  if (auto node = ctx_.registry.nodes().find(job.summary.node_id);
      node != ctx_.registry.nodes().end() && node->second.summary.state == NodeState::quarantined &&
      may_rerun(job, node->second, now)) {
    rerun(job.summary.job_id, node->second, now);
  }
  if (job.summary.gang_size > 0 && state != JobState::succeeded && !ran_and_reported(job)) end_gang(job, now);
}

void JobTable::end_gang(const JobRecord& ended, TimeMs now) {
  const protocol::JobSummary& s = ended.summary;
  const std::string why = text::utf8_head(
      fmt::format("rank {} of its gang (job {}) ended {}: {}", s.gang_rank, s.job_id, protocol::enum_name(s.state),
                  s.detail),
      protocol::kMessageText.max_len);
  // Every rank is marked before any ends, so the ranks ended here do not end the gang again.
  std::vector<std::uint64_t> queued;
  for (std::uint32_t rank = 0; rank < s.gang_size; ++rank) {
    const std::uint64_t id = s.gang_id + rank;
    auto it = jobs_.find(id);
    if (id == s.job_id || it == jobs_.end() || !active_jobs_.count(id) || it->second.cancel_requested) continue;
    JobRecord& peer = it->second;
    if (peer.summary.state == JobState::queued) {
      peer.cancel_requested = true;
      queued.push_back(id);
    } else {
      request_cancel(peer, why);
    }
  }
  for (std::uint64_t id : queued) finish(jobs_.at(id), JobState::cancelled, why, now);
  ctx_.log(action::Severity::warn, fmt::format("gang {}: {}; its other ranks are stopped", s.gang_id, why));
}

void JobTable::start_attempt(JobRecord& job, const std::string& node_id, std::vector<std::uint32_t> chips, TimeMs now) {
  job.summary.state = JobState::assigned;
  job.summary.node_id = node_id;
  job.summary.chip_indices = chips;
  job.summary.attempt += 1;
  job.started_at_ms = now;
  // A new attempt: what its node was is read again.
  job.summary.node_quarantined.clear();
  save(job);
  // Every chip an attempt of the job used on the node: an older attempt may still run there.
  auto& placed = last_placement_[job.summary.job_id][node_id];
  for (std::uint32_t chip : job.summary.chip_indices) {
    if (std::find(placed.begin(), placed.end(), chip) == placed.end()) placed.push_back(chip);
  }
  // Bounded: the oldest jobs' placements go first (a workload that old has long been stopped).
  constexpr std::size_t kMaxPlacementsKept = 10000;
  while (last_placement_.size() > kMaxPlacementsKept) last_placement_.erase(last_placement_.begin());
  const std::uint64_t id = job.summary.job_id;
  if (const auto& stopping = attempts_.earlier_stopping(id); stopping && stopping->node_id == node_id) {
    const std::uint32_t earlier = stopping->attempt;
    attempts_.to(id, AttemptPhase::start_deferred);
    ctx_.log(action::Severity::info,
             fmt::format("job {} attempt {} has chips [{}] on {}; it starts once attempt {} has "
                         "stopped there",
                         id, job.summary.attempt, fmt::join(chips, ","), node_id, earlier));
    return;
  }
  // An earlier attempt stopping on another node is no concern of this one's (its chips are held).
  attempts_.earlier_stopped(id);
  if (auto unheld = stopping_on_node_.find(node_id); unheld != stopping_on_node_.end() && !unheld->second.empty()) {
    // Maintenance enters a quarantined node whatever it is stopping, and where those jobs run
    // is not held: wait until they are gone.
    attempts_.to(id, AttemptPhase::start_deferred);
    ctx_.log(
        action::Severity::info,
        fmt::format("job {} attempt {} has chips [{}] on {}; it starts once the {} jobs the "
                    "node is stopping are gone",
                    job.summary.job_id, job.summary.attempt, fmt::join(chips, ","), node_id, unheld->second.size()));
    return;
  }
  attempts_.to(id, AttemptPhase::dispatched);
  send_job_start(job);
}

void JobTable::send_job_start(const JobRecord& job) {
  protocol::JobStart start;
  start.job_id = job.summary.job_id;
  start.attempt = job.summary.attempt;
  start.workload = job.summary.workload;
  start.args = job.summary.args;
  start.chip_indices = job.summary.chip_indices;
  start.timeout_ms = job.timeout_ms;
  start.seed = job.seed;
  start.benchmark = job.benchmark;
  start.rendezvous = rendezvous_of(job);
  start.artifacts = job.artifacts;
  ctx_.to_agent(*ctx_.registry.peer_of(job.summary.node_id), start);
  ctx_.log(action::Severity::info,
           fmt::format("job {} attempt {} dispatched to {} chips [{}]", job.summary.job_id, job.summary.attempt,
                       job.summary.node_id, fmt::join(start.chip_indices, ",")));
}

protocol::Rendezvous JobTable::rendezvous_of(const JobRecord& job) const {
  protocol::Rendezvous r;
  if (job.summary.gang_size == 0) return r;
  r.rank = job.summary.gang_rank;
  r.world_size = job.summary.gang_size;
  // The ranks start together, so rank 0 has its node; it stays recorded after rank 0 ends.
  const std::string& master_node = jobs_.at(job.summary.gang_id).summary.node_id;
  if (auto node = ctx_.registry.nodes().find(master_node); node != ctx_.registry.nodes().end()) {
    r.master_address = node->second.summary.rendezvous_address;
  }
  r.master_port = ctx_.knobs.rendezvous_port_first +
                  static_cast<std::uint32_t>(job.summary.gang_id % ctx_.knobs.rendezvous_port_count);
  return r;
}

scheduler::Request JobTable::stop_hold_request(std::uint64_t job_id, const std::string& node_id, std::size_t chips,
                                               TimeMs now) {
  scheduler::Request req;
  req.id = ctx_.bridge.new_stop_hold(job_id, node_id);
  req.name = describe(request_owner::StopHold{job_id, node_id});
  req.cls = scheduler::RequestClass::release;
  req.chips = static_cast<int>(lease_chips_for(static_cast<std::uint32_t>(std::max<std::size_t>(chips, 1))));
  if (req.chips > 8) {
    req.chips = 1;
    req.nodes = 1;
  }
  req.node = node_id;
  req.maintenance = true;  // never preempted, outside the quotas
  // Waited for no longer than a silent node: then the chips are given back regardless.
  req.expected_duration_ms = ctx_.knobs.job_timeout_slack_ms + ctx_.knobs.liveness_timeout_ms() + kSecondMs;
  req.lease_ms = req.expected_duration_ms;
  req.submit_ms = ctx_.to_scheduler_time(now);
  return req;
}

Status JobTable::hold_chips_of_stopping_job(const JobRecord& job, TimeMs now) {
  const std::uint64_t id = job.summary.job_id;
  const auto lease = attempts_.own_lease(id);
  if (!lease || job.summary.chip_indices.empty()) {
    return fail(Errc::not_found, fmt::format("job {} holds no chips of its own", id));
  }
  const std::string node_id = job.summary.node_id;
  scheduler::Placement placement{node_id, {}};
  for (std::uint32_t chip : job.summary.chip_indices) placement.chips.push_back(static_cast<int>(chip));
  const scheduler::Request hold = stop_hold_request(id, node_id, job.summary.chip_indices.size(), now);
  // The job's lease ends and its chips pass to the hold in one step, before anything else
  // can be placed on them.
  auto handed = ctx_.scheduler().transfer_lease(*lease, {{hold, {placement}, ctx_.to_scheduler_time(now)}},
                                                ctx_.to_scheduler_time(now));
  if (!handed) {
    ctx_.bridge.drop_stop_hold(hold.id);
    return tl::unexpected(handed.error());
  }
  attempts_.of(id).own_lease.reset();
  return {};
}

void JobTable::hold_stopping_chips(std::uint64_t job_id, const std::string& node_id,
                                   const std::vector<std::uint32_t>& chips, TimeMs now) {
  if (chips.empty() || ctx_.bridge.stop_hold_of(job_id, node_id)) return;
  scheduler::Placement placement{node_id, {}};
  for (std::uint32_t chip : chips) placement.chips.push_back(static_cast<int>(chip));
  const scheduler::Request req = stop_hold_request(job_id, node_id, chips.size(), now);
  if (auto held =
          ctx_.scheduler().restore_lease(req, {placement}, ctx_.to_scheduler_time(now), ctx_.to_scheduler_time(now));
      !held) {
    ctx_.bridge.drop_stop_hold(req.id);
    ctx_.log(action::Severity::debug, fmt::format("job {}: chips of its stopping attempt on {} not held: {}", job_id,
                                                  node_id, held.error().message));
  }
}

void JobTable::old_attempt_gone(std::uint64_t job_id, const std::string& node_id, TimeMs now) {
  if (auto request = ctx_.bridge.stop_hold_of(job_id, node_id)) ctx_.bridge.end_stop_hold(*request, now);
  auto& stopping = stopping_on_node_[node_id];
  if (stopping.erase(job_id) > 0) ctx_.bridge.node_changed(node_id);
  if (const auto& earlier = attempts_.earlier_stopping(job_id); earlier && earlier->node_id == node_id) {
    attempt_stopped(job_id, now);
  }
  start_deferred_on(node_id, now);
}

void JobTable::revoke_due(TimeMs now) {
  std::vector<std::uint64_t> due;
  for (const auto& [id, attempt] : attempts_.all()) {
    if (attempt.phase == AttemptPhase::under_notice && now >= attempt.grace_deadline_ms && attempt.own_lease) {
      due.push_back(id);
    }
  }
  for (std::uint64_t id : due) {
    JobRecord& job = jobs_.at(id);
    if (!stop_and_requeue(job, "preempted: the grace period ended",
                          fmt::format("attempt {} preempted on {}; queued again keeping its age", job.summary.attempt,
                                      job.summary.node_id),
                          now)) {
      ctx_.log(action::Severity::warn, fmt::format("job {} holds no chips of its own; the scheduler revokes it itself", id));
      attempts_.to(id, AttemptPhase::dispatched);
    }
  }
}

void JobTable::attempt_stopped(std::uint64_t job_id, TimeMs now) {
  attempts_.earlier_stopped(job_id);
  if (!attempts_.in(job_id, AttemptPhase::start_deferred)) return;
  JobRecord& job = jobs_.at(job_id);
  KILN_ASSERT(job.summary.state == JobState::assigned, "a deferred start belongs to an assigned attempt");
  // It also waits for the jobs its node is stopping without held chips (start_attempt).
  const auto unheld = stopping_on_node_.find(job.summary.node_id);
  if (unheld != stopping_on_node_.end() && !unheld->second.empty()) return;
  // Without a session the start cannot go; the node's return fails the attempt over.
  attempts_.to(job_id, AttemptPhase::dispatched);
  if (!ctx_.registry.has_session(job.summary.node_id)) return;
  job.started_at_ms = now;
  save(job);
  send_job_start(job);
}

void JobTable::start_deferred_on(const std::string& node_id, TimeMs now) {
  std::vector<std::uint64_t> ready;
  for (const auto& [id, attempt] : attempts_.all()) {
    if (attempt.phase != AttemptPhase::start_deferred) continue;
    const bool own_attempt_stopping = attempt.earlier_stopping && attempt.earlier_stopping->node_id == node_id;
    if (jobs_.at(id).summary.node_id == node_id && !own_attempt_stopping) ready.push_back(id);
  }
  for (std::uint64_t id : ready) attempt_stopped(id, now);
}

scheduler::Request JobTable::job_request(const JobRecord& job) {
  scheduler::Request req;
  req.id = ctx_.bridge.request_of(request_owner::Job{job.summary.job_id});
  req.name = describe(request_owner::Job{job.summary.job_id});
  req.cls = to_request_class(job.summary.priority_class);
  if (takes_whole_node(job)) {
    req.nodes = 1;
    req.maintenance = true;
  } else {
    req.chips = static_cast<int>(lease_chips_for(job.summary.chips));
  }
  if (!job.summary.hardware_revision.empty()) req.revision = job.summary.hardware_revision;
  if (!job.requested_node_id.empty()) req.node = job.requested_node_id;
  req.expected_duration_ms = job.timeout_ms;
  // The agent enforces the job's timeout and the core times out a silent attempt: the lease's
  // own expiry is only the backstop behind both.
  // A start deferred while an earlier attempt stops (stop_hold_request) comes on top.
  req.lease_ms = std::min<DurationMs>(static_cast<DurationMs>(job.timeout_ms) + 2 * ctx_.knobs.job_timeout_slack_ms +
                                          3 * ctx_.knobs.liveness_timeout_ms() + kSecondMs,
                                      ctx_.knobs.scheduler.max_lease_ms);
  req.submit_ms = ctx_.to_scheduler_time(job.submitted_at_ms);
  return req;
}

Status JobTable::submit_to_scheduler(const JobRecord& job, TimeMs now) {
  return ctx_.scheduler().submit(job_request(job), ctx_.to_scheduler_time(now));
}

void JobTable::forget_request(JobRecord& job, TimeMs now) {
  const std::uint64_t id = job.summary.job_id;
  attempts_.forget(id);
  // Jobs inside a developer lease have no request of their own, unless the lease ended while
  // they still ran (release_lease_chips).
  const auto request = ctx_.bridge.find_request(request_owner::Job{id});
  if (request && (ctx_.scheduler().is_pending(*request) || ctx_.scheduler().lease_of(*request))) {
    if (auto s = ctx_.scheduler().cancel(*request, ctx_.to_scheduler_time(now)); !s) {
      ctx_.log(action::Severity::warn, fmt::format("job {}: {}", id, s.error().message));
    }
  }
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

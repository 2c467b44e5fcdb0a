// Jobs and their attempts: submission, dispatch, results, failover, and the chips an attempt
// being stopped still holds.
#include "coordinator/core/coordinator_core.h"

#include <algorithm>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "coordinator/core/core_rules.h"

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

}  // namespace

void CoordinatorCore::handle_job_started(const std::string& node_id, const protocol::JobStarted& started, TimeMs) {
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

void CoordinatorCore::handle_job_finished(const std::string& peer, const std::string& node_id,
                                          const protocol::Envelope& m, const protocol::JobFinished& fin,
                                          TimeMs now) {
  auto it = jobs_.find(fin.job_id);
  if (it != jobs_.end()) {
    JobRecord& job = it->second;
    const bool current = !protocol::is_terminal(job.summary.state) && job.summary.state != JobState::queued &&
                         job.summary.node_id == node_id && job.summary.attempt == fin.attempt;
    const auto held = attempts_.own_lease(job.summary.job_id);
    if (current && attempts_.in(job.summary.job_id, AttemptPhase::under_notice) && held && !job.cancel_requested &&
        !finished_its_work(fin)) {
      // It let go at a checkpoint under a preemption notice: the scheduler requeues it keeping
      // its age (on_requeued), and the chips go to the request that preempted it.
      job.output_tail = fin.output_tail;
      log(action::Severity::info, fmt::format("job {} attempt {} let go of its chips after the preemption notice "
                                              "({})",
                                              job.summary.job_id, fin.attempt, protocol::enum_name(fin.outcome)));
      if (auto s = bridge_.scheduler().checkpoint_ack(*held, to_scheduler_time(now)); !s) {
        log(action::Severity::warn, fmt::format("job {}: {}", job.summary.job_id, s.error().message));
      }
      // The requeue is saved before the acknowledgement below: acknowledged first, a crash in
      // between would leave the store holding the attempt as running, and a restart would count
      // it lost although its agent has forgotten it.
      pump_scheduler(now);
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
      finish(job, state, std::move(detail), now);
      if (job.summary.workload == protocol::kDiagWorkload) apply_diag_result(node_id, job, now);
      if (job.summary.workload == protocol::kInstallWorkload) apply_install_result(node_id, job, now);
    } else {
      log(action::Severity::debug, fmt::format("ignoring a stale result for job {} attempt {} from node {}",
                                               fin.job_id, fin.attempt, node_id));
      const auto& stopping = attempts_.earlier_stopping(fin.job_id);
      const bool stopping_attempt = stopping && stopping->attempt == fin.attempt && stopping->node_id == node_id;
      // An agent keeps an unacknowledged result while it runs a later attempt of the same job,
      // so only the end of the job's latest attempt shows the stopping one gone; an older one
      // waits for the heartbeats.
      const bool latest_attempt = fin.attempt >= job.summary.attempt;
      if (stopping_attempt ||
          (latest_attempt && (bridge_.stop_hold_of(fin.job_id, node_id) || stopping_on_node_[node_id].count(fin.job_id)))) {
        old_attempt_gone(fin.job_id, node_id, now);
      }
    }
  }
  // Acknowledged in every case, once stored when it mattered, so the agent can forget it.
  to_agent(peer, protocol::JobFinishedAck{fin.job_id, fin.attempt}, m.header.id);
}

void CoordinatorCore::handle_submit(const std::string& client, const Caller& caller, const protocol::Envelope& m,
                                    const protocol::SubmitJob& submit, std::uint64_t lease_id, TimeMs now) {
  if (auto refused = refuse_submit(caller, submit, lease_id)) {
    reply_error(client, m.header.id, refused->code, std::move(refused->message));
    return;
  }
  const bool maintenance = protocol::is_maintenance_workload(submit.workload);
  const DevLease* lease = lease_id != 0 ? dev_leases_.find(lease_id) : nullptr;
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
  job.lease_id = lease_id;
  // Maintenance takes the whole node: nothing else may share its chips while it runs.
  if (maintenance) job.summary.chips = registry_.nodes().at(submit.node_id).summary.chips_total;
  job.submitted_at_ms = now;
  if (lease_id != 0) {
    job.summary.detail = fmt::format("runs inside lease L{}", lease_id);
  } else if (auto s = submit_to_scheduler(job, now); !s) {
    reply_error(client, m.header.id, s.error().code, s.error().message);
    return;
  }
  const std::uint64_t id = next_job_id_++;
  active_jobs_.insert(id);
  auto& stored = jobs_[id] = std::move(job);
  save(stored);
  sink_.push(action::ToClient{client, protocol::JobAccepted{id}, m.header.id});
  log(action::Severity::info, fmt::format("job {} ({} on {} chips, {}{}) submitted by {}", id, submit.workload,
                                          submit.chips, protocol::enum_name(stored.summary.priority_class),
                                          lease_id ? fmt::format(", in lease L{}", lease_id) : "", caller.key_name));
  sync_node_states(now);
}

std::optional<Error> CoordinatorCore::refuse_submit(const Caller& caller, const protocol::SubmitJob& submit,
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
  if (!maintenance && submit.chips > 8) {
    return Error{Errc::invalid_argument,
                 fmt::format("a job runs on one node and may ask for 1 to 8 chips, not {}", submit.chips)};
  }
  if (!submit.node_id.empty() && registry_.nodes().count(submit.node_id) == 0) {
    return Error{Errc::not_found,
                 fmt::format("node {} is not registered; `kiln nodes` lists the nodes", submit.node_id)};
  }
  if (!maintenance && lease_id == 0) {
    if (auto never = registry_.never_placeable(submit.hardware_revision, 0, submit.chips, submit.node_id)) {
      return Error{Errc::invalid_argument, fmt::format("this job could never start: {}", *never)};
    }
  }
  std::size_t queued = 0;
  for (std::uint64_t id : active_jobs_) queued += jobs_.at(id).summary.state == JobState::queued ? 1 : 0;
  if (queued >= knobs_.max_queued_jobs) {
    return Error{Errc::unavailable,
                 fmt::format("the queue is full ({} jobs waiting); try again later", queued)};
  }
  return std::nullopt;
}

std::optional<Error> CoordinatorCore::refuse_submit_in_lease(const Caller& caller, const protocol::SubmitJob& submit,
                                                             std::uint64_t lease_id) {
  const DevLease* lease = dev_leases_.find(lease_id);
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
  if (jobs_in_lease(lease_id).size() >= 1024) {
    return Error{Errc::unavailable,
                 fmt::format("lease L{} already has 1024 jobs queued or running; wait for some to end", lease_id)};
  }
  if (!submit.node_id.empty()) {
    return Error{Errc::invalid_argument,
                 "a job inside a lease runs on the lease's chips; drop --node"};
  }
  return std::nullopt;
}

void CoordinatorCore::handle_cancel(const std::string& client, const Caller& caller, const protocol::Envelope& m,
                                    const protocol::CancelJob& cancel, TimeMs now) {
  auto it = jobs_.find(cancel.job_id);
  if (it == jobs_.end()) {
    reply_error(client, m.header.id, Errc::not_found, fmt::format("no job {}", cancel.job_id));
    return;
  }
  JobRecord& job = it->second;
  if (!privileged(caller.role) && job.summary.submitted_by != caller.key_name) {
    reply_error(client, m.header.id, Errc::unauthorized,
                fmt::format("job {} was submitted by {}; only its submitter, ops or admin may cancel it",
                            cancel.job_id, job.summary.submitted_by));
    return;
  }
  if (protocol::is_terminal(job.summary.state)) {
    reply_error(client, m.header.id, Errc::conflict,
                fmt::format("job {} already ended ({})", cancel.job_id, protocol::enum_name(job.summary.state)));
    return;
  }
  if (job.summary.state == JobState::queued) {
    finish(job, JobState::cancelled, fmt::format("cancelled by {} while queued", caller.key_name), now);
  } else {
    job.cancel_requested = true;
    save(job);
    if (auto peer = peer_of(job.summary.node_id)) {
      to_agent(*peer, protocol::JobCancel{job.summary.job_id, fmt::format("cancelled by {}", caller.key_name)});
    }
  }
  sink_.push(action::ToClient{client, protocol::Ok{"cancel requested"}, m.header.id});
}

protocol::JobList CoordinatorCore::job_list(const protocol::ListJobs& request) const {
  protocol::JobList list;
  const std::size_t limit = std::min<std::size_t>(request.limit, knobs_.max_jobs_listed);
  for (auto it = jobs_.rbegin(); it != jobs_.rend() && list.jobs.size() < limit; ++it) {
    if (request.active_only && protocol::is_terminal(it->second.summary.state)) continue;
    list.jobs.push_back(it->second.summary);
  }
  return list;
}

void CoordinatorCore::attempt_lost(JobRecord& job, const std::string& why, TimeMs now) {
  forget_request(job, now);
  const DevLease* lease = job.lease_id != 0 ? dev_leases_.find(job.lease_id) : nullptr;
  if (job.cancel_requested) {
    finish(job, JobState::cancelled, fmt::format("cancelled; attempt {} ended: {}", job.summary.attempt, why), now);
  } else if (job.lease_id != 0 && (!lease || lease->summary.state == LeaseState::ended)) {
    finish(job, JobState::cancelled,
           fmt::format("attempt {} ended: {}; its lease L{} has ended", job.summary.attempt, why, job.lease_id), now);
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
    log(action::Severity::warn, fmt::format("job {}: {}", job.summary.job_id, job.summary.detail));
  } else {
    finish(job, JobState::lost, fmt::format("attempt {} of {} lost: {}", job.summary.attempt,
                                             job.summary.max_attempts, why), now);
  }
}

void CoordinatorCore::finish(JobRecord& job, JobState state, std::string detail, TimeMs now) {
  KILN_ASSERT(protocol::is_terminal(state), "finish() takes a terminal state");
  job.summary.state = state;
  job.summary.detail = std::move(detail);
  job.finished_at_ms = now;
  active_jobs_.erase(job.summary.job_id);
  forget_request(job, now);
  save(job);
  log(state == JobState::succeeded ? action::Severity::info : action::Severity::warn,
      fmt::format("job {} {}: {}", job.summary.job_id, protocol::enum_name(state), job.summary.detail));
  // A job that fails on a node already quarantined is rerun as one that failed just before
  // the quarantine is (rerun_failures_of): the order of the two does not change the outcome.
  if (auto node = registry_.nodes().find(job.summary.node_id);
      node != registry_.nodes().end() && node->second.summary.state == NodeState::quarantined && may_rerun(job, node->second, now)) {
    rerun(job.summary.job_id, node->second, now);
  }
}

void CoordinatorCore::start_attempt(JobRecord& job, const std::string& node_id, std::vector<std::uint32_t> chips,
                                    TimeMs now) {
  job.summary.state = JobState::assigned;
  job.summary.node_id = node_id;
  job.summary.chip_indices = chips;
  job.summary.attempt += 1;
  job.started_at_ms = now;
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
    log(action::Severity::info, fmt::format("job {} attempt {} has chips [{}] on {}; it starts once attempt {} has "
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
    log(action::Severity::info, fmt::format("job {} attempt {} has chips [{}] on {}; it starts once the {} jobs the "
                                            "node is stopping are gone",
                                            job.summary.job_id, job.summary.attempt, fmt::join(chips, ","), node_id,
                                            unheld->second.size()));
    return;
  }
  attempts_.to(id, AttemptPhase::dispatched);
  send_job_start(job);
}

void CoordinatorCore::send_job_start(const JobRecord& job) {
  protocol::JobStart start;
  start.job_id = job.summary.job_id;
  start.attempt = job.summary.attempt;
  start.workload = job.summary.workload;
  start.args = job.summary.args;
  start.chip_indices = job.summary.chip_indices;
  start.timeout_ms = job.timeout_ms;
  start.seed = job.seed;
  start.benchmark = job.benchmark;
  to_agent(*registry_.peer_of(job.summary.node_id), start);
  log(action::Severity::info, fmt::format("job {} attempt {} dispatched to {} chips [{}]", job.summary.job_id,
                                          job.summary.attempt, job.summary.node_id, fmt::join(start.chip_indices, ",")));
}

scheduler::Request CoordinatorCore::stop_hold_request(std::uint64_t job_id, const std::string& node_id,
                                                     std::size_t chips, TimeMs now) {
  scheduler::Request req;
  req.id = bridge_.new_stop_hold(job_id, node_id);
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
  req.expected_duration_ms = knobs_.job_timeout_slack_ms + knobs_.liveness_timeout_ms() + kSecondMs;
  req.lease_ms = req.expected_duration_ms;
  req.submit_ms = to_scheduler_time(now);
  return req;
}

Status CoordinatorCore::hold_chips_of_stopping_job(const JobRecord& job, TimeMs now) {
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
  auto handed = bridge_.scheduler().transfer_lease(*lease, {{hold, {placement}, to_scheduler_time(now)}},
                                          to_scheduler_time(now));
  if (!handed) {
    bridge_.drop_stop_hold(hold.id);
    return tl::unexpected(handed.error());
  }
  attempts_.of(id).own_lease.reset();
  return {};
}

void CoordinatorCore::hold_stopping_chips(std::uint64_t job_id, const std::string& node_id,
                                          const std::vector<std::uint32_t>& chips, TimeMs now) {
  if (chips.empty() || bridge_.stop_hold_of(job_id, node_id)) return;
  scheduler::Placement placement{node_id, {}};
  for (std::uint32_t chip : chips) placement.chips.push_back(static_cast<int>(chip));
  const scheduler::Request req = stop_hold_request(job_id, node_id, chips.size(), now);
  if (auto held = bridge_.scheduler().restore_lease(req, {placement}, to_scheduler_time(now), to_scheduler_time(now));
      !held) {
    bridge_.drop_stop_hold(req.id);
    log(action::Severity::debug, fmt::format("job {}: chips of its stopping attempt on {} not held: {}", job_id, node_id,
                                             held.error().message));
  }
}

void CoordinatorCore::old_attempt_gone(std::uint64_t job_id, const std::string& node_id, TimeMs now) {
  if (auto request = bridge_.stop_hold_of(job_id, node_id)) bridge_.end_stop_hold(*request, now);
  auto& stopping = stopping_on_node_[node_id];
  stopping.erase(job_id);
  if (const auto& earlier = attempts_.earlier_stopping(job_id); earlier && earlier->node_id == node_id) {
    attempt_stopped(job_id, now);
  }
  start_deferred_on(node_id, now);
}

void CoordinatorCore::revoke_due_jobs(TimeMs now) {
  std::vector<std::uint64_t> due;
  for (const auto& [id, attempt] : attempts_.all()) {
    if (attempt.phase == AttemptPhase::under_notice && now >= attempt.grace_deadline_ms && attempt.own_lease) {
      due.push_back(id);
    }
  }
  for (std::uint64_t id : due) {
    JobRecord& job = jobs_.at(id);
    const std::string node_id = job.summary.node_id;
    if (auto held = hold_chips_of_stopping_job(job, now); !held) {
      log(action::Severity::warn, fmt::format("job {}: {}; the scheduler revokes it itself", id,
                                              held.error().message));
      attempts_.to(id, AttemptPhase::dispatched);
      continue;
    }
    if (auto peer = peer_of(node_id)) to_agent(*peer, protocol::JobCancel{id, "preempted: the grace period ended"});
    attempts_.to(id, AttemptPhase::waiting);
    attempts_.of(id).earlier_stopping = StoppingAttempt{node_id, job.summary.attempt, now};
    job.preemptions += 1;
    job.summary.state = JobState::queued;
    job.summary.detail = fmt::format("attempt {} preempted on {}; queued again keeping its age", job.summary.attempt,
                                     node_id);
    job.summary.node_id.clear();
    job.summary.chip_indices.clear();
    if (auto s = submit_to_scheduler(job, now); !s) {
      finish(job, JobState::failed, "cannot be queued again after its preemption: " + s.error().message, now);
      continue;
    }
    save(job);
    log(action::Severity::info, fmt::format("job {}: {}", id, job.summary.detail));
  }
}

void CoordinatorCore::attempt_stopped(std::uint64_t job_id, TimeMs now) {
  attempts_.earlier_stopped(job_id);
  if (!attempts_.in(job_id, AttemptPhase::start_deferred)) return;
  JobRecord& job = jobs_.at(job_id);
  KILN_ASSERT(job.summary.state == JobState::assigned, "a deferred start belongs to an assigned attempt");
  // It also waits for the jobs its node is stopping without held chips (start_attempt).
  const auto unheld = stopping_on_node_.find(job.summary.node_id);
  if (unheld != stopping_on_node_.end() && !unheld->second.empty()) return;
  // Without a session the start cannot go; the node's return fails the attempt over.
  attempts_.to(job_id, AttemptPhase::dispatched);
  if (!registry_.has_session(job.summary.node_id)) return;
  job.started_at_ms = now;
  save(job);
  send_job_start(job);
}

void CoordinatorCore::start_deferred_on(const std::string& node_id, TimeMs now) {
  std::vector<std::uint64_t> ready;
  for (const auto& [id, attempt] : attempts_.all()) {
    if (attempt.phase != AttemptPhase::start_deferred) continue;
    const bool own_attempt_stopping = attempt.earlier_stopping && attempt.earlier_stopping->node_id == node_id;
    if (jobs_.at(id).summary.node_id == node_id && !own_attempt_stopping) ready.push_back(id);
  }
  for (std::uint64_t id : ready) attempt_stopped(id, now);
}

void CoordinatorCore::refresh_chip_counts() {
  std::map<std::string, std::set<std::uint32_t>> used;
  for (const auto& lease : bridge_.scheduler().leases()) {
    // Chips held while a cancelled attempt stops belong to no active job: not shown as used.
    if (bridge_.is_stop_hold(lease.request)) continue;
    for (const auto& p : lease.placement) {
      for (int chip : p.chips) used[p.node].insert(static_cast<std::uint32_t>(chip));
    }
  }
  for (std::uint64_t id : active_jobs_) {
    const JobRecord& job = jobs_.at(id);
    if (job.summary.state == JobState::queued) continue;
    used[job.summary.node_id].insert(job.summary.chip_indices.begin(), job.summary.chip_indices.end());
  }
  for (auto& [id, node] : registry_.nodes()) {
    auto it = used.find(id);
    node.summary.chips_used = it == used.end() ? 0 : static_cast<std::uint32_t>(it->second.size());
  }
}

}  // namespace kiln::coordinator

#include "coordinator/core/coordinator_core.h"

#include <algorithm>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace kiln::coordinator {

using protocol::JobState;
using protocol::LeaseEventKind;
using protocol::LeaseState;
using protocol::NodeState;
using protocol::PriorityClass;
using protocol::Role;

namespace {

constexpr TimeMs kDayMs = 24 * kHourMs;
// Lease events kept per lease for watchers that fall behind.
constexpr std::size_t kMaxLeaseEvents = 32;

bool client_role_may_submit(Role role, PriorityClass cls) {
  switch (role) {
    case Role::admin:
    case Role::ops: return true;
    case Role::ci: return cls != PriorityClass::experiment;
    case Role::developer:
    case Role::lab: return cls == PriorityClass::experiment;
    case Role::agent: return false;
  }
  return false;
}

bool client_role_may_run_maintenance(Role role, std::string_view workload) {
  if (role == Role::admin || role == Role::ops) return true;
  return role == Role::lab && workload == protocol::kDiagWorkload;
}

bool privileged(Role role) { return role == Role::ops || role == Role::admin; }

scheduler::RequestClass to_request_class(PriorityClass cls) {
  auto parsed = scheduler::parse_request_class(protocol::enum_name(cls));
  KILN_ASSERT(parsed.has_value(), "protocol and scheduler name the same classes");
  return *parsed;
}

bool is_hold_request(scheduler::RequestId id) { return id >= kStopHoldBase; }
bool is_lease_request(scheduler::RequestId id) { return id >= kLeaseRequestBase && !is_hold_request(id); }

// The scheduler leases 1, 2, 4 or 8 chips on one node; a job asking for 3 gets a lease of 4
// and uses 3 of them.
std::uint32_t lease_chips_for(std::uint32_t chips) {
  std::uint32_t size = 1;
  while (size < chips) size *= 2;
  return size;
}

std::string human_duration(TimeMs ms) {
  if (ms < 0) ms = 0;
  if (ms < kMinuteMs) return fmt::format("{}s", (ms + 999) / 1000);
  if (ms < kHourMs) return fmt::format("{}m", (ms + kMinuteMs - 1) / kMinuteMs);
  return fmt::format("{}h{:02}m", ms / kHourMs, (ms % kHourMs) / kMinuteMs);
}

// "HH:MM UTC" of a wall-clock time (milliseconds since the epoch).
std::string wall_clock_text(TimeMs wall) {
  TimeMs in_day = ((wall % kDayMs) + kDayMs) % kDayMs;
  return fmt::format("{:02}:{:02} UTC", in_day / kHourMs, (in_day % kHourMs) / kMinuteMs);
}

// What a diagnostics job's result document says: its level and verdict (docs/health.md).
struct DiagOutcome {
  int level = 0;
  std::string verdict;
};

std::optional<DiagOutcome> diag_outcome(const std::string& result) {
  auto doc = nlohmann::json::parse(result, nullptr, /*allow_exceptions=*/false);
  if (!doc.is_object()) return std::nullopt;
  auto level = doc.find("level");
  auto verdict = doc.find("verdict");
  if (level == doc.end() || !level->is_number_integer() || verdict == doc.end() || !verdict->is_string()) {
    return std::nullopt;
  }
  return DiagOutcome{level->get<int>(), verdict->get<std::string>()};
}

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

CoordinatorCore::CoordinatorCore(CoordinatorKnobs knobs, Snapshot recovered, TimeMs now)
    : knobs_(knobs), scheduler_(knobs.scheduler), records_(std::move(recovered.records)) {
  clock_origin_ms_ = now >= 0 ? now / kDayMs * kDayMs : 0;
  for (auto& node : recovered.nodes) {
    // A recovered node has no session yet: give it one liveness timeout to say hello.
    node.last_seen_ms = now;
    std::string id = node.summary.node_id;
    nodes_.emplace(id, std::move(node));
  }
  // The scheduler learns the recovered nodes as lost: nothing new goes to them before their
  // agents say hello, and the chips of jobs still running there can be given back first.
  for (auto& [id, node] : nodes_) {
    upsert_scheduler_node(node, now);
    set_scheduler_node_state(id, scheduler::NodeState::lost, "waiting for its agent to register", "", now);
  }
  for (auto& job : recovered.jobs) {
    next_job_id_ = std::max(next_job_id_, job.summary.job_id + 1);
    if (!protocol::is_terminal(job.summary.state)) active_jobs_.insert(job.summary.job_id);
    jobs_.emplace(job.summary.job_id, std::move(job));
  }
  // Leases after the jobs (ending one ends its jobs), before the queued jobs go back to the
  // scheduler: a granted lease's chips are held again before anything else is placed.
  const std::size_t leases_recovered = recovered.leases.size();
  for (auto& lease : recovered.leases) recover_lease(std::move(lease), now);
  prune_ended_leases();
  std::size_t resubmitted = 0;
  for (std::uint64_t id : std::vector<std::uint64_t>(active_jobs_.begin(), active_jobs_.end())) {
    JobRecord& job = jobs_.at(id);
    if (job.lease_id != 0) {
      // A job inside a lease waits for the lease's chips, or runs on them (or, its lease ended
      // or requeued while it ran, on chips of its own given back when its agent registers).
      const DevLease* lease = find_lease(job.lease_id);
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
  refresh_chip_counts();
  if (!recovered.nodes.empty() || !recovered.jobs.empty() || leases_recovered != 0) {
    std::size_t leases_active = 0;
    for (const auto& [id, lease] : leases_) leases_active += lease.summary.state == LeaseState::ended ? 0 : 1;
    log(action::Severity::info,
        fmt::format("recovered {} nodes, {} jobs ({} active, {} queued again) and {} developer leases ({} active) "
                    "from the store",
                    nodes_.size(), jobs_.size(), active_jobs_.size(), resubmitted, leases_recovered, leases_active));
  }
  pump_scheduler(now);
}

std::optional<Action> CoordinatorCore::poll_action() {
  if (actions_.empty()) return std::nullopt;
  Action a = std::move(actions_.front());
  actions_.pop_front();
  return a;
}

std::optional<TimeMs> CoordinatorCore::next_deadline() const {
  std::optional<TimeMs> next;
  auto consider = [&](TimeMs t) {
    if (!next || t < *next) next = t;
  };
  for (const auto& [id, node] : nodes_) {
    if (node.summary.state != NodeState::lost) consider(node.last_seen_ms + knobs_.liveness_timeout_ms() + 1);
  }
  for (std::uint64_t id : active_jobs_) {
    const JobRecord& job = jobs_.at(id);
    if (job.summary.state != JobState::queued) {
      consider(job.started_at_ms + job.timeout_ms + knobs_.job_timeout_slack_ms + 1);
    }
  }
  if (auto t = scheduler_.next_deadline()) consider(to_wall_time(*t));
  for (const Watch& w : watches_) consider(w.deadline_ms);
  for (const auto& [id, deadline] : jobs_under_notice_) consider(deadline);
  for (const auto& [id, lease] : leases_) {
    if (lease.recovered_under_notice) consider(static_cast<TimeMs>(lease.summary.grace_deadline_ms));
  }
  for (const auto& [id, stopping] : stopping_attempts_) {
    consider(stopping.since_ms + knobs_.job_timeout_slack_ms + knobs_.liveness_timeout_ms());
  }
  for (const auto& [node_id, stopping] : stopping_on_node_) {
    for (const auto& [id, since] : stopping) consider(since + knobs_.job_timeout_slack_ms + knobs_.liveness_timeout_ms());
  }
  return next;
}

std::optional<std::string> CoordinatorCore::peer_of(const std::string& node_id) const {
  auto it = peer_by_node_.find(node_id);
  if (it == peer_by_node_.end()) return std::nullopt;
  return it->second;
}

bool CoordinatorCore::node_has_session(const std::string& node_id) const {
  return peer_by_node_.count(node_id) != 0;
}

// ---- agents ------------------------------------------------------------------------------

void CoordinatorCore::on_agent_message(const std::string& peer, const Caller& caller,
                                       const protocol::Envelope& m, TimeMs now) {
  KILN_ASSERT(caller.role == Role::agent, "the shell admits only agent keys on the agent socket");
  if (const auto* hello = std::get_if<protocol::Hello>(&m.body)) {
    handle_hello(peer, caller, m, *hello, now);
    pump_scheduler(now);
    return;
  }
  auto session = sessions_.find(peer);
  if (session == sessions_.end()) {
    to_agent(peer,
             protocol::ErrorReply{std::string(to_string(Errc::not_registered)),
                                  "this connection has no session (the coordinator may have restarted); "
                                  "send hello to register",
                                  {}},
             m.header.id);
    return;
  }
  const std::string node_id = session->second.node_id;
  auto node = nodes_.find(node_id);
  KILN_ASSERT(node != nodes_.end(), "a session always belongs to a registered node");
  node->second.last_seen_ms = now;

  std::visit(
      [&](const auto& body) {
        using T = std::decay_t<decltype(body)>;
        if constexpr (std::is_same_v<T, protocol::Heartbeat>) {
          handle_heartbeat(peer, node_id, m, body, now);
        } else if constexpr (std::is_same_v<T, protocol::JobStarted>) {
          handle_job_started(node_id, body, now);
        } else if constexpr (std::is_same_v<T, protocol::JobFinished>) {
          handle_job_finished(peer, node_id, m, body, now);
        } else if constexpr (std::is_same_v<T, protocol::HealthReport>) {
          handle_health_report(node_id, body, now);
        } else if constexpr (std::is_same_v<T, protocol::ErrorReply>) {
          log(action::Severity::warn,
              fmt::format("node {} refused message {}: {}: {}", node_id, m.header.corr, body.code, body.message));
        } else {
          to_agent(peer,
                   protocol::ErrorReply{std::string(to_string(Errc::bad_message)),
                                        fmt::format("'{}' is not a message an agent may send", T::kType),
                                        {}},
                   m.header.id);
        }
      },
      m.body);
  pump_scheduler(now);
}

void CoordinatorCore::handle_hello(const std::string& peer, const Caller& caller,
                                   const protocol::Envelope& m, const protocol::Hello& hello, TimeMs now) {
  if (caller.key_name != hello.node_id) {
    to_agent(peer,
             protocol::ErrorReply{std::string(to_string(Errc::unauthorized)),
                                  fmt::format("key '{}' may only register as node '{}', not '{}'; give each "
                                              "agent its own key named after its node id",
                                              caller.key_name, caller.key_name, hello.node_id),
                                  {}},
             m.header.id);
    log(action::Severity::warn, fmt::format("refused hello from key '{}' claiming node '{}'", caller.key_name,
                                            hello.node_id));
    return;
  }
  std::uint32_t version = 0;
  for (std::uint32_t v : hello.protocol_versions) {
    if (protocol::is_supported_version(v)) version = std::max(version, v);
  }
  if (version == 0) {
    to_agent(peer,
             protocol::ErrorReply{std::string(to_string(Errc::unsupported_version)),
                                  "no protocol version in common; upgrade the agent or the coordinator",
                                  {protocol::kSupportedVersions.begin(), protocol::kSupportedVersions.end()}},
             m.header.id);
    return;
  }

  // A node that registers again on a new connection replaces its old session.
  if (auto old = peer_by_node_.find(hello.node_id); old != peer_by_node_.end() && old->second != peer) {
    sessions_.erase(old->second);
  }
  sessions_[peer] = Session{hello.node_id, version};
  peer_by_node_[hello.node_id] = peer;

  NodeRecord& node = nodes_[hello.node_id];
  const bool was_lost = node.summary.node_id.empty() || node.summary.state == NodeState::lost;
  node.summary.node_id = hello.node_id;
  node.summary.hardware_revision = hello.hardware_revision;
  node.summary.agent_version = hello.agent_version;
  node.summary.driver_version = hello.driver_version;
  node.summary.chips = hello.chips;
  node.summary.chips_total = static_cast<std::uint32_t>(hello.chips.size());
  node.summary.host = hello.host;
  // A quarantine outlives the node being lost: only passing diagnostics ends it.
  if (!node.summary.quarantine_reason.empty()) {
    node.summary.state = NodeState::quarantined;
  } else {
    node.summary.state = node.draining ? NodeState::draining : NodeState::up;
  }
  node.last_seen_ms = now;

  // Reconcile what the agent runs with what this coordinator assigned to it.
  protocol::Welcome welcome;
  welcome.protocol_version = version;
  welcome.heartbeat_interval_ms = knobs_.heartbeat_interval_ms;
  welcome.liveness_missed_beats = knobs_.liveness_missed_beats;
  const std::set<std::uint64_t> running(hello.running_jobs.begin(), hello.running_jobs.end());
  const std::set<std::uint64_t> finished(hello.finished_jobs.begin(), hello.finished_jobs.end());
  std::vector<std::uint64_t> unrestorable;
  std::set<std::uint64_t> reported = running;
  reported.insert(finished.begin(), finished.end());
  for (std::uint64_t id : reported) {
    auto it = jobs_.find(id);
    const bool ours = it != jobs_.end() && !protocol::is_terminal(it->second.summary.state) &&
                      it->second.summary.state != JobState::queued &&
                      it->second.summary.node_id == hello.node_id;
    if (!ours) {
      if (running.count(id)) welcome.cancel_jobs.push_back(id);
      continue;
    }
    JobRecord& job = it->second;
    // After a coordinator restart the scheduler does not know the chips this job holds yet; a
    // job that ended meanwhile holds them until its job_finished (which follows) is stored.
    if ((job.lease_id == 0 || !runs_on_lease_chips(job)) && !job_lease_.count(id)) {
      scheduler::Placement placement{hello.node_id, {}};
      for (std::uint32_t chip : job.summary.chip_indices) placement.chips.push_back(static_cast<int>(chip));
      auto lease = scheduler_.restore_lease(job_request(job), {placement}, to_scheduler_time(job.started_at_ms),
                                            to_scheduler_time(now));
      if (!lease) {
        log(action::Severity::warn, fmt::format("job {} cannot keep its chips on {}: {}; it is stopped", id,
                                                hello.node_id, lease.error().message));
        if (running.count(id)) welcome.cancel_jobs.push_back(id);
        unrestorable.push_back(id);
        continue;
      }
      job_lease_[id] = *lease;
    }
    if (job.summary.state == JobState::assigned && running.count(id)) {
      job.summary.state = JobState::running;
      save(job);
    }
  }
  // A revoked attempt the agent no longer runs has stopped; a new attempt waiting for it
  // starts after the welcome.
  std::vector<std::uint64_t> stopped;
  for (const auto& [id, stopping] : stopping_attempts_) {
    if (stopping.node_id == hello.node_id && !running.count(id)) stopped.push_back(id);
  }
  std::vector<std::uint64_t> vanished;
  for (std::uint64_t id : active_jobs_) {
    const JobRecord& job = jobs_.at(id);
    if (job.summary.node_id == hello.node_id && job.summary.state != JobState::queued &&
        running.count(id) == 0 && finished.count(id) == 0 && !deferred_starts_.count(id)) {
      vanished.push_back(id);
    }
  }
  for (std::uint64_t id : vanished) {
    JobRecord& job = jobs_.at(id);
    // The agent may yet get a start that crossed this hello: until its heartbeats show the job
    // is not there, its chips stay held and a new attempt on this node waits (deferred start).
    const std::uint32_t attempt = job.summary.attempt;
    if (auto lease = job_lease_.find(id); lease != job_lease_.end() && !job.summary.chip_indices.empty()) {
      scheduler::Placement placement{hello.node_id, {}};
      for (std::uint32_t chip : job.summary.chip_indices) placement.chips.push_back(static_cast<int>(chip));
      scheduler::Request hold = stop_hold_request(id, hello.node_id, job.summary.chip_indices.size());
      hold.submit_ms = to_scheduler_time(now);
      if (scheduler_.transfer_lease(lease->second, {{hold, {placement}, to_scheduler_time(now)}},
                                    to_scheduler_time(now))) {
        stop_holds_[id] = hello.node_id;
        job_lease_.erase(lease);
      }
    }
    attempt_lost(job, fmt::format("node {} re-registered without it (the agent restarted)", hello.node_id), now);
    if (stop_holds_.count(id)) stopping_attempts_[id] = StoppingAttempt{hello.node_id, attempt, now};
  }
  for (std::uint64_t id : unrestorable) {
    attempt_lost(jobs_.at(id), fmt::format("its chips on {} could not be given back after a restart", hello.node_id),
                 now);
  }
  // What it is told to stop keeps its chips until it is gone: held where the core knows them,
  // otherwise the whole node takes no new work meanwhile.
  auto& stopping_here = stopping_on_node_[hello.node_id];
  stopping_here.clear();
  for (std::uint64_t id : welcome.cancel_jobs) {
    auto last = last_placement_.find(id);
    std::vector<std::uint32_t> chips;
    if (last != last_placement_.end()) {
      if (auto here = last->second.find(hello.node_id); here != last->second.end()) chips = here->second;
    }
    if (chips.empty()) {
      // Where it runs is unknown (it predates this coordinator): hold every chip not leased.
      std::set<std::uint32_t> leased;
      for (const auto& lease : scheduler_.leases()) {
        for (const auto& p : lease.placement) {
          if (p.node == hello.node_id) leased.insert(p.chips.begin(), p.chips.end());
        }
      }
      for (const auto& chip : node.summary.chips) {
        if (chip.healthy && !leased.count(chip.index)) chips.push_back(chip.index);
      }
    }
    hold_stopping_chips(id, hello.node_id, chips, now);
    if (!stop_holds_.count(id)) stopping_here.emplace(id, now);
    // A job queued again meanwhile starts on this node only once this old attempt is gone.
    if (auto job = jobs_.find(id); job != jobs_.end() && job->second.summary.state == JobState::queued) {
      stopping_attempts_[id] = StoppingAttempt{hello.node_id, job->second.summary.attempt, now};
    }
  }
  // The node's state first (draining while it stops jobs), then its chips: updating them
  // schedules at once.
  sync_node_states(now);
  upsert_scheduler_node(node, now);
  sync_node_states(now);
  save(node);
  to_agent(peer, welcome, m.header.id);
  // A cancel decided while the node had no session (its lease ended while the coordinator was
  // down, say) reaches the agent now.
  for (std::uint64_t id : active_jobs_) {
    const JobRecord& job = jobs_.at(id);
    if (job.cancel_requested && job.summary.node_id == hello.node_id && running.count(id) &&
        job_lease_.count(id)) {
      to_agent(peer, protocol::JobCancel{id, job.lease_id != 0 ? fmt::format("its lease L{} ended", job.lease_id)
                                                                : std::string("cancel requested")});
    }
  }
  for (std::uint64_t id : stopped) attempt_stopped(id, now);
  start_deferred_on(hello.node_id, now);
  log(action::Severity::info,
      fmt::format("node {} registered{} (revision {}, {} chips, agent {}, protocol v{}); running {}, "
                  "cancelling {}, lost {}",
                  hello.node_id, was_lost ? "" : " again", hello.hardware_revision, hello.chips.size(),
                  hello.agent_version, version, running.size(), welcome.cancel_jobs.size(),
                  vanished.size() + unrestorable.size()));
}

void CoordinatorCore::handle_heartbeat(const std::string& peer, const std::string& node_id,
                                       const protocol::Envelope& m, const protocol::Heartbeat& beat, TimeMs now) {
  const std::set<std::uint64_t> running(beat.running_jobs.begin(), beat.running_jobs.end());
  std::vector<std::uint64_t> gone;
  for (const auto& [id, since] : stopping_on_node_[node_id]) {
    if (!running.count(id)) gone.push_back(id);
  }
  for (const auto& [id, hold_node] : stop_holds_) {
    if (hold_node == node_id && !running.count(id)) gone.push_back(id);
  }
  for (std::uint64_t id : gone) old_attempt_gone(id, node_id, now);
  auto& stopping = stopping_on_node_[node_id];
  for (std::uint64_t id : running) {
    auto it = jobs_.find(id);
    const bool ours = it != jobs_.end() && !protocol::is_terminal(it->second.summary.state) &&
                      it->second.summary.node_id == node_id;
    if (!ours) {
      to_agent(peer, protocol::JobCancel{id, "the coordinator no longer assigns this job to this node"});
      auto hold = stop_holds_.find(id);
      if (hold == stop_holds_.end() || hold->second != node_id) stopping.emplace(id, now);
    } else if (deferred_starts_.count(id)) {
      // What runs is the attempt being stopped; the new one waits for it to go.
      to_agent(peer, protocol::JobCancel{id, "an earlier attempt of this job must stop before the next starts"});
    }
  }
  to_agent(peer, protocol::Heartbeat{}, m.header.id);
  sync_node_states(now);
}

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
    auto held = job_lease_.find(job.summary.job_id);
    if (current && jobs_under_notice_.count(job.summary.job_id) && held != job_lease_.end() &&
        !job.cancel_requested && !finished_its_work(fin)) {
      // It let go at a checkpoint under a preemption notice: the scheduler requeues it keeping
      // its age (on_requeued), and the chips go to the request that preempted it.
      job.output_tail = fin.output_tail;
      log(action::Severity::info, fmt::format("job {} attempt {} let go of its chips after the preemption notice "
                                              "({})",
                                              job.summary.job_id, fin.attempt, protocol::enum_name(fin.outcome)));
      if (auto s = scheduler_.checkpoint_ack(held->second, to_scheduler_time(now)); !s) {
        log(action::Severity::warn, fmt::format("job {}: {}", job.summary.job_id, s.error().message));
      }
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
      auto stopping = stopping_attempts_.find(fin.job_id);
      const bool stopping_attempt = stopping != stopping_attempts_.end() && stopping->second.attempt == fin.attempt &&
                                    stopping->second.node_id == node_id;
      // An agent keeps an unacknowledged result while it runs a later attempt of the same job,
      // so only the end of the job's latest attempt shows the stopping one gone; an older one
      // waits for the heartbeats.
      const bool latest_attempt = fin.attempt >= job.summary.attempt;
      if (stopping_attempt ||
          (latest_attempt && (stop_holds_.count(fin.job_id) || stopping_on_node_[node_id].count(fin.job_id)))) {
        old_attempt_gone(fin.job_id, node_id, now);
      }
    }
  }
  // Acknowledged in every case, once stored when it mattered, so the agent can forget it.
  to_agent(peer, protocol::JobFinishedAck{fin.job_id, fin.attempt}, m.header.id);
}

void CoordinatorCore::handle_health_report(const std::string& node_id, const protocol::HealthReport& report,
                                           TimeMs now) {
  NodeRecord& node = nodes_.at(node_id);
  std::vector<std::string> problems;
  for (const auto& check : report.checks) {
    if (check.status == protocol::HealthStatus::fail || check.status == protocol::HealthStatus::warn) {
      problems.push_back(fmt::format("{}{} {}: {}", check.check, check.chip >= 0 ? fmt::format(" chip {}", check.chip) : "",
                                     protocol::enum_name(check.status), check.reason_code));
    }
  }
  const bool changed = node.summary.health != report.verdict;
  node.summary.health = report.verdict;
  node.summary.health_detail = fmt::format("{}", fmt::join(problems, "; ")).substr(0, protocol::kMessageText.max_len);
  if (report.verdict == protocol::HealthStatus::fail && node.summary.state != NodeState::quarantined) {
    quarantine(node, "health probe failed: " + node.summary.health_detail, "lab", now);
  } else if (changed) {
    save(node);
  }
}

void CoordinatorCore::apply_diag_result(const std::string& node_id, const JobRecord& job, TimeMs now) {
  auto it = nodes_.find(node_id);
  if (it == nodes_.end()) return;
  NodeRecord& node = it->second;
  auto outcome = diag_outcome(job.result);
  if (!outcome) return;
  if (outcome->verdict == "fail") {
    if (node.summary.state != NodeState::quarantined) {
      quarantine(node, fmt::format("level {} diagnostics failed (job {})", outcome->level, job.summary.job_id), "lab",
                 now);
    }
    return;
  }
  if (node.summary.state == NodeState::quarantined &&
      outcome->level >= static_cast<int>(release_diag_level(node))) {
    node.summary.state = node.draining ? NodeState::draining : NodeState::up;
    node.summary.health = protocol::HealthStatus::pass;
    log(action::Severity::info, fmt::format("node {} leaves quarantine: level {} diagnostics {} (job {}); it was "
                                            "quarantined for: {}",
                                            node_id, outcome->level, outcome->verdict, job.summary.job_id,
                                            node.summary.quarantine_reason));
    node.summary.quarantine_reason.clear();
    node.summary.quarantine_owner.clear();
    save(node);
    sync_node_states(now);
  }
}

void CoordinatorCore::apply_install_result(const std::string& node_id, const JobRecord& job, TimeMs now) {
  auto it = nodes_.find(node_id);
  if (it == nodes_.end()) return;
  // The install report says whether the node may take work (docs/health.md); a node whose
  // stack may be half-installed never does, whatever the job's exit code says.
  auto doc = nlohmann::json::parse(job.result, nullptr, /*allow_exceptions=*/false);
  const bool fit = doc.is_object() && doc.value("fit_for_work", false);
  if (!fit && it->second.summary.state != NodeState::quarantined) {
    const std::string reason = doc.is_object() ? doc.value("reason", std::string("no install report"))
                                               : std::string("no install report");
    quarantine(it->second, fmt::format("install job {} left the node unfit for work: {}", job.summary.job_id, reason),
               "ops", now);
  }
}

std::uint32_t CoordinatorCore::release_diag_level(const NodeRecord& node) const {
  return node.recent_quarantines >= 2 ? 3u : knobs_.quarantine_release_min_diag_level;
}

void CoordinatorCore::quarantine(NodeRecord& node, const std::string& reason, const std::string& owner, TimeMs now) {
  node.summary.state = NodeState::quarantined;
  if (node.recent_quarantines == 0 || now - node.flap_window_start_ms > knobs_.flap_window_ms) {
    node.recent_quarantines = 0;
    node.flap_window_start_ms = now;
  }
  node.recent_quarantines += 1;
  const bool flapping = node.recent_quarantines >= 2;
  const std::string why =
      flapping ? fmt::format("{} (quarantined {} times in {} h: flapping)", reason, node.recent_quarantines,
                             knobs_.flap_window_ms / 3600000)
               : reason;
  // A non-empty reason is what marks the quarantine across a lost node's return (handle_hello).
  node.summary.quarantine_reason = why.empty() ? "quarantined" : why.substr(0, protocol::kMessageText.max_len);
  node.summary.quarantine_owner = owner;
  save(node);
  log(action::Severity::warn, fmt::format("node {} quarantined (owner {}): {}; it returns after passing level {} "
                                          "diagnostics",
                                          node.summary.node_id, owner, why, release_diag_level(node)));
  // The scheduler learns of the quarantine first, so no rerun lands back on this node.
  sync_node_states(now);
  rerun_failures_of(node, now);
}

void CoordinatorCore::rerun_failures_of(const NodeRecord& node, TimeMs now) {
  std::vector<std::uint64_t> failed;
  for (const auto& [id, job] : jobs_) {
    const bool ci = job.summary.priority_class != PriorityClass::experiment;
    const bool failed_here = (job.summary.state == JobState::failed || job.summary.state == JobState::timed_out) &&
                             job.summary.node_id == node.summary.node_id;
    if (ci && failed_here && job.rerun_job_id == 0 && job.rerun_of == 0 && job.lease_id == 0 &&
        job.requested_node_id.empty() && !protocol::is_maintenance_workload(job.summary.workload) &&
        now - job.finished_at_ms <= knobs_.quarantine_rerun_window_ms) {
      failed.push_back(id);
    }
  }
  for (std::uint64_t id : failed) {
    JobRecord rerun;
    const JobRecord& original = jobs_.at(id);
    rerun.summary = original.summary;
    rerun.summary.job_id = next_job_id_;
    rerun.summary.state = JobState::queued;
    rerun.summary.node_id.clear();
    rerun.summary.chip_indices.clear();
    rerun.summary.attempt = 0;
    rerun.summary.exit_code = 0;
    rerun.summary.duration_ms = 0;
    // Same revision, and the quarantined node takes no work: the rerun lands on a healthy peer.
    rerun.summary.hardware_revision = node.summary.hardware_revision;
    rerun.summary.detail = fmt::format("rerun of job {}, which failed on {} before it was quarantined", id,
                                       node.summary.node_id);
    rerun.timeout_ms = original.timeout_ms;
    rerun.seed = original.seed;
    rerun.benchmark = original.benchmark;
    rerun.rerun_of = id;
    rerun.submitted_at_ms = now;
    if (auto s = submit_to_scheduler(rerun, now); !s) {
      log(action::Severity::warn, fmt::format("cannot rerun job {}: {}", id, s.error().message));
      continue;
    }
    const std::uint64_t rerun_id = next_job_id_++;
    active_jobs_.insert(rerun_id);
    save(jobs_[rerun_id] = std::move(rerun));
    JobRecord& first = jobs_.at(id);
    first.rerun_job_id = rerun_id;
    save(first);
    log(action::Severity::info, fmt::format("job {} failed on quarantined node {}: rerun as job {} on a healthy node "
                                            "of revision {}",
                                            id, node.summary.node_id, rerun_id, node.summary.hardware_revision));
  }
}

// ---- clients -----------------------------------------------------------------------------

void CoordinatorCore::on_client_message(const std::string& client, const Caller& caller,
                                        const protocol::Envelope& m, TimeMs now) {
  KILN_ASSERT(caller.role != Role::agent, "the shell refuses agent keys on the client socket");
  const std::uint64_t corr = m.header.id;
  auto reply = [&](protocol::Body body) { actions_.push_back(action::ToClient{client, std::move(body), corr}); };
  std::visit(
      [&](const auto& body) {
        using T = std::decay_t<decltype(body)>;
        if constexpr (std::is_same_v<T, protocol::Whoami>) {
          reply(protocol::WhoamiReply{caller.key_name, caller.role, protocol::kProtocolVersion, KILN_VERSION});
        } else if constexpr (std::is_same_v<T, protocol::ListNodes>) {
          reply(node_list(now));
        } else if constexpr (std::is_same_v<T, protocol::ListJobs>) {
          reply(job_list(body));
        } else if constexpr (std::is_same_v<T, protocol::GetJob>) {
          auto it = jobs_.find(body.job_id);
          if (it == jobs_.end()) {
            reply_error(client, corr, Errc::not_found,
                        fmt::format("no job {}; `kiln jobs` lists the known jobs", body.job_id));
          } else {
            reply(protocol::JobDetail{it->second.summary, it->second.output_tail, it->second.result});
          }
        } else if constexpr (std::is_same_v<T, protocol::SubmitJob>) {
          handle_submit(client, caller, m, body, 0, now);
        } else if constexpr (std::is_same_v<T, protocol::SubmitInLease>) {
          handle_submit(client, caller, m, body.job, body.lease_id, now);
        } else if constexpr (std::is_same_v<T, protocol::CancelJob>) {
          handle_cancel(client, caller, m, body, now);
        } else if constexpr (std::is_same_v<T, protocol::DrainNode>) {
          handle_drain(client, caller, m, body, now);
        } else if constexpr (std::is_same_v<T, protocol::RequestLease>) {
          handle_request_lease(client, caller, m, body, now);
        } else if constexpr (std::is_same_v<T, protocol::ReleaseLease>) {
          handle_release_lease(client, caller, m, body, now);
        } else if constexpr (std::is_same_v<T, protocol::ListLeases>) {
          protocol::LeaseList list;
          for (const auto& [id, lease] : leases_) {
            if (!body.include_ended && lease.summary.state == LeaseState::ended) continue;
            if (list.leases.size() >= 1000) break;
            list.leases.push_back(lease.summary);
          }
          reply(std::move(list));
        } else if constexpr (std::is_same_v<T, protocol::WatchLease>) {
          handle_watch_lease(client, caller, m, body, now);
        } else if constexpr (std::is_same_v<T, protocol::QuarantineNode>) {
          auto node = nodes_.find(body.node_id);
          if (caller.role != Role::ci && caller.role != Role::lab && !privileged(caller.role)) {
            reply_error(client, corr, Errc::unauthorized,
                        fmt::format("role {} may not quarantine nodes; CI, lab, ops and admin keys may",
                                    protocol::enum_name(caller.role)));
          } else if (node == nodes_.end()) {
            reply_error(client, corr, Errc::not_found,
                        fmt::format("node {} is not registered; `kiln nodes` lists the nodes", body.node_id));
          } else {
            if (node->second.summary.state != NodeState::quarantined) {
              quarantine(node->second, body.reason + " (by " + caller.key_name + ")", body.owner, now);
            }
            reply(protocol::Ok{fmt::format("node {} is quarantined (owner {}); it returns after passing level {} "
                                           "diagnostics (kiln diag --node {} --level {})",
                                           body.node_id, node->second.summary.quarantine_owner,
                                           release_diag_level(node->second), body.node_id,
                                           release_diag_level(node->second))});
          }
        } else if constexpr (std::is_same_v<T, protocol::PutRecord>) {
          handle_put_record(client, caller, m, body, now);
        } else if constexpr (std::is_same_v<T, protocol::GetRecord>) {
          if (const protocol::RecordEntry* record = records_.get(body.kind, body.key)) {
            reply(*record);
          } else {
            reply_error(client, corr, Errc::not_found,
                        fmt::format("no {} record '{}'; `kiln changes`, `kiln bundles` and `kiln runs` list them",
                                    protocol::enum_name(body.kind), body.key));
          }
        } else if constexpr (std::is_same_v<T, protocol::ListRecords>) {
          reply(records_.list(body));
        } else if constexpr (std::is_same_v<T, protocol::QueueWhy>) {
          if ((body.job_id == 0) == (body.lease_id == 0)) {
            reply_error(client, corr, Errc::invalid_argument,
                        "queue_why takes exactly one of job_id and lease_id; `kiln queue --why ID` takes a job id "
                        "or a lease id such as L3");
          } else if (body.job_id != 0 && !jobs_.count(body.job_id)) {
            reply_error(client, corr, Errc::not_found,
                        fmt::format("no job {}; `kiln jobs` lists the known jobs", body.job_id));
          } else if (body.lease_id != 0 && !leases_.count(body.lease_id)) {
            reply_error(client, corr, Errc::not_found,
                        fmt::format("no lease L{}; `kiln leases` lists the leases", body.lease_id));
          } else {
            reply(explain(body, now));
          }
        } else {
          reply_error(client, corr, Errc::bad_message,
                      fmt::format("'{}' is not a request a client may send", T::kType));
        }
      },
      m.body);
  pump_scheduler(now);
}

void CoordinatorCore::handle_submit(const std::string& client, const Caller& caller, const protocol::Envelope& m,
                                    const protocol::SubmitJob& submit, std::uint64_t lease_id, TimeMs now) {
  const bool maintenance = protocol::is_maintenance_workload(submit.workload);
  DevLease* lease = nullptr;
  if (lease_id != 0) {
    lease = find_lease(lease_id);
    if (!lease || lease->summary.state == LeaseState::ended) {
      reply_error(client, m.header.id, Errc::not_found,
                  fmt::format("lease L{} is not active; `kiln leases` lists the active leases", lease_id));
      return;
    }
    if (lease->summary.owner != caller.key_name && !privileged(caller.role)) {
      reply_error(client, m.header.id, Errc::unauthorized,
                  fmt::format("lease L{} belongs to {}; run jobs in a lease of your own", lease_id,
                              lease->summary.owner));
      return;
    }
    if (maintenance) {
      reply_error(client, m.header.id, Errc::invalid_argument,
                  fmt::format("{} takes a whole node and cannot run inside a lease; submit it without --lease",
                              submit.workload));
      return;
    }
    std::size_t largest = 0;
    for (const auto& p : lease->summary.placement) largest = std::max(largest, p.chip_indices.size());
    // A pending lease of whole nodes does not know its node size yet; 8 is the most a job takes.
    const std::size_t per_node = lease->summary.nodes == 0 ? lease->summary.chips : largest > 0 ? largest : 8;
    if (submit.chips > per_node) {
      reply_error(client, m.header.id, Errc::invalid_argument,
                  fmt::format("the job asks for {} chips but lease L{} holds {} chips per node; ask for fewer",
                              submit.chips, lease_id, per_node));
      return;
    }
    if (jobs_in_lease(lease_id).size() >= 1024) {
      reply_error(client, m.header.id, Errc::unavailable,
                  fmt::format("lease L{} already has 1024 jobs queued or running; wait for some to end", lease_id));
      return;
    }
    if (!submit.node_id.empty()) {
      reply_error(client, m.header.id, Errc::invalid_argument,
                  "a job inside a lease runs on the lease's chips; drop --node");
      return;
    }
  } else if (maintenance) {
    if (!client_role_may_run_maintenance(caller.role, submit.workload)) {
      reply_error(client, m.header.id, Errc::unauthorized,
                  fmt::format("role {} may not run {}; diagnostics are for lab, ops and admin, installs for ops "
                              "and admin",
                              protocol::enum_name(caller.role), submit.workload));
      return;
    }
    if (submit.node_id.empty()) {
      reply_error(client, m.header.id, Errc::invalid_argument,
                  fmt::format("{} runs on one node: name it (kiln diag --node ID)", submit.workload));
      return;
    }
  } else if (submit.workload.starts_with("kiln.")) {
    reply_error(client, m.header.id, Errc::invalid_argument,
                fmt::format("'{}' is not a built-in workload; built-ins are {} and {}", submit.workload,
                            protocol::kDiagWorkload, protocol::kInstallWorkload));
    return;
  } else if (!client_role_may_submit(caller.role, submit.priority_class)) {
    reply_error(client, m.header.id, Errc::unauthorized,
                fmt::format("role {} may not submit {} jobs; developers and lab engineers submit "
                            "experiments, CI submits presubmit, nightly, bisect and release work",
                            protocol::enum_name(caller.role), protocol::enum_name(submit.priority_class)));
    return;
  }
  if (!maintenance && submit.chips > 8) {
    reply_error(client, m.header.id, Errc::invalid_argument,
                fmt::format("a job runs on one node and may ask for 1 to 8 chips, not {}", submit.chips));
    return;
  }
  if (!submit.node_id.empty() && nodes_.count(submit.node_id) == 0) {
    reply_error(client, m.header.id, Errc::not_found,
                fmt::format("node {} is not registered; `kiln nodes` lists the nodes", submit.node_id));
    return;
  }
  std::size_t queued = 0;
  for (std::uint64_t id : active_jobs_) queued += jobs_.at(id).summary.state == JobState::queued ? 1 : 0;
  if (queued >= knobs_.max_queued_jobs) {
    reply_error(client, m.header.id, Errc::unavailable,
                fmt::format("the queue is full ({} jobs waiting); try again later", queued));
    return;
  }
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
  if (maintenance) job.summary.chips = nodes_.at(submit.node_id).summary.chips_total;
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
  actions_.push_back(action::ToClient{client, protocol::JobAccepted{id}, m.header.id});
  log(action::Severity::info, fmt::format("job {} ({} on {} chips, {}{}) submitted by {}", id, submit.workload,
                                          submit.chips, protocol::enum_name(stored.summary.priority_class),
                                          lease_id ? fmt::format(", in lease L{}", lease_id) : "", caller.key_name));
  sync_node_states(now);
}

void CoordinatorCore::handle_put_record(const std::string& client, const Caller& caller, const protocol::Envelope& m,
                                        const protocol::PutRecord& put, TimeMs now) {
  if (caller.role != Role::ci && !privileged(caller.role)) {
    reply_error(client, m.header.id, Errc::unauthorized,
                fmt::format("role {} may not write {} records; CI, ops and admin keys record changes, bundles and "
                            "qualification results",
                            protocol::enum_name(caller.role), protocol::enum_name(put.kind)));
    return;
  }
  auto record = records_.put(put, caller.key_name, now);
  if (!record) {
    reply_error(client, m.header.id, record.error().code, record.error().message);
    return;
  }
  actions_.push_back(action::SaveRecord{*record});
  actions_.push_back(action::ToClient{client, protocol::Ok{}, m.header.id});
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
  actions_.push_back(action::ToClient{client, protocol::Ok{"cancel requested"}, m.header.id});
}

void CoordinatorCore::handle_drain(const std::string& client, const Caller& caller, const protocol::Envelope& m,
                                   const protocol::DrainNode& drain, TimeMs now) {
  if (caller.role != Role::ops && caller.role != Role::lab && caller.role != Role::admin) {
    reply_error(client, m.header.id, Errc::unauthorized,
                fmt::format("role {} may not drain nodes; ask ops, lab or admin",
                            protocol::enum_name(caller.role)));
    return;
  }
  auto it = nodes_.find(drain.node_id);
  if (it == nodes_.end()) {
    reply_error(client, m.header.id, Errc::not_found,
                fmt::format("node {} is not registered; `kiln nodes` lists the nodes", drain.node_id));
    return;
  }
  NodeRecord& node = it->second;
  node.draining = drain.drain;
  node.drain_reason = drain.drain ? (drain.reason.empty() ? "drained by " + caller.key_name : drain.reason) : "";
  if (node.summary.state == NodeState::up || node.summary.state == NodeState::draining) {
    node.summary.state = drain.drain ? NodeState::draining : NodeState::up;
  }
  save(node);
  sync_node_states(now);
  actions_.push_back(action::ToClient{client, protocol::Ok{drain.drain ? "draining" : "resumed"}, m.header.id});
  log(action::Severity::info, fmt::format("node {} {} by {}{}", drain.node_id, drain.drain ? "drained" : "resumed",
                                          caller.key_name, drain.reason.empty() ? "" : ": " + drain.reason));
}

protocol::NodeList CoordinatorCore::node_list(TimeMs now) const {
  protocol::NodeList list;
  for (const auto& [id, node] : nodes_) {
    protocol::NodeSummary s = node.summary;
    s.last_seen_ms_ago = static_cast<std::uint64_t>(std::max<TimeMs>(0, now - node.last_seen_ms));
    list.nodes.push_back(std::move(s));
  }
  return list;
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

// ---- developer leases ----------------------------------------------------------------------

void CoordinatorCore::handle_request_lease(const std::string& client, const Caller& caller,
                                           const protocol::Envelope& m, const protocol::RequestLease& request,
                                           TimeMs now) {
  if (!client_role_may_submit(caller.role, request.priority_class)) {
    reply_error(client, m.header.id, Errc::unauthorized,
                fmt::format("role {} may not lease chips as {}; developers and lab engineers lease as experiment, "
                            "which CI work may preempt with notice",
                            protocol::enum_name(caller.role), protocol::enum_name(request.priority_class)));
    return;
  }
  if ((request.chips == 0) == (request.nodes == 0)) {
    reply_error(client, m.header.id, Errc::invalid_argument,
                "ask for chips on one node (--chips 1, 2, 4 or 8) or for whole nodes (--nodes N), not both");
    return;
  }
  std::size_t active = 0;
  for (const auto& [id, lease] : leases_) active += lease.summary.state == LeaseState::ended ? 0 : 1;
  if (active >= knobs_.max_active_leases) {
    reply_error(client, m.header.id, Errc::unavailable,
                fmt::format("{} leases are already pending or granted (max_active_leases); release one or retry later",
                            active));
    return;
  }
  constexpr TimeMs kMaxBookingAheadMs = 30LL * 24 * 3600 * 1000;
  const auto start_at = static_cast<TimeMs>(request.start_at_ms);
  if (request.start_at_ms != 0 && (start_at < now || start_at > now + kMaxBookingAheadMs)) {
    reply_error(client, m.header.id, Errc::invalid_argument,
                "start_at_ms must be in the next 30 days (or 0 for as soon as possible)");
    return;
  }
  const std::uint64_t lease_id = next_lease_id_;
  scheduler::Request req;
  if (request.start_at_ms != 0) req.not_before_ms = to_scheduler_time(start_at);
  req.id = kLeaseRequestBase + lease_id;
  req.cls = to_request_class(request.priority_class);
  req.chips = request.nodes > 0 ? 1 : static_cast<int>(request.chips);
  req.nodes = static_cast<int>(request.nodes);
  if (!request.hardware_revision.empty()) req.revision = request.hardware_revision;
  req.expected_duration_ms = static_cast<DurationMs>(request.duration_ms);
  req.lease_ms = static_cast<DurationMs>(request.duration_ms);
  req.submit_ms = to_scheduler_time(now);
  if (auto s = scheduler_.submit(req, to_scheduler_time(now)); !s) {
    reply_error(client, m.header.id, s.error().code, s.error().message);
    return;
  }
  ++next_lease_id_;
  DevLease& lease = leases_[lease_id];
  lease.requested_at_ms = now;
  lease.start_at_ms = request.start_at_ms;
  lease.summary.lease_id = lease_id;
  lease.summary.state = LeaseState::pending;
  lease.summary.priority_class = request.priority_class;
  lease.summary.owner = caller.key_name;
  lease.summary.chips = request.chips;
  lease.summary.nodes = request.nodes;
  lease.summary.hardware_revision = request.hardware_revision;
  lease.summary.duration_ms = request.duration_ms;
  lease.summary.requested_at_ms = static_cast<std::uint64_t>(std::max<TimeMs>(0, now));
  log(action::Severity::info,
      fmt::format("lease L{} requested by {}: {} for {} ({}{})", lease_id, caller.key_name,
                  request.nodes > 0 ? fmt::format("{} whole nodes", request.nodes) : fmt::format("{} chips", request.chips),
                  human_duration(static_cast<TimeMs>(request.duration_ms)), protocol::enum_name(request.priority_class),
                  request.hardware_revision.empty() ? "" : ", revision " + request.hardware_revision));
  // The grant, if there is one now, is among the scheduler's actions.
  pump_scheduler(now);
  DevLease& now_lease = leases_.at(lease_id);
  if (now_lease.summary.state == LeaseState::granted) {
    actions_.push_back(action::ToClient{client, protocol::LeaseGranted{now_lease.summary}, m.header.id});
    return;
  }
  auto explanation = scheduler_.explain(req.id, to_scheduler_time(now));
  protocol::LeasePending pending;
  pending.explanation = explanation_text(explanation, now).substr(0, protocol::kMessageText.max_len);
  if (explanation.expected_start_ms) {
    pending.expected_start_ms = static_cast<std::uint64_t>(std::max<TimeMs>(0, to_wall_time(*explanation.expected_start_ms)));
  }
  now_lease.summary.detail = pending.explanation;
  pending.lease = now_lease.summary;
  save(now_lease);
  actions_.push_back(action::ToClient{client, std::move(pending), m.header.id});
}

void CoordinatorCore::handle_release_lease(const std::string& client, const Caller& caller,
                                           const protocol::Envelope& m, const protocol::ReleaseLease& release,
                                           TimeMs now) {
  DevLease* lease = find_lease(release.lease_id);
  if (!lease) {
    reply_error(client, m.header.id, Errc::not_found,
                fmt::format("no lease L{}; `kiln leases` lists the leases", release.lease_id));
    return;
  }
  if (lease->summary.owner != caller.key_name && !privileged(caller.role)) {
    reply_error(client, m.header.id, Errc::unauthorized,
                fmt::format("lease L{} belongs to {}; only its owner, ops or admin may release it", release.lease_id,
                            lease->summary.owner));
    return;
  }
  if (lease->summary.state == LeaseState::ended) {
    reply_error(client, m.header.id, Errc::conflict,
                fmt::format("lease L{} already ended: {}", release.lease_id, lease->summary.detail));
    return;
  }
  release_lease_chips(*lease, now);
  end_lease(*lease, fmt::format("released by {}", caller.key_name), now);
  actions_.push_back(action::ToClient{client, protocol::Ok{fmt::format("lease L{} released", release.lease_id)},
                                      m.header.id});
}

void CoordinatorCore::handle_watch_lease(const std::string& client, const Caller& caller, const protocol::Envelope& m,
                                         const protocol::WatchLease& watch, TimeMs now) {
  DevLease* lease = find_lease(watch.lease_id);
  if (!lease) {
    reply_error(client, m.header.id, Errc::not_found,
                fmt::format("no lease L{}; `kiln leases` lists the leases", watch.lease_id));
    return;
  }
  if (lease->summary.owner != caller.key_name && !privileged(caller.role)) {
    reply_error(client, m.header.id, Errc::unauthorized,
                fmt::format("lease L{} belongs to {}; watch a lease of your own", watch.lease_id, lease->summary.owner));
    return;
  }
  for (const auto& event : lease->events) {
    if (event.seq > watch.after_seq) {
      actions_.push_back(action::ToClient{client, event, m.header.id});
      return;
    }
  }
  if (watch.wait_ms == 0 || lease->summary.state == LeaseState::ended || watches_.size() >= knobs_.max_lease_watches) {
    actions_.push_back(action::ToClient{client, status_event(*lease, now), m.header.id});
    return;
  }
  watches_.push_back(Watch{client, m.header.id, watch.lease_id, watch.after_seq, now + watch.wait_ms});
}

CoordinatorCore::DevLease* CoordinatorCore::find_lease(std::uint64_t lease_id) {
  auto it = leases_.find(lease_id);
  return it == leases_.end() ? nullptr : &it->second;
}

std::vector<protocol::LeaseSummary> CoordinatorCore::leases() const {
  std::vector<protocol::LeaseSummary> out;
  for (const auto& [id, lease] : leases_) out.push_back(lease.summary);
  return out;
}

std::vector<std::uint64_t> CoordinatorCore::jobs_in_lease(std::uint64_t lease_id) const {
  std::vector<std::uint64_t> out;
  for (std::uint64_t id : active_jobs_) {
    if (jobs_.at(id).lease_id == lease_id) out.push_back(id);
  }
  return out;
}

protocol::LeaseEvent CoordinatorCore::status_event(const DevLease& lease, TimeMs now) const {
  protocol::LeaseEvent event;
  event.seq = lease.summary.event_seq;
  event.kind = LeaseEventKind::status;
  event.lease = lease.summary;
  switch (lease.summary.state) {
    case LeaseState::pending:
      event.message = explanation_text(scheduler_.explain(kLeaseRequestBase + lease.summary.lease_id,
                                                          to_scheduler_time(now)),
                                       now);
      break;
    case LeaseState::granted:
      event.message = fmt::format("granted; expires in {}",
                                  human_duration(static_cast<TimeMs>(lease.summary.expires_at_ms) - now));
      break;
    case LeaseState::preempting:
      event.message = fmt::format("under preemption notice; revoked in {}",
                                  human_duration(static_cast<TimeMs>(lease.summary.grace_deadline_ms) - now));
      break;
    case LeaseState::ended: event.message = "ended: " + lease.summary.detail; break;
  }
  event.message = event.message.substr(0, protocol::kMessageText.max_len);
  event.lease.detail = event.lease.detail.substr(0, protocol::kMessageText.max_len);
  return event;
}

void CoordinatorCore::lease_event(DevLease& lease, LeaseEventKind kind, std::string message, TimeMs now) {
  lease.summary.job_ids = jobs_in_lease(lease.summary.lease_id);
  lease.summary.detail = message.substr(0, protocol::kMessageText.max_len);
  protocol::LeaseEvent event;
  // Numbered from the lease's summary, which the store keeps: a watcher's after_seq stays
  // meaningful across a coordinator restart.
  event.seq = lease.summary.event_seq + 1;
  lease.summary.event_seq = event.seq;
  event.kind = kind;
  event.message = lease.summary.detail;
  event.lease = lease.summary;
  lease.events.push_back(event);
  while (lease.events.size() > kMaxLeaseEvents) lease.events.pop_front();
  save(lease);
  log(action::Severity::info, fmt::format("lease L{} ({}): {}", lease.summary.lease_id, lease.summary.owner, message));
  // Every parked watch of this lease is behind the new event: answer it now.
  std::vector<Watch> keep;
  for (Watch& w : watches_) {
    if (w.lease_id == lease.summary.lease_id && w.after_seq < event.seq) {
      actions_.push_back(action::ToClient{w.client, event, w.corr});
    } else {
      keep.push_back(std::move(w));
    }
  }
  watches_ = std::move(keep);
  (void)now;
}

void CoordinatorCore::end_lease(DevLease& lease, const std::string& why, TimeMs now) {
  lease.summary.state = LeaseState::ended;
  lease.summary.placement.clear();
  lease.summary.grace_deadline_ms = 0;
  lease.scheduler_lease.reset();
  for (std::uint64_t id : jobs_in_lease(lease.summary.lease_id)) {
    JobRecord& job = jobs_.at(id);
    if (job.summary.state == JobState::queued) {
      finish(job, JobState::cancelled, fmt::format("its lease L{} ended: {}", lease.summary.lease_id, why), now);
    } else if (!job.cancel_requested) {
      job.cancel_requested = true;
      save(job);
      if (auto peer = peer_of(job.summary.node_id)) {
        to_agent(*peer, protocol::JobCancel{id, fmt::format("its lease L{} ended: {}", lease.summary.lease_id, why)});
      }
    }
  }
  lease_event(lease, LeaseEventKind::ended, why, now);
  prune_ended_leases();
}

void CoordinatorCore::release_lease_chips(DevLease& lease, TimeMs now) {
  const scheduler::RequestId request = kLeaseRequestBase + lease.summary.lease_id;
  const TimeMs t = to_scheduler_time(now);
  auto held = scheduler_.lease_of(request);
  if (!held) {
    if (scheduler_.is_pending(request)) (void)scheduler_.cancel(request, t);
    return;
  }
  std::vector<scheduler::Scheduler::Handover> handovers;
  std::vector<std::uint64_t> handed;
  for (std::uint64_t id : jobs_in_lease(lease.summary.lease_id)) {
    const JobRecord& job = jobs_.at(id);
    if (job.summary.state == JobState::queued || job_lease_.count(id)) continue;
    scheduler::Placement placement{job.summary.node_id, {}};
    for (std::uint32_t chip : job.summary.chip_indices) placement.chips.push_back(static_cast<int>(chip));
    handovers.push_back({job_request(job), {placement}, to_scheduler_time(job.started_at_ms)});
    handed.push_back(id);
  }
  if (handovers.empty()) {
    (void)scheduler_.release(*held, t);
    return;
  }
  auto leases = scheduler_.transfer_lease(*held, handovers, t);
  if (!leases) {
    log(action::Severity::warn, fmt::format("lease L{}: {}", lease.summary.lease_id, leases.error().message));
    return;
  }
  for (std::size_t i = 0; i < handed.size() && i < leases->size(); ++i) job_lease_[handed[i]] = (*leases)[i];
}

scheduler::Request CoordinatorCore::lease_request(const DevLease& lease) const {
  scheduler::Request req;
  req.id = kLeaseRequestBase + lease.summary.lease_id;
  req.cls = to_request_class(lease.summary.priority_class);
  req.chips = lease.summary.nodes > 0 ? 1 : static_cast<int>(lease.summary.chips);
  req.nodes = static_cast<int>(lease.summary.nodes);
  if (!lease.summary.hardware_revision.empty()) req.revision = lease.summary.hardware_revision;
  req.expected_duration_ms = static_cast<DurationMs>(lease.summary.duration_ms);
  req.lease_ms = req.expected_duration_ms;
  req.submit_ms = to_scheduler_time(lease.requested_at_ms);
  return req;
}

Status CoordinatorCore::resubmit_lease(DevLease& lease, TimeMs now) {
  scheduler::Request req = lease_request(lease);
  if (lease.start_at_ms != 0 && static_cast<TimeMs>(lease.start_at_ms) > now) {
    req.not_before_ms = to_scheduler_time(static_cast<TimeMs>(lease.start_at_ms));
  }
  lease.scheduler_lease.reset();
  lease.recovered_under_notice = false;
  lease.summary.state = LeaseState::pending;
  lease.summary.placement.clear();
  lease.summary.grace_deadline_ms = 0;
  lease.summary.expires_at_ms = 0;
  return scheduler_.submit(req, to_scheduler_time(now));
}

void CoordinatorCore::end_due_leases(TimeMs now) {
  for (auto& [id, lease] : leases_) {
    const auto state = lease.summary.state;
    if (state != LeaseState::granted && state != LeaseState::preempting) continue;
    if (lease.summary.expires_at_ms > 0 && now >= static_cast<TimeMs>(lease.summary.expires_at_ms)) {
      release_lease_chips(lease, now);
      end_lease(lease, "expired", now);
      continue;
    }
    if (state != LeaseState::preempting || now < static_cast<TimeMs>(lease.summary.grace_deadline_ms)) continue;
    bool jobs_running = false;
    for (std::uint64_t job_id : jobs_in_lease(id)) jobs_running |= jobs_.at(job_id).summary.state != JobState::queued;
    // Without running jobs the scheduler's own revocation at this deadline does the same,
    // unless the notice predates a coordinator restart and the scheduler does not know of it.
    if (!jobs_running && !lease.recovered_under_notice) continue;
    for (std::uint64_t job_id : jobs_in_lease(id)) {
      JobRecord& job = jobs_.at(job_id);
      if (job.summary.state == JobState::queued || job.cancel_requested) continue;
      job.cancel_requested = true;
      save(job);
      if (auto peer = peer_of(job.summary.node_id)) {
        to_agent(*peer, protocol::JobCancel{job_id, fmt::format("lease L{} revoked: its preemption grace ended", id)});
      }
    }
    release_lease_chips(lease, now);
    if (auto s = resubmit_lease(lease, now); !s) {
      end_lease(lease, "revoked after its preemption grace and cannot be queued again: " + s.error().message, now);
      continue;
    }
    lease_event(lease, LeaseEventKind::requeued, "revoked at the end of its grace; queued again keeping its age", now);
  }
}

void CoordinatorCore::prune_ended_leases() {
  std::size_t ended = 0;
  for (const auto& [id, lease] : leases_) ended += lease.summary.state == LeaseState::ended ? 1 : 0;
  for (auto it = leases_.begin(); it != leases_.end() && ended > knobs_.max_ended_leases_kept;) {
    if (it->second.summary.state == LeaseState::ended) {
      it = leases_.erase(it);
      --ended;
    } else {
      ++it;
    }
  }
}

void CoordinatorCore::lease_node_lost(DevLease& lease, const std::string& node_id, TimeMs now) {
  // The scheduler forgot the request with the node: ask again with the original age.
  if (auto s = resubmit_lease(lease, now); !s) {
    end_lease(lease, fmt::format("node {} was lost and the lease cannot be queued again: {}", node_id,
                                 s.error().message),
              now);
    return;
  }
  lease_event(lease, LeaseEventKind::requeued, fmt::format("node {} was lost; queued again keeping its age", node_id),
              now);
}

bool CoordinatorCore::runs_on_lease_chips(const JobRecord& job) const {
  auto it = leases_.find(job.lease_id);
  if (it == leases_.end()) return false;
  const DevLease& lease = it->second;
  if (lease.summary.state != LeaseState::granted && lease.summary.state != LeaseState::preempting) return false;
  for (const auto& p : lease.summary.placement) {
    if (p.node_id != job.summary.node_id) continue;
    return std::all_of(job.summary.chip_indices.begin(), job.summary.chip_indices.end(), [&](std::uint32_t chip) {
      return std::find(p.chip_indices.begin(), p.chip_indices.end(), chip) != p.chip_indices.end();
    });
  }
  return false;
}

void CoordinatorCore::recover_lease(LeaseRecord record, TimeMs now) {
  const std::uint64_t id = record.summary.lease_id;
  next_lease_id_ = std::max(next_lease_id_, id + 1);
  DevLease& lease = leases_[id];
  lease.summary = std::move(record.summary);
  lease.requested_at_ms = record.requested_at_ms;
  lease.start_at_ms = record.start_at_ms;
  lease.summary.job_ids = jobs_in_lease(id);
  const LeaseState state = lease.summary.state;
  if (state == LeaseState::ended) return;
  auto requeue = [&](const std::string& why) {
    if (auto s = resubmit_lease(lease, now); !s) {
      end_lease(lease, fmt::format("{}; it cannot be queued again: {}", why, s.error().message), now);
      return;
    }
    lease_event(lease, LeaseEventKind::requeued, why + "; queued again keeping its age", now);
  };
  if (state == LeaseState::pending) {
    if (auto s = resubmit_lease(lease, now); !s) {
      end_lease(lease, "cannot be queued again after the coordinator restarted: " + s.error().message, now);
    }
    return;
  }
  if (static_cast<TimeMs>(lease.summary.expires_at_ms) <= now) {
    end_lease(lease, "expired while the coordinator was down", now);
    return;
  }
  // Granted, or under notice: the same chips are held again, from when they were granted, so
  // the expiry stays; the nodes have until the liveness timeout to register (mark_node_lost).
  std::vector<scheduler::Placement> placement;
  for (const auto& p : lease.summary.placement) {
    auto node = nodes_.find(p.node_id);
    if (node == nodes_.end() || node->second.summary.state == NodeState::lost) {
      requeue(fmt::format("its node {} was lost when the coordinator restarted", p.node_id));
      return;
    }
    scheduler::Placement held{p.node_id, {}};
    for (std::uint32_t chip : p.chip_indices) held.chips.push_back(static_cast<int>(chip));
    placement.push_back(std::move(held));
  }
  const scheduler::Request req = lease_request(lease);
  auto held = scheduler_.restore_lease(req, placement, to_scheduler_time(static_cast<TimeMs>(lease.summary.granted_at_ms)),
                                       to_scheduler_time(now));
  if (!held) {
    requeue("its chips could not be held again after the coordinator restarted (" + held.error().message + ")");
    return;
  }
  lease.scheduler_lease = *held;
  lease.recovered_under_notice = state == LeaseState::preempting;
  log(action::Severity::info, fmt::format("lease L{} ({}) holds its chips again until {}", id, lease.summary.owner,
                                          wall_clock_text(static_cast<TimeMs>(lease.summary.expires_at_ms))));
}

void CoordinatorCore::answer_watches(TimeMs now) {
  std::vector<Watch> keep;
  for (Watch& w : watches_) {
    auto it = leases_.find(w.lease_id);
    if (it == leases_.end()) continue;  // pruned: the watcher asks again and learns it is gone
    if (now >= w.deadline_ms) {
      actions_.push_back(action::ToClient{w.client, status_event(it->second, now), w.corr});
    } else {
      keep.push_back(std::move(w));
    }
  }
  watches_ = std::move(keep);
}

protocol::QueueExplanation CoordinatorCore::explain(const protocol::QueueWhy& why, TimeMs now) const {
  protocol::QueueExplanation out;
  auto from_scheduler = [&](scheduler::RequestId request, const std::string& prefix) {
    auto e = scheduler_.explain(request, to_scheduler_time(now));
    out.pending = e.pending;
    out.reasons = e.reasons;
    if (e.expected_start_ms) {
      out.expected_start_ms = static_cast<std::uint64_t>(std::max<TimeMs>(0, to_wall_time(*e.expected_start_ms)));
    }
    out.text = prefix + explanation_text(e, now);
  };
  if (why.lease_id != 0) {
    const DevLease& lease = leases_.at(why.lease_id);
    out.state = std::string(protocol::enum_name(lease.summary.state));
    if (lease.summary.state == LeaseState::pending) {
      from_scheduler(kLeaseRequestBase + why.lease_id, fmt::format("lease L{} is pending: ", why.lease_id));
    } else if (lease.summary.state == LeaseState::ended) {
      out.text = fmt::format("lease L{} is not pending: it ended ({})", why.lease_id, lease.summary.detail);
    } else {
      std::vector<std::string> where;
      for (const auto& p : lease.summary.placement) {
        where.push_back(fmt::format("{} chips [{}]", p.node_id, fmt::join(p.chip_indices, ",")));
      }
      out.text = fmt::format("lease L{} is not pending: it is {} on {}", why.lease_id, out.state,
                             fmt::join(where, " and "));
    }
  } else {
    const JobRecord& job = jobs_.at(why.job_id);
    const auto& s = job.summary;
    out.state = std::string(protocol::enum_name(s.state));
    if (protocol::is_terminal(s.state)) {
      out.text = fmt::format("job {} is not pending: it ended {} ({})", s.job_id, out.state, s.detail);
    } else if (s.state != JobState::queued) {
      out.text = fmt::format("job {} is not pending: it is {} on {} chips [{}] (attempt {})", s.job_id, out.state,
                             s.node_id, fmt::join(s.chip_indices, ","), s.attempt);
    } else if (job.lease_id != 0) {
      auto lease = leases_.find(job.lease_id);
      if (lease != leases_.end() && lease->second.summary.state == LeaseState::pending) {
        from_scheduler(kLeaseRequestBase + job.lease_id,
                       fmt::format("job {} waits for its lease L{}, which is pending: ", s.job_id, job.lease_id));
        out.pending = true;
      } else {
        out.pending = true;
        out.reasons.push_back(fmt::format("it runs inside lease L{} and waits for {} of its chips to be free of "
                                          "other jobs in the lease",
                                          job.lease_id, s.chips));
        out.text = fmt::format("job {} is pending: {}", s.job_id, out.reasons.back());
      }
    } else {
      from_scheduler(s.job_id, fmt::format("job {} is pending: ", s.job_id));
    }
  }
  out.text = out.text.substr(0, protocol::kMessageText.max_len);
  for (auto& r : out.reasons) r = r.substr(0, protocol::kMessageText.max_len);
  if (out.reasons.size() > 64) out.reasons.resize(64);
  return out;
}

std::string CoordinatorCore::explanation_text(const scheduler::Explanation& e, TimeMs now) const {
  std::string out = fmt::format("{}", fmt::join(e.reasons, "; "));
  if (!e.pending) return out.empty() ? "not pending" : out;
  if (!out.empty()) out += "; ";
  if (e.expected_start_ms) {
    const TimeMs at = to_wall_time(*e.expected_start_ms);
    out += at <= now ? "expected to start now"
                     : fmt::format("expected to start in {} (at {})", human_duration(at - now), wall_clock_text(at));
  } else {
    out += "no expected start: no eligible capacity in sight";
  }
  return out;
}

// ---- time --------------------------------------------------------------------------------

void CoordinatorCore::on_tick(TimeMs now) {
  for (auto& [id, node] : nodes_) {
    if (node.summary.state != NodeState::lost && now - node.last_seen_ms > knobs_.liveness_timeout_ms()) {
      mark_node_lost(node, now);
    }
  }
  std::vector<std::uint64_t> overdue;
  for (std::uint64_t id : active_jobs_) {
    const JobRecord& job = jobs_.at(id);
    if (job.summary.state != JobState::queued &&
        now > job.started_at_ms + job.timeout_ms + knobs_.job_timeout_slack_ms) {
      overdue.push_back(id);
    }
  }
  for (std::uint64_t id : overdue) {
    JobRecord& job = jobs_.at(id);
    if (auto peer = peer_of(job.summary.node_id)) {
      to_agent(*peer, protocol::JobCancel{id, "the coordinator timed it out: no result after its timeout"});
    }
    const std::string node_id = job.summary.node_id;
    // Its chips stay held until the agent shows the workload gone.
    if (auto lease = job_lease_.find(id); lease != job_lease_.end() && !job.summary.chip_indices.empty()) {
      scheduler::Placement placement{node_id, {}};
      for (std::uint32_t chip : job.summary.chip_indices) placement.chips.push_back(static_cast<int>(chip));
      scheduler::Request hold = stop_hold_request(id, node_id, job.summary.chip_indices.size());
      hold.submit_ms = to_scheduler_time(now);
      if (scheduler_.transfer_lease(lease->second, {{hold, {placement}, to_scheduler_time(now)}},
                                    to_scheduler_time(now))) {
        stop_holds_[id] = node_id;
        job_lease_.erase(lease);
      }
    }
    finish(job, JobState::timed_out,
           fmt::format("no result from node {} within its timeout of {} ms", node_id, job.timeout_ms), now);
  }
  // An attempt that does not report its end after the cancel is waited for no longer than a
  // silent node would be.
  std::vector<std::uint64_t> stopped;
  for (const auto& [id, stopping] : stopping_attempts_) {
    if (now >= stopping.since_ms + knobs_.job_timeout_slack_ms + knobs_.liveness_timeout_ms()) stopped.push_back(id);
  }
  for (std::uint64_t id : stopped) attempt_stopped(id, now);
  for (auto& [node_id, stopping] : stopping_on_node_) {
    std::erase_if(stopping, [&](const auto& entry) {
      return now >= entry.second + knobs_.job_timeout_slack_ms + knobs_.liveness_timeout_ms();
    });
    start_deferred_on(node_id, now);
  }
  end_due_leases(now);
  revoke_due_jobs(now);
  if (auto deadline = scheduler_.next_deadline(); deadline && to_scheduler_time(now) >= *deadline) {
    scheduler_.on_tick(to_scheduler_time(now));
  }
  answer_watches(now);
  pump_scheduler(now);
}

void CoordinatorCore::mark_node_lost(NodeRecord& node, TimeMs now) {
  const std::string node_id = node.summary.node_id;
  node.summary.state = NodeState::lost;
  if (auto peer = peer_by_node_.find(node_id); peer != peer_by_node_.end()) {
    sessions_.erase(peer->second);
    peer_by_node_.erase(peer);
  }
  stopping_on_node_.erase(node_id);
  // The scheduler first, so that nothing requeued below is placed on this node again.
  sync_node_states(now);
  std::vector<std::uint64_t> affected;
  for (std::uint64_t id : active_jobs_) {
    const JobRecord& job = jobs_.at(id);
    if (job.summary.node_id == node_id && job.summary.state != JobState::queued) affected.push_back(id);
  }
  for (std::uint64_t id : affected) {
    attempt_lost(jobs_.at(id),
                 fmt::format("node {} went silent for {} heartbeats", node_id, knobs_.liveness_missed_beats), now);
  }
  std::vector<std::uint64_t> stopped;
  for (const auto& [id, stopping] : stopping_attempts_) {
    if (stopping.node_id == node_id) stopped.push_back(id);
  }
  for (std::uint64_t id : stopped) attempt_stopped(id, now);
  // A lease given back its chips after a coordinator restart, on a node the scheduler already
  // counted as lost: the scheduler ends nothing, so the core requeues it here.
  std::vector<std::uint64_t> leases_here;
  for (const auto& [id, lease] : leases_) {
    if (!lease.scheduler_lease || scheduler_.lease_of(kLeaseRequestBase + id) != lease.scheduler_lease) continue;
    const bool here = std::any_of(lease.summary.placement.begin(), lease.summary.placement.end(),
                                  [&](const protocol::LeasePlacement& p) { return p.node_id == node_id; });
    if (here) leases_here.push_back(id);
  }
  // Collected first: ending a lease may prune ended ones from leases_.
  for (std::uint64_t id : leases_here) {
    (void)scheduler_.cancel(kLeaseRequestBase + id, to_scheduler_time(now));
    lease_node_lost(leases_.at(id), node_id, now);
  }
  save(node);
  log(action::Severity::warn, fmt::format("node {} lost: silent for {} ms; {} jobs failed over", node_id,
                                          now - node.last_seen_ms, affected.size()));
}

// ---- job state machine ---------------------------------------------------------------------

void CoordinatorCore::attempt_lost(JobRecord& job, const std::string& why, TimeMs now) {
  forget_request(job, now);
  const DevLease* lease = job.lease_id != 0 ? find_lease(job.lease_id) : nullptr;
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
  auto stopping = stopping_attempts_.find(job.summary.job_id);
  if (stopping != stopping_attempts_.end() && stopping->second.node_id == node_id) {
    deferred_starts_.insert(job.summary.job_id);
    log(action::Severity::info, fmt::format("job {} attempt {} has chips [{}] on {}; it starts once attempt {} has "
                                            "stopped there",
                                            job.summary.job_id, job.summary.attempt, fmt::join(chips, ","), node_id,
                                            stopping->second.attempt));
    return;
  }
  stopping_attempts_.erase(job.summary.job_id);
  if (auto unheld = stopping_on_node_.find(node_id); unheld != stopping_on_node_.end() && !unheld->second.empty()) {
    // Maintenance enters a quarantined node whatever it is stopping, and where those jobs run
    // is not held: wait until they are gone.
    deferred_starts_.insert(job.summary.job_id);
    log(action::Severity::info, fmt::format("job {} attempt {} has chips [{}] on {}; it starts once the {} jobs the "
                                            "node is stopping are gone",
                                            job.summary.job_id, job.summary.attempt, fmt::join(chips, ","), node_id,
                                            unheld->second.size()));
    return;
  }
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
  to_agent(peer_by_node_.at(job.summary.node_id), start);
  log(action::Severity::info, fmt::format("job {} attempt {} dispatched to {} chips [{}]", job.summary.job_id,
                                          job.summary.attempt, job.summary.node_id, fmt::join(start.chip_indices, ",")));
}

// Jobs inside a developer lease run on its chips, first come first served.
void CoordinatorCore::dispatch_lease_jobs(TimeMs now) {
  for (auto& [lease_id, lease] : leases_) {
    if (lease.summary.state != LeaseState::granted) continue;
    std::vector<std::uint64_t> ids = jobs_in_lease(lease_id);
    std::map<std::string, std::set<std::uint32_t>> busy;
    for (std::uint64_t id : ids) {
      const JobRecord& job = jobs_.at(id);
      if (job.summary.state == JobState::queued) continue;
      busy[job.summary.node_id].insert(job.summary.chip_indices.begin(), job.summary.chip_indices.end());
    }
    for (std::uint64_t id : ids) {
      JobRecord& job = jobs_.at(id);
      if (job.summary.state != JobState::queued) continue;
      for (const auto& p : lease.summary.placement) {
        if (!node_has_session(p.node_id)) continue;
        std::vector<std::uint32_t> free;
        for (std::uint32_t chip : p.chip_indices) {
          if (!busy[p.node_id].count(chip) && free.size() < job.summary.chips) free.push_back(chip);
        }
        if (free.size() < job.summary.chips) continue;
        busy[p.node_id].insert(free.begin(), free.end());
        start_attempt(job, p.node_id, std::move(free), now);
        break;
      }
    }
    lease.summary.job_ids = jobs_in_lease(lease_id);
  }
}

scheduler::Request CoordinatorCore::stop_hold_request(std::uint64_t job_id, const std::string& node_id,
                                                     std::size_t chips) const {
  scheduler::Request req;
  req.id = kStopHoldBase + job_id;
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
  return req;
}

void CoordinatorCore::hold_stopping_chips(std::uint64_t job_id, const std::string& node_id,
                                          const std::vector<std::uint32_t>& chips, TimeMs now) {
  if (chips.empty() || stop_holds_.count(job_id)) return;
  scheduler::Placement placement{node_id, {}};
  for (std::uint32_t chip : chips) placement.chips.push_back(static_cast<int>(chip));
  scheduler::Request req = stop_hold_request(job_id, node_id, chips.size());
  req.submit_ms = to_scheduler_time(now);
  if (auto held = scheduler_.restore_lease(req, {placement}, to_scheduler_time(now), to_scheduler_time(now)); held) {
    stop_holds_[job_id] = node_id;
  } else {
    log(action::Severity::debug, fmt::format("job {}: chips of its stopping attempt on {} not held: {}", job_id, node_id,
                                             held.error().message));
  }
}

void CoordinatorCore::old_attempt_gone(std::uint64_t job_id, const std::string& node_id, TimeMs now) {
  auto hold = stop_holds_.find(job_id);
  if (hold != stop_holds_.end() && hold->second == node_id) {
    stop_holds_.erase(hold);
    const scheduler::RequestId request = kStopHoldBase + job_id;
    if (scheduler_.lease_of(request) || scheduler_.is_pending(request)) {
      (void)scheduler_.cancel(request, to_scheduler_time(now));
    }
  }
  auto& stopping = stopping_on_node_[node_id];
  stopping.erase(job_id);
  auto attempt = stopping_attempts_.find(job_id);
  if (attempt != stopping_attempts_.end() && attempt->second.node_id == node_id) attempt_stopped(job_id, now);
  start_deferred_on(node_id, now);
}

void CoordinatorCore::revoke_due_jobs(TimeMs now) {
  std::vector<std::uint64_t> due;
  for (const auto& [id, deadline] : jobs_under_notice_) {
    if (now >= deadline && job_lease_.count(id)) due.push_back(id);
  }
  for (std::uint64_t id : due) {
    JobRecord& job = jobs_.at(id);
    const scheduler::LeaseId lease = job_lease_.at(id);
    const std::string node_id = job.summary.node_id;
    scheduler::Placement placement{node_id, {}};
    for (std::uint32_t chip : job.summary.chip_indices) placement.chips.push_back(static_cast<int>(chip));
    scheduler::Request hold = stop_hold_request(id, node_id, job.summary.chip_indices.size());
    hold.submit_ms = to_scheduler_time(now);
    // The job's lease ends and its chips pass to the hold in one step, before anything else
    // can be placed on them.
    auto handed = scheduler_.transfer_lease(lease, {{hold, {placement}, to_scheduler_time(now)}}, to_scheduler_time(now));
    if (!handed) {
      log(action::Severity::warn, fmt::format("job {}: {}; the scheduler revokes it itself", id,
                                              handed.error().message));
      jobs_under_notice_.erase(id);
      continue;
    }
    stop_holds_[id] = node_id;
    jobs_under_notice_.erase(id);
    job_lease_.erase(id);
    if (auto peer = peer_of(node_id)) to_agent(*peer, protocol::JobCancel{id, "preempted: the grace period ended"});
    stopping_attempts_[id] = StoppingAttempt{node_id, job.summary.attempt, now};
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
  stopping_attempts_.erase(job_id);
  if (!deferred_starts_.count(job_id)) return;
  JobRecord& job = jobs_.at(job_id);
  // It also waits for the jobs its node is stopping without held chips (start_attempt).
  const auto unheld = stopping_on_node_.find(job.summary.node_id);
  const bool node_stopping = unheld != stopping_on_node_.end() && !unheld->second.empty();
  if (job.summary.state == JobState::assigned && node_stopping) return;
  deferred_starts_.erase(job_id);
  if (job.summary.state != JobState::assigned || !node_has_session(job.summary.node_id)) return;
  job.started_at_ms = now;
  save(job);
  send_job_start(job);
}

void CoordinatorCore::start_deferred_on(const std::string& node_id, TimeMs now) {
  std::vector<std::uint64_t> ready;
  for (std::uint64_t id : deferred_starts_) {
    const auto own = stopping_attempts_.find(id);
    const bool own_attempt_stopping = own != stopping_attempts_.end() && own->second.node_id == node_id;
    if (jobs_.at(id).summary.node_id == node_id && !own_attempt_stopping) ready.push_back(id);
  }
  for (std::uint64_t id : ready) attempt_stopped(id, now);
}

void CoordinatorCore::refresh_chip_counts() {
  std::map<std::string, std::set<std::uint32_t>> used;
  for (const auto& lease : scheduler_.leases()) {
    // Chips held while a cancelled attempt stops belong to no active job: not shown as used.
    if (is_hold_request(lease.request)) continue;
    for (const auto& p : lease.placement) {
      for (int chip : p.chips) used[p.node].insert(static_cast<std::uint32_t>(chip));
    }
  }
  for (std::uint64_t id : active_jobs_) {
    const JobRecord& job = jobs_.at(id);
    if (job.summary.state == JobState::queued) continue;
    used[job.summary.node_id].insert(job.summary.chip_indices.begin(), job.summary.chip_indices.end());
  }
  for (auto& [id, node] : nodes_) {
    auto it = used.find(id);
    node.summary.chips_used = it == used.end() ? 0 : static_cast<std::uint32_t>(it->second.size());
  }
}

// ---- the scheduler -------------------------------------------------------------------------

scheduler::Request CoordinatorCore::job_request(const JobRecord& job) const {
  scheduler::Request req;
  req.id = job.summary.job_id;
  req.cls = to_request_class(job.summary.priority_class);
  if (protocol::is_maintenance_workload(job.summary.workload)) {
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
  req.lease_ms = std::min<DurationMs>(static_cast<DurationMs>(job.timeout_ms) + 2 * knobs_.job_timeout_slack_ms +
                                          3 * knobs_.liveness_timeout_ms() + kSecondMs,
                                      knobs_.scheduler.max_lease_ms);
  req.submit_ms = to_scheduler_time(job.submitted_at_ms);
  return req;
}

Status CoordinatorCore::submit_to_scheduler(const JobRecord& job, TimeMs now) {
  return scheduler_.submit(job_request(job), to_scheduler_time(now));
}

void CoordinatorCore::forget_request(JobRecord& job, TimeMs now) {
  const std::uint64_t id = job.summary.job_id;
  job_lease_.erase(id);
  jobs_under_notice_.erase(id);
  jobs_revoked_.erase(id);
  stopping_attempts_.erase(id);
  deferred_starts_.erase(id);
  // Jobs inside a developer lease have no request of their own, unless the lease ended while
  // they still ran (release_lease_chips).
  if (scheduler_.is_pending(id) || scheduler_.lease_of(id)) {
    if (auto s = scheduler_.cancel(id, to_scheduler_time(now)); !s) {
      log(action::Severity::warn, fmt::format("job {}: {}", id, s.error().message));
    }
  }
}

void CoordinatorCore::upsert_scheduler_node(const NodeRecord& node, TimeMs now) {
  scheduler::NodeInfo info;
  info.id = node.summary.node_id;
  info.revision = node.summary.hardware_revision;
  for (const auto& chip : node.summary.chips) {
    // Unhealthy chips are not leased; maintenance still gets the whole node (on_granted).
    if (!chip.healthy) continue;
    info.chips.push_back(scheduler::ChipInfo{static_cast<int>(chip.index), static_cast<int>(chip.numa_node),
                                             static_cast<int>(chip.numa_node)});
  }
  if (info.chips.empty()) {
    log(action::Severity::warn, fmt::format("node {} reports no healthy chips; nothing is scheduled on it",
                                            node.summary.node_id));
    return;
  }
  if (auto s = scheduler_.upsert_node(info, to_scheduler_time(now)); !s) {
    log(action::Severity::warn, fmt::format("node {}: {}", node.summary.node_id, s.error().message));
  }
}

void CoordinatorCore::set_scheduler_node_state(const std::string& node_id, scheduler::NodeState state,
                                               std::string reason, std::string owner, TimeMs now) {
  auto known = scheduler_node_state_.find(node_id);
  if (known != scheduler_node_state_.end() && known->second == state) return;
  if (auto s = scheduler_.set_node_state(node_id, state, std::move(reason), std::move(owner), to_scheduler_time(now));
      !s) {
    return;  // not in the scheduler (no healthy chips): nothing to tell it
  }
  scheduler_node_state_[node_id] = state;
}

void CoordinatorCore::sync_node_states(TimeMs now) {
  std::map<std::string, std::uint64_t> maintenance_waiting;
  for (std::uint64_t id : active_jobs_) {
    const JobRecord& job = jobs_.at(id);
    if (protocol::is_maintenance_workload(job.summary.workload) && job.summary.state == JobState::queued) {
      maintenance_waiting.emplace(job.requested_node_id, id);
    }
  }
  for (const auto& [id, node] : nodes_) {
    const auto& s = node.summary;
    if (s.state == NodeState::lost || !node_has_session(id)) {
      set_scheduler_node_state(id, scheduler::NodeState::lost, "no agent session", "", now);
    } else if (s.state == NodeState::quarantined) {
      set_scheduler_node_state(id, scheduler::NodeState::quarantined, s.quarantine_reason, s.quarantine_owner, now);
    } else if (node.draining) {
      set_scheduler_node_state(id, scheduler::NodeState::draining, node.drain_reason, "", now);
    } else if (auto st = stopping_on_node_.find(id); st != stopping_on_node_.end() && !st->second.empty()) {
      set_scheduler_node_state(id, scheduler::NodeState::draining,
                               fmt::format("stopping {} jobs it no longer runs for the coordinator", st->second.size()),
                               "", now);
    } else if (auto m = maintenance_waiting.find(id); m != maintenance_waiting.end()) {
      // Maintenance takes the whole node: it drains first and takes no new regular work.
      set_scheduler_node_state(id, scheduler::NodeState::draining,
                               fmt::format("draining for maintenance job {}", m->second), "", now);
    } else {
      set_scheduler_node_state(id, scheduler::NodeState::up, "", "", now);
    }
  }
}

JobRecord* CoordinatorCore::job_holding(scheduler::RequestId request, scheduler::LeaseId lease) {
  auto held = job_lease_.find(request);
  if (held == job_lease_.end() || held->second != lease) return nullptr;
  auto job = jobs_.find(request);
  if (job == jobs_.end() || protocol::is_terminal(job->second.summary.state)) return nullptr;
  return &job->second;
}

void CoordinatorCore::pump_scheduler(TimeMs now) {
  // Handlers may call the scheduler again; what that decides is carried out in the same loop.
  // The nodes' states are brought up to date before each decision is carried out.
  while (true) {
    sync_node_states(now);
    auto a = scheduler_.poll_action();
    if (!a) break;
    // Holds of stopping attempts are the core's own bookkeeping: nothing to carry out.
    const scheduler::RequestId request = std::visit([](const auto& act) { return act.request; }, *a);
    if (is_hold_request(request)) {
      if (!std::holds_alternative<scheduler::LeaseGranted>(*a) && !std::holds_alternative<scheduler::PreemptNotice>(*a)) {
        stop_holds_.erase(request - kStopHoldBase);
      }
      continue;
    }
    std::visit(
        [&](const auto& act) {
          using T = std::decay_t<decltype(act)>;
          if constexpr (std::is_same_v<T, scheduler::LeaseGranted>) {
            on_granted(act, now);
          } else if constexpr (std::is_same_v<T, scheduler::PreemptNotice>) {
            on_preempt_notice(act, now);
          } else if constexpr (std::is_same_v<T, scheduler::Revoke>) {
            on_revoke(act, now);
          } else if constexpr (std::is_same_v<T, scheduler::Requeued>) {
            on_requeued(act, now);
          } else if constexpr (std::is_same_v<T, scheduler::LeaseLost>) {
            on_lease_lost(act, now);
          } else if constexpr (std::is_same_v<T, scheduler::LeaseExpired>) {
            on_lease_expired(act, now);
          }
        },
        *a);
  }
  dispatch_lease_jobs(now);
  refresh_chip_counts();
}

void CoordinatorCore::on_granted(const scheduler::LeaseGranted& granted, TimeMs now) {
  KILN_ASSERT(!granted.placement.empty(), "a granted lease has chips");
  // Withdrawn in the same step that granted it (a revoked job waiting for its old attempt).
  if (scheduler_.lease_of(granted.request) != granted.lease) return;
  if (is_lease_request(granted.request)) {
    DevLease* lease = find_lease(granted.request - kLeaseRequestBase);
    if (!lease || lease->summary.state != LeaseState::pending) {
      // Released in the same step that granted it: give the chips straight back.
      if (scheduler_.lease_of(granted.request) == granted.lease) {
        (void)scheduler_.release(granted.lease, to_scheduler_time(now));
      }
      return;
    }
    lease->scheduler_lease = granted.lease;
    lease->summary.state = LeaseState::granted;
    lease->summary.granted_at_ms = static_cast<std::uint64_t>(std::max<TimeMs>(0, now));
    lease->summary.expires_at_ms = static_cast<std::uint64_t>(std::max<TimeMs>(0, to_wall_time(granted.expires_at_ms)));
    lease->summary.grace_deadline_ms = 0;
    lease->summary.placement.clear();
    std::vector<std::string> where;
    for (const auto& p : granted.placement) {
      protocol::LeasePlacement placement{p.node, {}};
      for (int chip : p.chips) placement.chip_indices.push_back(static_cast<std::uint32_t>(chip));
      where.push_back(fmt::format("{} chips [{}]", p.node, fmt::join(p.chips, ",")));
      lease->summary.placement.push_back(std::move(placement));
    }
    lease_event(*lease, LeaseEventKind::granted,
                fmt::format("granted {} until {}{}", fmt::join(where, " and "),
                            wall_clock_text(static_cast<TimeMs>(lease->summary.expires_at_ms)),
                            granted.borrowed ? " (on borrowed capacity: reclaimed first)" : ""),
                now);
    return;
  }
  auto it = jobs_.find(granted.request);
  if (it == jobs_.end() || it->second.summary.state != JobState::queued) {
    // The job ended in the same step that granted it: give the chips straight back.
    if (scheduler_.lease_of(granted.request) == granted.lease) {
      (void)scheduler_.release(granted.lease, to_scheduler_time(now));
    }
    return;
  }
  JobRecord& job = it->second;
  const scheduler::Placement& placement = granted.placement.front();
  if (!node_has_session(placement.node)) {
    // The scheduler's view of the node was stale: correct it and let the job wait again.
    log(action::Severity::error, fmt::format("job {} was granted chips on {}, which has no agent session; "
                                             "requeued",
                                             job.summary.job_id, placement.node));
    scheduler_node_state_.erase(placement.node);
    set_scheduler_node_state(placement.node, scheduler::NodeState::lost, "no agent session", "", now);
    (void)scheduler_.cancel(granted.request, to_scheduler_time(now));
    if (auto s = submit_to_scheduler(job, now); !s) finish(job, JobState::failed, s.error().message, now);
    return;
  }
  std::vector<std::uint32_t> chips;
  if (protocol::is_maintenance_workload(job.summary.workload)) {
    // The whole node is leased: maintenance gets every chip, the unhealthy ones too.
    for (const auto& chip : nodes_.at(placement.node).summary.chips) chips.push_back(chip.index);
  } else {
    for (int chip : placement.chips) {
      if (chips.size() < job.summary.chips) chips.push_back(static_cast<std::uint32_t>(chip));
    }
  }
  job_lease_[job.summary.job_id] = granted.lease;
  start_attempt(job, placement.node, std::move(chips), now);
}

void CoordinatorCore::on_preempt_notice(const scheduler::PreemptNotice& notice, TimeMs now) {
  const TimeMs grace_ms = std::clamp<TimeMs>(to_wall_time(notice.grace_deadline_ms) - now, 0, 24 * kHourMs);
  const std::string reason = is_lease_request(notice.preempted_for)
                                 ? fmt::format("preempted for lease L{}", notice.preempted_for - kLeaseRequestBase)
                             : jobs_.count(notice.preempted_for)
                                 ? fmt::format("preempted for job {} ({})", notice.preempted_for,
                                               protocol::enum_name(jobs_.at(notice.preempted_for).summary.priority_class))
                                 : fmt::format("preempted for request {}", notice.preempted_for);
  auto notify = [&](JobRecord& job) {
    if (auto peer = peer_of(job.summary.node_id)) {
      to_agent(*peer, protocol::JobPreempt{job.summary.job_id, static_cast<std::uint32_t>(grace_ms),
                                           fmt::format("{}; checkpoint and exit within {}", reason,
                                                       human_duration(grace_ms))});
    }
  };
  if (is_lease_request(notice.request)) {
    DevLease* lease = find_lease(notice.request - kLeaseRequestBase);
    if (!lease || lease->scheduler_lease != notice.lease) return;
    const auto deadline = static_cast<std::uint64_t>(std::max<TimeMs>(0, now + grace_ms));
    // A notice given before a coordinator restart still holds: the earlier deadline stands.
    const bool noticed = lease->summary.state == LeaseState::preempting && lease->summary.grace_deadline_ms > 0;
    lease->summary.grace_deadline_ms = noticed ? std::min(lease->summary.grace_deadline_ms, deadline) : deadline;
    lease->summary.state = LeaseState::preempting;
    for (std::uint64_t id : jobs_in_lease(lease->summary.lease_id)) {
      JobRecord& job = jobs_.at(id);
      if (job.summary.state != JobState::queued) notify(job);
    }
    lease_event(*lease, LeaseEventKind::preempt_notice,
                fmt::format("{}: release the lease within {} (by {}); it is then revoked and queued again keeping "
                            "its age",
                            reason, human_duration(grace_ms), wall_clock_text(now + grace_ms)),
                now);
    return;
  }
  JobRecord* job = job_holding(notice.request, notice.lease);
  if (!job) return;
  jobs_under_notice_[job->summary.job_id] = now + grace_ms;
  job->summary.detail = fmt::format("{}; notice given, {} to checkpoint", reason, human_duration(grace_ms));
  save(*job);
  notify(*job);
  log(action::Severity::info, fmt::format("job {} on {}: {}", job->summary.job_id, job->summary.node_id,
                                          job->summary.detail));
}

void CoordinatorCore::on_revoke(const scheduler::Revoke& revoke, TimeMs now) {
  if (is_lease_request(revoke.request)) {
    DevLease* lease = find_lease(revoke.request - kLeaseRequestBase);
    if (!lease || lease->scheduler_lease != revoke.lease) return;
    for (std::uint64_t id : jobs_in_lease(lease->summary.lease_id)) {
      JobRecord& job = jobs_.at(id);
      if (job.summary.state == JobState::queued || job.cancel_requested) continue;
      job.cancel_requested = true;
      save(job);
      if (auto peer = peer_of(job.summary.node_id)) {
        to_agent(*peer, protocol::JobCancel{id, fmt::format("lease L{} revoked: its preemption grace ended",
                                                            lease->summary.lease_id)});
      }
    }
    return;
  }
  JobRecord* job = job_holding(revoke.request, revoke.lease);
  if (!job) return;
  jobs_revoked_.insert(job->summary.job_id);
  if (auto peer = peer_of(job->summary.node_id)) {
    to_agent(*peer, protocol::JobCancel{job->summary.job_id, "preempted: the grace period ended"});
  }
  (void)now;
}

void CoordinatorCore::on_requeued(const scheduler::Requeued& requeued, TimeMs now) {
  if (is_lease_request(requeued.request)) {
    DevLease* lease = find_lease(requeued.request - kLeaseRequestBase);
    if (!lease || lease->scheduler_lease != requeued.previous_lease) return;
    lease->scheduler_lease.reset();
    lease->summary.state = LeaseState::pending;
    lease->summary.placement.clear();
    lease->summary.grace_deadline_ms = 0;
    lease->summary.expires_at_ms = 0;
    lease_event(*lease, LeaseEventKind::requeued, "preempted; queued again keeping its age", now);
    return;
  }
  JobRecord* job = job_holding(requeued.request, requeued.previous_lease);
  if (!job) return;
  job_lease_.erase(job->summary.job_id);
  jobs_under_notice_.erase(job->summary.job_id);
  if (job->summary.attempt >= 99) {
    forget_request(*job, now);
    finish(*job, JobState::lost, "preempted too many times", now);
    return;
  }
  job->preemptions += 1;
  job->summary.state = JobState::queued;
  job->summary.detail = fmt::format("attempt {} preempted on {}; queued again keeping its age",
                                    job->summary.attempt, job->summary.node_id);
  if (jobs_revoked_.erase(job->summary.job_id)) {
    stopping_attempts_[job->summary.job_id] = StoppingAttempt{job->summary.node_id, job->summary.attempt, now};
  }
  job->summary.node_id.clear();
  job->summary.chip_indices.clear();
  save(*job);
  log(action::Severity::info, fmt::format("job {}: {}", job->summary.job_id, job->summary.detail));
}

void CoordinatorCore::on_lease_lost(const scheduler::LeaseLost& lost, TimeMs now) {
  if (is_lease_request(lost.request)) {
    DevLease* lease = find_lease(lost.request - kLeaseRequestBase);
    if (!lease || lease->scheduler_lease != lost.lease) return;
    lease_node_lost(*lease, lost.node, now);
    return;
  }
  JobRecord* job = job_holding(lost.request, lost.lease);
  if (!job) return;  // mark_node_lost already failed it over
  attempt_lost(*job, fmt::format("node {} was lost", lost.node), now);
}

void CoordinatorCore::on_lease_expired(const scheduler::LeaseExpired& expired, TimeMs now) {
  if (is_lease_request(expired.request)) {
    DevLease* lease = find_lease(expired.request - kLeaseRequestBase);
    if (!lease || lease->scheduler_lease != expired.lease) return;
    end_lease(*lease, "expired", now);
    return;
  }
  JobRecord* job = job_holding(expired.request, expired.lease);
  if (!job) return;
  // A backstop: the job's own timeout normally ends it first. Its chips are already free.
  job_lease_.erase(job->summary.job_id);
  if (auto peer = peer_of(job->summary.node_id)) {
    to_agent(*peer, protocol::JobCancel{job->summary.job_id, "its lease expired"});
  }
  finish(*job, JobState::timed_out, fmt::format("its lease on {} expired", job->summary.node_id), now);
}

// ---- plumbing ------------------------------------------------------------------------------

void CoordinatorCore::reply_error(const std::string& client, std::uint64_t corr, Errc code, std::string message) {
  actions_.push_back(
      action::ToClient{client, protocol::ErrorReply{std::string(to_string(code)), std::move(message), {}}, corr});
}

void CoordinatorCore::to_agent(const std::string& peer, protocol::Body body, std::uint64_t corr) {
  actions_.push_back(action::ToAgent{peer, std::move(body), corr});
}

void CoordinatorCore::log(action::Severity severity, std::string text) {
  actions_.push_back(action::Log{severity, std::move(text)});
}

void CoordinatorCore::save(const JobRecord& job) { actions_.push_back(action::SaveJob{job}); }

void CoordinatorCore::save(const NodeRecord& node) { actions_.push_back(action::SaveNode{node}); }

void CoordinatorCore::save(const DevLease& lease) {
  actions_.push_back(action::SaveLease{LeaseRecord{lease.summary, lease.requested_at_ms, lease.start_at_ms}});
}

}  // namespace kiln::coordinator

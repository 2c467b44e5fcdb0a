// The router: every message and tick comes in here and goes to the part of the core it is for;
// the plumbing that turns decisions into actions.
#include "coordinator/core/coordinator_core.h"

#include <algorithm>

#include <fmt/format.h>

#include "coordinator/core/core_rules.h"

namespace kiln::coordinator {

using namespace detail;

CoordinatorCore::CoordinatorCore(CoordinatorKnobs knobs, Snapshot recovered, Now clock_now)
    : knobs_(knobs),
      mono_origin_ms_(clock_now.monotonic_ms),
      core_origin_ms_(clock_now.wall_ms),
      registry_(knobs.liveness_timeout_ms(),
                clock_now.wall_ms + std::max<TimeMs>(knobs.restart_grace_ms, knobs.liveness_timeout_ms())),
      bridge_(knobs.scheduler, clock_now.wall_ms, sink_),
      dev_leases_(sink_, knobs.max_ended_leases_kept, knobs.max_lease_watches),
      records_(std::move(recovered.records)) {
  const TimeMs now = clock(clock_now);
  for (auto& node : recovered.nodes) registry_.recover(std::move(node), now);
  // The scheduler learns the recovered nodes as lost: nothing new goes to them before their
  // agents say hello, and the chips of jobs still running there can be given back first.
  for (auto& [id, node] : registry_.nodes()) {
    upsert_scheduler_node(node, now);
    bridge_.set_node_state(id, scheduler::NodeState::lost, "waiting for its agent to register", "", now);
  }
  for (auto& job : recovered.jobs) {
    next_job_id_ = std::max(next_job_id_, job.summary.job_id + 1);
    if (!protocol::is_terminal(job.summary.state)) active_jobs_.insert(job.summary.job_id);
    // An attempt assigned or running before the restart was dispatched; its chips are held
    // again when its agent reports it (reconcile_reported_jobs).
    if (job.summary.state == JobState::assigned || job.summary.state == JobState::running) {
      attempts_.to(job.summary.job_id, AttemptPhase::dispatched);
    }
    jobs_.emplace(job.summary.job_id, std::move(job));
  }
  // Leases after the jobs (ending one ends its jobs), before the queued jobs go back to the
  // scheduler: a granted lease's chips are held again before anything else is placed.
  const std::size_t leases_recovered = recovered.leases.size();
  for (auto& lease : recovered.leases) recover_lease(std::move(lease), now);
  dev_leases_.prune_ended();
  std::size_t resubmitted = 0;
  for (std::uint64_t id : std::vector<std::uint64_t>(active_jobs_.begin(), active_jobs_.end())) {
    JobRecord& job = jobs_.at(id);
    if (job.lease_id != 0) {
      // A job inside a lease waits for the lease's chips, or runs on them (or, its lease ended
      // or requeued while it ran, on chips of its own given back when its agent registers).
      const DevLease* lease = dev_leases_.find(job.lease_id);
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
    const std::size_t leases_active = dev_leases_.active();
    log(action::Severity::info,
        fmt::format("recovered {} nodes, {} jobs ({} active, {} queued again) and {} developer leases ({} active) "
                    "from the store",
                    registry_.nodes().size(), jobs_.size(), active_jobs_.size(), resubmitted, leases_recovered, leases_active));
  }
  pump_scheduler(now);
}

std::optional<Action> CoordinatorCore::poll_action() { return sink_.poll(); }

std::optional<TimeMs> CoordinatorCore::next_deadline() const {
  std::optional<TimeMs> next;
  auto consider = [&](TimeMs t) {
    if (!next || t < *next) next = t;
  };
  for (const auto& [id, node] : registry_.nodes()) {
    if (node.summary.state != NodeState::lost) consider(registry_.liveness_deadline(node) + 1);
  }
  for (std::uint64_t id : active_jobs_) {
    const JobRecord& job = jobs_.at(id);
    if (job.summary.state != JobState::queued) {
      consider(job.started_at_ms + job.timeout_ms + knobs_.job_timeout_slack_ms + 1);
    }
  }
  if (auto t = bridge_.scheduler().next_deadline()) consider(to_wall_time(*t));
  if (auto t = dev_leases_.next_deadline()) consider(*t);
  for (const auto& [id, attempt] : attempts_.all()) {
    if (attempt.phase == AttemptPhase::under_notice) consider(attempt.grace_deadline_ms);
    if (attempt.earlier_stopping) consider(stopping_given_up_at(*attempt.earlier_stopping));
  }
  for (const auto& [node_id, stopping] : stopping_on_node_) {
    for (const auto& [id, since] : stopping) consider(since + knobs_.job_timeout_slack_ms + knobs_.liveness_timeout_ms());
  }
  if (next) *next += mono_origin_ms_ - core_origin_ms_;  // the shell waits on its monotonic clock
  return next;
}

std::string CoordinatorCore::clock_text(TimeMs core_ms, bool with_seconds) const {
  return wall_clock_text(core_ms + wall_offset_ms_, with_seconds);
}

TimeMs CoordinatorCore::clock(const Now& now) {
  const TimeMs core_ms = core_origin_ms_ + (now.monotonic_ms - mono_origin_ms_);
  wall_offset_ms_ = now.wall_ms - core_ms;
  return core_ms;
}

void CoordinatorCore::on_agent_message(const std::string& peer, const Caller& caller,
                                       const protocol::Envelope& m, Now clock_now) {
  const TimeMs now = clock(clock_now);
  KILN_ASSERT(caller.role == Role::agent, "the shell admits only agent keys on the agent socket");
  if (const auto* hello = std::get_if<protocol::Hello>(&m.body)) {
    handle_hello(peer, caller, m, *hello, now);
    pump_scheduler(now);
    return;
  }
  const NodeRegistry::Session* session = registry_.session(peer);
  if (!session) {
    to_agent(peer,
             protocol::ErrorReply{std::string(to_string(Errc::not_registered)),
                                  "this connection has no session (the coordinator may have restarted); "
                                  "send hello to register",
                                  {}},
             m.header.id);
    return;
  }
  const std::string node_id = session->node_id;
  auto node = registry_.nodes().find(node_id);
  KILN_ASSERT(node != registry_.nodes().end(), "a session always belongs to a registered node");
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

void CoordinatorCore::on_client_message(const std::string& client, const Caller& caller,
                                        const protocol::Envelope& m, Now clock_now) {
  const TimeMs now = clock(clock_now);
  KILN_ASSERT(caller.role != Role::agent, "the shell refuses agent keys on the client socket");
  const std::uint64_t corr = m.header.id;
  auto reply = [&](protocol::Body body) { sink_.push(action::ToClient{client, std::move(body), corr}); };
  std::visit(
      [&](const auto& body) {
        using T = std::decay_t<decltype(body)>;
        if constexpr (std::is_same_v<T, protocol::Whoami>) {
          reply(protocol::WhoamiReply{caller.key_name, caller.role, protocol::kProtocolVersion, KILN_VERSION});
        } else if constexpr (std::is_same_v<T, protocol::ListNodes>) {
          reply(registry_.list(now));
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
          for (const auto& [id, lease] : dev_leases_.all()) {
            if (!body.include_ended && lease.summary.state == LeaseState::ended) continue;
            if (list.leases.size() >= 1000) break;
            list.leases.push_back(lease.summary);
          }
          reply(std::move(list));
        } else if constexpr (std::is_same_v<T, protocol::WatchLease>) {
          handle_watch_lease(client, caller, m, body, now);
        } else if constexpr (std::is_same_v<T, protocol::QuarantineNode>) {
          auto node = registry_.nodes().find(body.node_id);
          if (caller.role != Role::ci && caller.role != Role::lab && !privileged(caller.role)) {
            reply_error(client, corr, Errc::unauthorized,
                        fmt::format("role {} may not quarantine nodes; CI, lab, ops and admin keys may",
                                    protocol::enum_name(caller.role)));
          } else if (node == registry_.nodes().end()) {
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
        } else if constexpr (std::is_same_v<T, protocol::ListQueue>) {
          reply(queue_list(body, now));
        } else if constexpr (std::is_same_v<T, protocol::QueueWhy>) {
          if ((body.job_id == 0) == (body.lease_id == 0)) {
            reply_error(client, corr, Errc::invalid_argument,
                        "queue_why takes exactly one of job_id and lease_id; `kiln queue --why ID` takes a job id "
                        "or a lease id such as L3");
          } else if (body.job_id != 0 && !jobs_.count(body.job_id)) {
            reply_error(client, corr, Errc::not_found,
                        fmt::format("no job {}; `kiln jobs` lists the known jobs", body.job_id));
          } else if (body.lease_id != 0 && !dev_leases_.all().count(body.lease_id)) {
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
  sink_.push(action::SaveRecord{*record});
  sink_.push(action::ToClient{client, protocol::Ok{}, m.header.id});
}

void CoordinatorCore::on_tick(Now clock_now) {
  const TimeMs now = clock(clock_now);
  for (auto& [id, node] : registry_.nodes()) {
    if (node.summary.state != NodeState::lost && now > registry_.liveness_deadline(node)) mark_node_lost(node, now);
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
    (void)hold_chips_of_stopping_job(job, now);
    finish(job, JobState::timed_out,
           fmt::format("no result from node {} within its timeout of {} ms", node_id, job.timeout_ms), now);
  }
  // An attempt that does not report its end after the cancel is waited for no longer than a
  // silent node would be.
  std::vector<std::uint64_t> stopped;
  for (const auto& [id, attempt] : attempts_.all()) {
    if (attempt.earlier_stopping && now >= stopping_given_up_at(*attempt.earlier_stopping)) stopped.push_back(id);
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
  if (auto deadline = bridge_.scheduler().next_deadline(); deadline && to_scheduler_time(now) >= *deadline) {
    bridge_.scheduler().on_tick(to_scheduler_time(now));
  }
  answer_watches(now);
  pump_scheduler(now);
}

void CoordinatorCore::reply_error(const std::string& client, std::uint64_t corr, Errc code, std::string message) {
  sink_.reply_error(client, corr, code, std::move(message));
}

void CoordinatorCore::to_agent(const std::string& peer, protocol::Body body, std::uint64_t corr) {
  sink_.to_agent(peer, std::move(body), corr);
}

void CoordinatorCore::log(action::Severity severity, std::string text) { sink_.log(severity, std::move(text)); }

void CoordinatorCore::save(const JobRecord& job) { sink_.save(job); }

void CoordinatorCore::save(const NodeRecord& node) { sink_.save(node); }

}  // namespace kiln::coordinator

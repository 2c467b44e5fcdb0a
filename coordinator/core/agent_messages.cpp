// What agents say: registering (hello) and reconciling their jobs with the core's, heartbeats,
// health reports, quarantine and the diagnostics and installs that end it, nodes lost.
#include "coordinator/core/coordinator_core.h"

#include <algorithm>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/text/utf8.h"
#include "coordinator/core/core_rules.h"

namespace kiln::coordinator {

using namespace detail;

namespace {

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

}  // namespace

void CoordinatorCore::handle_hello(const std::string& peer, const Caller& caller,
                                   const protocol::Envelope& m, const protocol::Hello& hello, TimeMs now) {
  const std::optional<std::uint32_t> version = admit_hello(peer, caller, m, hello);
  if (!version) return;
  // A node that registers again on a new connection replaces its old session.
  registry_.open_session(peer, hello.node_id, *version);
  NodeRecord& node = registry_.nodes()[hello.node_id];
  const bool was_lost = node.summary.node_id.empty() || node.summary.state == NodeState::lost;
  take_inventory(node, hello, now);

  // Reconcile what the agent runs with what this coordinator assigned to it.
  protocol::Welcome welcome;
  welcome.protocol_version = *version;
  welcome.heartbeat_interval_ms = knobs_.heartbeat_interval_ms;
  welcome.liveness_missed_beats = knobs_.liveness_missed_beats;
  const std::set<std::uint64_t> running(hello.running_jobs.begin(), hello.running_jobs.end());
  const std::vector<std::uint64_t> unrestorable = reconcile_reported_jobs(hello, welcome, now);
  // A revoked attempt the agent no longer runs has stopped; a new attempt waiting for it
  // starts after the welcome.
  std::vector<std::uint64_t> stopped;
  for (const auto& [id, attempt] : attempts_.all()) {
    if (attempt.earlier_stopping && attempt.earlier_stopping->node_id == hello.node_id && !running.count(id)) {
      stopped.push_back(id);
    }
  }
  const std::size_t vanished = fail_vanished_jobs(hello, now);
  for (std::uint64_t id : unrestorable) {
    attempt_lost(jobs_.at(id), fmt::format("its chips on {} could not be given back after a restart", hello.node_id),
                 now);
  }
  hold_chips_told_to_stop(node, welcome.cancel_jobs, now);
  // The node's state first (draining while it stops jobs or its chips changed), then its
  // chips: updating them schedules at once.
  if (bridge_.knows_other_chips(scheduler_node_info(node))) bridge_.inventory_changed(hello.node_id);
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
        attempts_.own_lease(id)) {
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
                  hello.agent_version, *version, running.size(), welcome.cancel_jobs.size(),
                  vanished + unrestorable.size()));
}

std::optional<std::uint32_t> CoordinatorCore::admit_hello(const std::string& peer, const Caller& caller,
                                                          const protocol::Envelope& m, const protocol::Hello& hello) {
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
    return std::nullopt;
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
    return std::nullopt;
  }
  // Hello is idempotent: a copy of a hello already taken (the network duplicated or delayed
  // it), or one from a connection a later hello replaced, describes the node as it was and
  // would end jobs started since. It is dropped.
  if (auto stale = registry_.stale_hello(hello.node_id, peer, m.header.id)) {
    log(action::Severity::debug, fmt::format("ignoring hello {} from node {}: {}", m.header.id, hello.node_id, *stale));
    return std::nullopt;
  }
  return version;
}

void CoordinatorCore::take_inventory(NodeRecord& node, const protocol::Hello& hello, TimeMs now) {
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
}

std::vector<std::uint64_t> CoordinatorCore::reconcile_reported_jobs(const protocol::Hello& hello,
                                                                     protocol::Welcome& welcome, TimeMs now) {
  const std::set<std::uint64_t> running(hello.running_jobs.begin(), hello.running_jobs.end());
  std::set<std::uint64_t> reported = running;
  reported.insert(hello.finished_jobs.begin(), hello.finished_jobs.end());
  std::vector<std::uint64_t> unrestorable;
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
    if ((job.lease_id == 0 || !runs_on_lease_chips(job)) && !attempts_.own_lease(id)) {
      scheduler::Placement placement{hello.node_id, {}};
      for (std::uint32_t chip : job.summary.chip_indices) placement.chips.push_back(static_cast<int>(chip));
      auto lease = bridge_.scheduler().restore_lease(job_request(job), {placement}, to_scheduler_time(job.started_at_ms),
                                            to_scheduler_time(now));
      if (!lease) {
        log(action::Severity::warn, fmt::format("job {} cannot keep its chips on {}: {}; it is stopped", id,
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

std::size_t CoordinatorCore::fail_vanished_jobs(const protocol::Hello& hello, TimeMs now) {
  const std::set<std::uint64_t> reported = [&] {
    std::set<std::uint64_t> ids(hello.running_jobs.begin(), hello.running_jobs.end());
    ids.insert(hello.finished_jobs.begin(), hello.finished_jobs.end());
    return ids;
  }();
  std::vector<std::uint64_t> vanished;
  for (std::uint64_t id : active_jobs_) {
    const JobRecord& job = jobs_.at(id);
    if (job.summary.node_id == hello.node_id && job.summary.state != JobState::queued && !reported.count(id) &&
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

void CoordinatorCore::hold_chips_told_to_stop(const NodeRecord& node, const std::vector<std::uint64_t>& cancelled,
                                              TimeMs now) {
  // What it is told to stop keeps its chips until it is gone: held where the core knows them,
  // otherwise the whole node takes no new work meanwhile.
  const std::string& node_id = node.summary.node_id;
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
      for (const auto& lease : bridge_.scheduler().leases()) {
        for (const auto& p : lease.placement) {
          if (p.node == node_id) leased.insert(p.chips.begin(), p.chips.end());
        }
      }
      for (const auto& chip : node.summary.chips) {
        if (chip.healthy && !leased.count(chip.index)) chips.push_back(chip.index);
      }
    }
    hold_stopping_chips(id, node_id, chips, now);
    if (!bridge_.stop_hold_of(id, node_id)) stopping_here.emplace(id, now);
    // A job queued again meanwhile starts on this node only once this old attempt is gone.
    if (auto job = jobs_.find(id); job != jobs_.end() && job->second.summary.state == JobState::queued) {
      attempts_.of(id).earlier_stopping = StoppingAttempt{node_id, job->second.summary.attempt, now};
    }
  }
}

void CoordinatorCore::handle_heartbeat(const std::string& peer, const std::string& node_id,
                                       const protocol::Envelope& m, const protocol::Heartbeat& beat, TimeMs now) {
  const std::set<std::uint64_t> running(beat.running_jobs.begin(), beat.running_jobs.end());
  std::vector<std::uint64_t> gone;
  for (const auto& [id, since] : stopping_on_node_[node_id]) {
    if (!running.count(id)) gone.push_back(id);
  }
  for (const auto& [request, hold] : bridge_.stop_holds()) {
    if (hold.node_id == node_id && !running.count(hold.job_id)) gone.push_back(hold.job_id);
  }
  for (std::uint64_t id : gone) old_attempt_gone(id, node_id, now);
  auto& stopping = stopping_on_node_[node_id];
  for (std::uint64_t id : running) {
    auto it = jobs_.find(id);
    const bool ours = it != jobs_.end() && !protocol::is_terminal(it->second.summary.state) &&
                      it->second.summary.node_id == node_id;
    if (!ours) {
      to_agent(peer, protocol::JobCancel{id, "the coordinator no longer assigns this job to this node"});
      if (!bridge_.stop_hold_of(id, node_id)) stopping.emplace(id, now);
    } else if (attempts_.in(id, AttemptPhase::start_deferred)) {
      // What runs is the attempt being stopped; the new one waits for it to go.
      to_agent(peer, protocol::JobCancel{id, "an earlier attempt of this job must stop before the next starts"});
    }
  }
  to_agent(peer, protocol::Heartbeat{}, m.header.id);
  sync_node_states(now);
}

void CoordinatorCore::handle_health_report(const std::string& node_id, const protocol::HealthReport& report,
                                           TimeMs now) {
  NodeRecord& node = registry_.nodes().at(node_id);
  // A failing probe measured before the diagnostics that released the node began says nothing
  // about the repaired node: it must not quarantine it again (nor count it as flapping).
  if (auto released = registry_.released_from_quarantine_at(node_id);
      report.verdict == protocol::HealthStatus::fail && report.measured_at_ms != 0 && released &&
      static_cast<TimeMs>(report.measured_at_ms) < *released) {
    log(action::Severity::info, fmt::format("node {}: ignoring a failing health report measured {} ms before the "
                                            "diagnostics that released it from quarantine",
                                            node_id, *released - static_cast<TimeMs>(report.measured_at_ms)));
    return;
  }
  std::vector<std::string> problems;
  for (const auto& check : report.checks) {
    if (check.status == protocol::HealthStatus::fail || check.status == protocol::HealthStatus::warn) {
      problems.push_back(fmt::format("{}{} {}: {}", check.check, check.chip >= 0 ? fmt::format(" chip {}", check.chip) : "",
                                     protocol::enum_name(check.status), check.reason_code));
    }
  }
  const bool changed = node.summary.health != report.verdict;
  node.summary.health = report.verdict;
  node.summary.health_detail = text::utf8_head(fmt::format("{}", fmt::join(problems, "; ")), protocol::kMessageText.max_len);
  if (report.verdict == protocol::HealthStatus::fail && node.summary.state != NodeState::quarantined) {
    quarantine(node, "health probe failed: " + node.summary.health_detail, "lab", now);
  } else if (changed) {
    save(node);
  }
}

void CoordinatorCore::apply_diag_result(const std::string& node_id, const JobRecord& job, TimeMs now) {
  auto it = registry_.nodes().find(node_id);
  if (it == registry_.nodes().end()) return;
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
    registry_.released_from_quarantine(node_id, job.started_at_ms + wall_offset_ms_);
    save(node);
    sync_node_states(now);
  }
}

void CoordinatorCore::apply_install_result(const std::string& node_id, const JobRecord& job, TimeMs now) {
  auto it = registry_.nodes().find(node_id);
  if (it == registry_.nodes().end()) return;
  // The install report says whether the node may take work (docs/health.md); a node whose
  // stack may be half-installed never does, whatever the job's exit code says.
  auto doc = nlohmann::json::parse(job.result, nullptr, /*allow_exceptions=*/false);
  // The report comes from the node: a member of the wrong type is no report, never a throw.
  const auto fit_member = doc.is_object() ? doc.find("fit_for_work") : doc.end();
  const bool fit = fit_member != doc.end() && fit_member->is_boolean() && fit_member->get<bool>();
  if (!fit && it->second.summary.state != NodeState::quarantined) {
    const auto reason_member = doc.is_object() ? doc.find("reason") : doc.end();
    const std::string reason = reason_member != doc.end() && reason_member->is_string()
                                   ? reason_member->get<std::string>()
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
  node.summary.quarantine_reason = why.empty() ? "quarantined" : text::utf8_head(why, protocol::kMessageText.max_len);
  node.summary.quarantine_owner = owner;
  save(node);
  log(action::Severity::warn, fmt::format("node {} quarantined (owner {}): {}; it returns after passing level {} "
                                          "diagnostics",
                                          node.summary.node_id, owner, why, release_diag_level(node)));
  // The scheduler learns of the quarantine first, so no rerun lands back on this node.
  sync_node_states(now);
  rerun_failures_of(node, now);
}

bool CoordinatorCore::may_rerun(const JobRecord& job, const NodeRecord& node, TimeMs now) const {
  const bool ci = job.summary.priority_class != PriorityClass::experiment;
  const bool failed_here = (job.summary.state == JobState::failed || job.summary.state == JobState::timed_out) &&
                           job.summary.node_id == node.summary.node_id;
  return ci && failed_here && job.rerun_job_id == 0 && job.rerun_of == 0 && job.lease_id == 0 &&
         job.requested_node_id.empty() && !protocol::is_maintenance_workload(job.summary.workload) &&
         now - job.finished_at_ms <= knobs_.quarantine_rerun_window_ms;
}

void CoordinatorCore::rerun_failures_of(const NodeRecord& node, TimeMs now) {
  std::vector<std::uint64_t> failed;
  for (const auto& [id, job] : jobs_) {
    if (may_rerun(job, node, now)) failed.push_back(id);
  }
  for (std::uint64_t id : failed) rerun(id, node, now);
}

void CoordinatorCore::rerun(std::uint64_t id, const NodeRecord& node, TimeMs now) {
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
  rerun.summary.detail = fmt::format("rerun of job {}, which failed on {}, quarantined since", id,
                                     node.summary.node_id);
  rerun.timeout_ms = original.timeout_ms;
  rerun.seed = original.seed;
  rerun.benchmark = original.benchmark;
  rerun.rerun_of = id;
  rerun.submitted_at_ms = now;
  if (auto s = submit_to_scheduler(rerun, now); !s) {
    log(action::Severity::warn, fmt::format("cannot rerun job {}: {}", id, s.error().message));
    return;
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

void CoordinatorCore::handle_drain(const std::string& client, const Caller& caller, const protocol::Envelope& m,
                                   const protocol::DrainNode& drain, TimeMs now) {
  if (caller.role != Role::ops && caller.role != Role::lab && caller.role != Role::admin) {
    reply_error(client, m.header.id, Errc::unauthorized,
                fmt::format("role {} may not drain nodes; ask ops, lab or admin",
                            protocol::enum_name(caller.role)));
    return;
  }
  auto it = registry_.nodes().find(drain.node_id);
  if (it == registry_.nodes().end()) {
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
  sink_.push(action::ToClient{client, protocol::Ok{drain.drain ? "draining" : "resumed"}, m.header.id});
  log(action::Severity::info, fmt::format("node {} {} by {}{}", drain.node_id, drain.drain ? "drained" : "resumed",
                                          caller.key_name, drain.reason.empty() ? "" : ": " + drain.reason));
}

void CoordinatorCore::mark_node_lost(NodeRecord& node, TimeMs now) {
  const std::string node_id = node.summary.node_id;
  node.summary.state = NodeState::lost;
  registry_.close_session(node_id);
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
  for (const auto& [id, attempt] : attempts_.all()) {
    if (attempt.earlier_stopping && attempt.earlier_stopping->node_id == node_id) stopped.push_back(id);
  }
  for (std::uint64_t id : stopped) attempt_stopped(id, now);
  // A lease given back its chips after a coordinator restart, on a node the scheduler already
  // counted as lost: the scheduler ends nothing, so the core requeues it here.
  std::vector<std::uint64_t> leases_here;
  for (const auto& [id, lease] : dev_leases_.all()) {
    const auto request = bridge_.find_request(request_owner::DevLease{id});
    if (!lease.scheduler_lease || !request || bridge_.scheduler().lease_of(*request) != lease.scheduler_lease) continue;
    const bool here = std::any_of(lease.summary.placement.begin(), lease.summary.placement.end(),
                                  [&](const protocol::LeasePlacement& p) { return p.node_id == node_id; });
    if (here) leases_here.push_back(id);
  }
  // Collected first: ending a lease may prune ended ones from dev_leases_.all().
  for (std::uint64_t id : leases_here) {
    (void)bridge_.scheduler().cancel(bridge_.request_of(request_owner::DevLease{id}), to_scheduler_time(now));
    lease_node_lost(dev_leases_.all().at(id), node_id, now);
  }
  save(node);
  log(action::Severity::warn, fmt::format("node {} lost: silent for {} ms; {} jobs failed over", node_id,
                                          now - node.last_seen_ms, affected.size()));
}

}  // namespace kiln::coordinator

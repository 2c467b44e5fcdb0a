#include "coordinator/core/coordinator_core.h"

#include <algorithm>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace kiln::coordinator {

using protocol::JobState;
using protocol::NodeState;
using protocol::PriorityClass;
using protocol::Role;

namespace {

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

int priority_rank(PriorityClass cls) { return static_cast<int>(cls); }

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

CoordinatorCore::CoordinatorCore(CoordinatorKnobs knobs, Snapshot recovered, TimeMs now)
    : knobs_(knobs) {
  for (auto& node : recovered.nodes) {
    // A recovered node has no session yet: give it one liveness timeout to say hello.
    node.last_seen_ms = now;
    std::string id = node.summary.node_id;
    nodes_.emplace(id, std::move(node));
  }
  for (auto& job : recovered.jobs) {
    next_job_id_ = std::max(next_job_id_, job.summary.job_id + 1);
    if (!protocol::is_terminal(job.summary.state)) active_jobs_.insert(job.summary.job_id);
    jobs_.emplace(job.summary.job_id, std::move(job));
  }
  for (auto& [id, node] : nodes_) refresh_chip_counts(id);
  if (!recovered.nodes.empty() || !recovered.jobs.empty()) {
    log(action::Severity::info, fmt::format("recovered {} nodes and {} jobs ({} active) from the store",
                                            nodes_.size(), jobs_.size(), active_jobs_.size()));
  }
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
    dispatch(now);
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
  dispatch(now);
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
  if (node.summary.state != NodeState::quarantined) {
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
  for (std::uint64_t id : running) {
    auto it = jobs_.find(id);
    const bool ours = it != jobs_.end() && !protocol::is_terminal(it->second.summary.state) &&
                      it->second.summary.state != JobState::queued &&
                      it->second.summary.node_id == hello.node_id;
    if (!ours) {
      welcome.cancel_jobs.push_back(id);
    } else if (it->second.summary.state == JobState::assigned) {
      it->second.summary.state = JobState::running;
      save(it->second);
    }
  }
  std::vector<std::uint64_t> vanished;
  for (std::uint64_t id : active_jobs_) {
    const JobRecord& job = jobs_.at(id);
    if (job.summary.node_id == hello.node_id && job.summary.state != JobState::queued &&
        running.count(id) == 0 && finished.count(id) == 0) {
      vanished.push_back(id);
    }
  }
  for (std::uint64_t id : vanished) {
    attempt_lost(jobs_.at(id),
                 fmt::format("node {} re-registered without it (the agent restarted)", hello.node_id), now);
  }
  refresh_chip_counts(hello.node_id);
  save(node);
  to_agent(peer, welcome, m.header.id);
  log(action::Severity::info,
      fmt::format("node {} registered{} (revision {}, {} chips, agent {}, protocol v{}); running {}, "
                  "cancelling {}, lost {}",
                  hello.node_id, was_lost ? "" : " again", hello.hardware_revision, hello.chips.size(),
                  hello.agent_version, version, running.size(), welcome.cancel_jobs.size(), vanished.size()));
}

void CoordinatorCore::handle_heartbeat(const std::string& peer, const std::string& node_id,
                                       const protocol::Envelope& m, const protocol::Heartbeat& beat, TimeMs) {
  for (std::uint64_t id : beat.running_jobs) {
    auto it = jobs_.find(id);
    const bool ours = it != jobs_.end() && !protocol::is_terminal(it->second.summary.state) &&
                      it->second.summary.node_id == node_id;
    if (!ours) to_agent(peer, protocol::JobCancel{id, "the coordinator no longer assigns this job to this node"});
  }
  to_agent(peer, protocol::Heartbeat{}, m.header.id);
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
    if (current) {
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
      refresh_chip_counts(node_id);
      if (job.summary.workload == protocol::kDiagWorkload) apply_diag_result(node_id, job, now);
    } else {
      log(action::Severity::debug, fmt::format("ignoring a stale result for job {} attempt {} from node {}",
                                               fin.job_id, fin.attempt, node_id));
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
      outcome->level >= static_cast<int>(knobs_.quarantine_release_min_diag_level)) {
    node.summary.state = node.draining ? NodeState::draining : NodeState::up;
    node.summary.health = protocol::HealthStatus::pass;
    log(action::Severity::info, fmt::format("node {} leaves quarantine: level {} diagnostics {} (job {}); it was "
                                            "quarantined for: {}",
                                            node_id, outcome->level, outcome->verdict, job.summary.job_id,
                                            node.summary.quarantine_reason));
    node.summary.quarantine_reason.clear();
    node.summary.quarantine_owner.clear();
    save(node);
  }
}

void CoordinatorCore::quarantine(NodeRecord& node, const std::string& reason, const std::string& owner, TimeMs) {
  node.summary.state = NodeState::quarantined;
  node.summary.quarantine_reason = reason.substr(0, protocol::kMessageText.max_len);
  node.summary.quarantine_owner = owner;
  save(node);
  log(action::Severity::warn, fmt::format("node {} quarantined (owner {}): {}; it returns after passing level {} "
                                          "diagnostics",
                                          node.summary.node_id, owner, reason, knobs_.quarantine_release_min_diag_level));
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
          reply(protocol::WhoamiReply{caller.key_name, caller.role, protocol::kProtocolVersion, ""});
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
          handle_submit(client, caller, m, body, now);
        } else if constexpr (std::is_same_v<T, protocol::CancelJob>) {
          handle_cancel(client, caller, m, body, now);
        } else if constexpr (std::is_same_v<T, protocol::DrainNode>) {
          handle_drain(client, caller, m, body, now);
        } else {
          reply_error(client, corr, Errc::bad_message,
                      fmt::format("'{}' is not a request a client may send", T::kType));
        }
      },
      m.body);
  dispatch(now);
}

void CoordinatorCore::handle_submit(const std::string& client, const Caller& caller, const protocol::Envelope& m,
                                    const protocol::SubmitJob& submit, TimeMs now) {
  const bool maintenance = protocol::is_maintenance_workload(submit.workload);
  if (maintenance) {
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
  job.summary.job_id = next_job_id_++;
  job.summary.state = JobState::queued;
  job.summary.priority_class = submit.priority_class;
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
  // Maintenance takes the whole node: nothing else may share its chips while it runs.
  if (maintenance) job.summary.chips = nodes_.at(submit.node_id).summary.chips_total;
  job.submitted_at_ms = now;
  const std::uint64_t id = job.summary.job_id;
  active_jobs_.insert(id);
  auto& stored = jobs_[id] = std::move(job);
  save(stored);
  actions_.push_back(action::ToClient{client, protocol::JobAccepted{id}, m.header.id});
  log(action::Severity::info, fmt::format("job {} ({} on {} chips, {}) submitted by {}", id, submit.workload,
                                          submit.chips, protocol::enum_name(submit.priority_class),
                                          caller.key_name));
}

void CoordinatorCore::handle_cancel(const std::string& client, const Caller& caller, const protocol::Envelope& m,
                                    const protocol::CancelJob& cancel, TimeMs now) {
  auto it = jobs_.find(cancel.job_id);
  if (it == jobs_.end()) {
    reply_error(client, m.header.id, Errc::not_found, fmt::format("no job {}", cancel.job_id));
    return;
  }
  JobRecord& job = it->second;
  const bool privileged = caller.role == Role::ops || caller.role == Role::admin;
  if (!privileged && job.summary.submitted_by != caller.key_name) {
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
                                   const protocol::DrainNode& drain, TimeMs) {
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
  node.drain_reason = drain.drain ? drain.reason : "";
  if (node.summary.state == NodeState::up || node.summary.state == NodeState::draining) {
    node.summary.state = drain.drain ? NodeState::draining : NodeState::up;
  }
  save(node);
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
    finish(job, JobState::timed_out,
           fmt::format("no result from node {} within its timeout of {} ms", node_id, job.timeout_ms), now);
    refresh_chip_counts(node_id);
  }
  dispatch(now);
}

void CoordinatorCore::mark_node_lost(NodeRecord& node, TimeMs now) {
  const std::string node_id = node.summary.node_id;
  node.summary.state = NodeState::lost;
  if (auto peer = peer_by_node_.find(node_id); peer != peer_by_node_.end()) {
    sessions_.erase(peer->second);
    peer_by_node_.erase(peer);
  }
  std::vector<std::uint64_t> affected;
  for (std::uint64_t id : active_jobs_) {
    const JobRecord& job = jobs_.at(id);
    if (job.summary.node_id == node_id && job.summary.state != JobState::queued) affected.push_back(id);
  }
  for (std::uint64_t id : affected) {
    attempt_lost(jobs_.at(id),
                 fmt::format("node {} went silent for {} heartbeats", node_id, knobs_.liveness_missed_beats), now);
  }
  refresh_chip_counts(node_id);
  save(node);
  log(action::Severity::warn, fmt::format("node {} lost: silent for {} ms; {} jobs failed over", node_id,
                                          now - node.last_seen_ms, affected.size()));
}

// ---- job state machine ---------------------------------------------------------------------

void CoordinatorCore::attempt_lost(JobRecord& job, const std::string& why, TimeMs now) {
  const std::string node_id = job.summary.node_id;
  if (job.cancel_requested) {
    finish(job, JobState::cancelled, fmt::format("cancelled; attempt {} ended: {}", job.summary.attempt, why), now);
  } else if (job.summary.attempt < job.summary.max_attempts) {
    job.summary.state = JobState::queued;
    job.summary.detail = fmt::format("attempt {} lost: {}; requeued", job.summary.attempt, why);
    job.summary.chip_indices.clear();
    job.summary.node_id.clear();
    save(job);
    log(action::Severity::warn, fmt::format("job {}: {}", job.summary.job_id, job.summary.detail));
  } else {
    finish(job, JobState::lost, fmt::format("attempt {} of {} lost: {}", job.summary.attempt,
                                             job.summary.max_attempts, why), now);
  }
  refresh_chip_counts(node_id);
}

void CoordinatorCore::finish(JobRecord& job, JobState state, std::string detail, TimeMs now) {
  KILN_ASSERT(protocol::is_terminal(state), "finish() takes a terminal state");
  job.summary.state = state;
  job.summary.detail = std::move(detail);
  job.finished_at_ms = now;
  active_jobs_.erase(job.summary.job_id);
  save(job);
  log(state == JobState::succeeded ? action::Severity::info : action::Severity::warn,
      fmt::format("job {} {}: {}", job.summary.job_id, protocol::enum_name(state), job.summary.detail));
}

std::vector<bool> CoordinatorCore::chips_in_use(const std::string& node_id) const {
  std::vector<bool> used(64, false);
  for (std::uint64_t id : active_jobs_) {
    const JobRecord& job = jobs_.at(id);
    if (job.summary.node_id != node_id || job.summary.state == JobState::queued) continue;
    for (std::uint32_t chip : job.summary.chip_indices) used[chip] = true;
  }
  return used;
}

void CoordinatorCore::refresh_chip_counts(const std::string& node_id) {
  auto it = nodes_.find(node_id);
  if (it == nodes_.end()) return;
  auto used = chips_in_use(node_id);
  it->second.summary.chips_used = static_cast<std::uint32_t>(std::count(used.begin(), used.end(), true));
}

std::optional<std::vector<std::uint32_t>> CoordinatorCore::pick_chips(const NodeRecord& node,
                                                                      std::uint32_t count) const {
  auto used = chips_in_use(node.summary.node_id);
  // Prefer chips that share a NUMA node, so a multi-chip job does not straddle sockets.
  std::map<std::uint32_t, std::vector<std::uint32_t>> free_by_numa;
  for (const auto& chip : node.summary.chips) {
    if (chip.healthy && !used[chip.index]) free_by_numa[chip.numa_node].push_back(chip.index);
  }
  std::vector<std::uint32_t> best;
  for (const auto& [numa, chips] : free_by_numa) {
    if (chips.size() >= count && (best.empty() || chips.size() < best.size())) best = chips;
  }
  if (!best.empty()) return std::vector<std::uint32_t>(best.begin(), best.begin() + count);
  std::vector<std::uint32_t> any;
  for (const auto& [numa, chips] : free_by_numa) any.insert(any.end(), chips.begin(), chips.end());
  if (any.size() < count) return std::nullopt;
  std::sort(any.begin(), any.end());
  any.resize(count);
  return any;
}

void CoordinatorCore::dispatch(TimeMs now) {
  std::vector<std::uint64_t> queued;
  for (std::uint64_t id : active_jobs_) {
    if (jobs_.at(id).summary.state == JobState::queued) queued.push_back(id);
  }
  std::stable_sort(queued.begin(), queued.end(), [&](std::uint64_t a, std::uint64_t b) {
    return priority_rank(jobs_.at(a).summary.priority_class) < priority_rank(jobs_.at(b).summary.priority_class);
  });
  // A node with maintenance waiting drains first: it takes no new regular work.
  std::set<std::string> awaiting_maintenance;
  for (std::uint64_t id : queued) {
    const JobRecord& job = jobs_.at(id);
    if (protocol::is_maintenance_workload(job.summary.workload)) awaiting_maintenance.insert(job.requested_node_id);
  }
  for (std::uint64_t id : queued) {
    JobRecord& job = jobs_.at(id);
    const bool maintenance = protocol::is_maintenance_workload(job.summary.workload);
    for (auto& [node_id, node] : nodes_) {
      if (!node_has_session(node_id) || node.summary.state == NodeState::lost) continue;
      if (!maintenance && (node.summary.state != NodeState::up || awaiting_maintenance.count(node_id))) continue;
      if (!job.requested_node_id.empty() && job.requested_node_id != node_id) continue;
      if (!job.summary.hardware_revision.empty() && job.summary.hardware_revision != node.summary.hardware_revision) {
        continue;
      }
      auto chips = pick_chips(node, job.summary.chips);
      if (!chips) continue;
      job.summary.state = JobState::assigned;
      job.summary.node_id = node_id;
      job.summary.chip_indices = *chips;
      job.summary.attempt += 1;
      job.started_at_ms = now;
      refresh_chip_counts(node_id);
      save(job);
      protocol::JobStart start;
      start.job_id = id;
      start.attempt = job.summary.attempt;
      start.workload = job.summary.workload;
      start.args = job.summary.args;
      start.chip_indices = *chips;
      start.timeout_ms = job.timeout_ms;
      start.seed = job.seed;
      start.benchmark = job.benchmark;
      to_agent(peer_by_node_.at(node_id), start);
      log(action::Severity::info, fmt::format("job {} attempt {} dispatched to {} chips [{}]", id,
                                              job.summary.attempt, node_id, fmt::join(*chips, ",")));
      break;
    }
  }
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

}  // namespace kiln::coordinator

// Agent sessions: hello and its admission and inventory, heartbeats, health reports, quarantine
// and the diagnostics and installs that end it, draining, nodes lost.
#include "coordinator/core/agent_messages.h"

#include <algorithm>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/text/utf8.h"
#include "coordinator/core/core_rules.h"
#include "coordinator/core/rollouts.h"

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

// The diagnostics level whose checks see a fault of a check's category (docs/health.md, "Levels"):
// memory and interconnect faults the level 2 self-tests, faults that show under load (compute,
// thermal, power) only the level 3 compute stress.
std::uint32_t level_seeing(const std::string& category) {
  if (category == "memory" || category == "interconnect") return 2;
  if (category == "compute" || category == "thermal" || category == "power") return 3;
  return 1;
}

// The checks a level adds, for a quarantine reason that says what releases the node.
std::string_view checks_of_level(std::uint32_t level) {
  switch (level) {
    case 1: return "level 1 diagnostics (software, configuration and the probes)";
    case 2: return "level 2 diagnostics (adds the memory and interconnect self-tests)";
    default: return "level 3 diagnostics (adds the compute self-test, which checks results against known answers)";
  }
}

}  // namespace

std::optional<HelloTaken> AgentSessions::hello(const std::string& peer, const Caller& caller,
                                               const protocol::Envelope& m, const protocol::Hello& hello, TimeMs now) {
  const std::optional<std::uint32_t> version = admit_hello(peer, caller, m, hello);
  if (!version) return std::nullopt;
  // A node that registers again on a new connection replaces its old session.
  NodeRecord& node = ctx_.registry.open_session(peer, hello.node_id, *version);
  HelloTaken taken;
  taken.node_id = hello.node_id;
  taken.version = *version;
  taken.was_lost = node.summary.node_id.empty() || node.summary.state == NodeState::lost;
  take_inventory(node, hello, now);
  ctx_.bridge.node_changed(hello.node_id);

  // What the agent runs is reconciled with what this coordinator assigned to it (the router has
  // the job table do it), the answer going in the welcome.
  taken.welcome.protocol_version = *version;
  taken.welcome.heartbeat_interval_ms = ctx_.knobs.heartbeat_interval_ms;
  taken.welcome.liveness_missed_beats = ctx_.knobs.liveness_missed_beats;
  taken.running.insert(hello.running_jobs.begin(), hello.running_jobs.end());
  return taken;
}

void AgentSessions::welcome(const std::string& peer, const protocol::Envelope& m, const HelloTaken& taken) {
  ctx_.save(ctx_.registry.nodes().at(taken.node_id));
  ctx_.to_agent(peer, taken.welcome, m.header.id);
}

void AgentSessions::registered(const protocol::Hello& hello, const HelloTaken& taken, std::size_t jobs_lost) {
  ctx_.log(action::Severity::info,
           fmt::format("node {} registered{} (revision {}, {} chips, agent {}, protocol v{}); running {}, "
                       "cancelling {}, lost {}",
                       hello.node_id, taken.was_lost ? "" : " again", hello.hardware_revision, hello.chips.size(),
                       hello.agent_version, taken.version, taken.running.size(), taken.welcome.cancel_jobs.size(),
                       jobs_lost));
}

std::optional<std::string> AgentSessions::node_of_session(const std::string& peer, const protocol::Envelope& m,
                                                          TimeMs now) {
  const NodeRegistry::Session* session = ctx_.registry.session(peer);
  if (!session) {
    ctx_.to_agent(peer,
                  protocol::ErrorReply{std::string(to_string(Errc::not_registered)),
                                       "this connection has no session (the coordinator may have restarted); "
                                       "send hello to register",
                                       {}},
                  m.header.id);
    return std::nullopt;
  }
  ctx_.registry.heard_from(*session->node, now);
  return session->node_id;
}

std::optional<QuarantineTaken> AgentSessions::quarantine_request(const std::string& client, const Caller& caller,
                                                                 const protocol::Envelope& m,
                                                                 const protocol::QuarantineNode& request, TimeMs now) {
  NodeRecord* node = ctx_.registry.find(request.node_id);
  if (caller.role != Role::ci && caller.role != Role::lab && !privileged(caller.role)) {
    ctx_.reply_error(client, m.header.id, Errc::unauthorized,
                     fmt::format("role {} may not quarantine nodes; CI, lab, ops and admin keys may",
                                 protocol::enum_name(caller.role)));
    return std::nullopt;
  }
  if (!node) {
    ctx_.reply_error(client, m.header.id, Errc::not_found,
                     fmt::format("node {} is not registered; `kiln nodes` lists the nodes", request.node_id));
    return std::nullopt;
  }
  // Wrong results may be silent data corruption, which only the level 3 compute self-test sees.
  const std::uint32_t level = request.cause == protocol::QuarantineCause::wrong_results ? 3u : 1u;
  const std::string reason = request.reason + " (by " + caller.key_name + ")";
  QuarantineTaken taken;
  taken.client = client;
  taken.corr = m.header.id;
  taken.request = request;
  taken.fresh = node->summary.state != NodeState::quarantined;
  if (taken.fresh) {
    taken.follow_ups.emplace_back(quarantine(*node, reason, request.owner, level, now, &caller));
  } else {
    raise_release_level(*node, level, reason);
    node->summary.wrong_results_job_id = 0;  // another finding: only diagnostics see them all
    ctx_.save(*node);
  }
  return taken;
}

void AgentSessions::answer_quarantine(const QuarantineTaken& taken, const JobTable& jobs) {
  const protocol::QuarantineNode& request = taken.request;
  NodeRecord* node = ctx_.registry.find(request.node_id);
  KILN_ASSERT(node != nullptr, "a node quarantined stays registered");
  // Its wrong outputs alone: a correct rerun of that job there also releases it (not a flapping node).
  const JobRecord* failing = request.failing_job_id != 0 ? jobs.find(request.failing_job_id) : nullptr;
  if (taken.fresh && request.cause == protocol::QuarantineCause::wrong_results && failing != nullptr &&
      failing->summary.node_id == request.node_id && !failing->summary.chip_indices.empty() &&
      failing->summary.gang_size == 0 && node->recent_quarantines < 2) {
    node->summary.wrong_results_job_id = request.failing_job_id;
    node->summary.quarantine_reason = text::utf8_head(
        fmt::format("{}, or by a correct rerun of job {} there (kiln recheck {})", node->summary.quarantine_reason,
                    request.failing_job_id, request.node_id),
        protocol::kMessageText.max_len);
    ctx_.save(*node);
  }
  ctx_.sink.to_client(taken.client,
                      protocol::Ok{fmt::format("node {} is quarantined (owner {}); it returns after passing level {} "
                                               "diagnostics (kiln diag --node {} --level {})",
                                               request.node_id, node->summary.quarantine_owner,
                                               release_diag_level(*node), request.node_id, release_diag_level(*node))},
                      taken.corr);
}

std::optional<TimeMs> AgentSessions::next_deadline() const {
  const std::optional<TimeMs> deadline = ctx_.registry.next_liveness_deadline();
  if (!deadline) return std::nullopt;
  return *deadline + 1;
}

std::optional<std::uint32_t> AgentSessions::admit_hello(const std::string& peer, const Caller& caller,
                                                        const protocol::Envelope& m, const protocol::Hello& hello) {
  if (caller.key_name != hello.node_id) {
    ctx_.to_agent(peer,
                  protocol::ErrorReply{std::string(to_string(Errc::unauthorized)),
                                       fmt::format("key '{}' may only register as node '{}', not '{}'; give each "
                                                   "agent its own key named after its node id",
                                                   caller.key_name, caller.key_name, hello.node_id),
                                       {}},
                  m.header.id);
    ctx_.log(action::Severity::warn,
             fmt::format("refused hello from key '{}' claiming node '{}'", caller.key_name, hello.node_id));
    return std::nullopt;
  }
  std::uint32_t version = 0;
  for (std::uint32_t v : hello.protocol_versions) {
    if (protocol::is_supported_version(v)) version = std::max(version, v);
  }
  if (version == 0) {
    ctx_.to_agent(peer,
                  protocol::ErrorReply{std::string(to_string(Errc::unsupported_version)),
                                       "no protocol version in common; upgrade the agent or the coordinator",
                                       {protocol::kSupportedVersions.begin(), protocol::kSupportedVersions.end()}},
                  m.header.id);
    return std::nullopt;
  }
  // Hello is idempotent: a copy of a hello already taken (the network duplicated or delayed
  // it), or one from a connection a later hello replaced, describes the node as it was and
  // would end jobs started since. It is dropped.
  if (auto stale = ctx_.registry.stale_hello(hello.node_id, peer, m.header.id)) {
    ctx_.log(action::Severity::debug,
             fmt::format("ignoring hello {} from node {}: {}", m.header.id, hello.node_id, *stale));
    return std::nullopt;
  }
  return version;
}

void AgentSessions::take_inventory(NodeRecord& node, const protocol::Hello& hello, TimeMs now) {
  node.summary.node_id = hello.node_id;
  node.summary.hardware_revision = hello.hardware_revision;
  node.summary.agent_version = hello.agent_version;
  node.summary.driver_version = hello.driver_version;
  node.summary.chips = hello.chips;
  node.summary.chips_total = static_cast<std::uint32_t>(hello.chips.size());
  node.summary.host = hello.host;
  // An agent that names no address is reached at its host name, as most fleets resolve them.
  node.summary.rendezvous_address = hello.rendezvous_address.empty() ? hello.host.hostname : hello.rendezvous_address;
  node.summary.labels = hello.labels;
  ctx_.registry.inventory_taken(hello.node_id, hello.workloads);
  // A quarantine outlives the node being lost: only passing diagnostics ends it.
  if (!node.summary.quarantine_reason.empty()) {
    node.summary.state = NodeState::quarantined;
  } else {
    node.summary.state = node.draining ? NodeState::draining : NodeState::up;
  }
  ctx_.registry.heard_from(node, now);
}

NodeFollowUps AgentSessions::health_report(const std::string& node_id, const protocol::HealthReport& report,
                                          TimeMs now) {
  NodeRecord& node = ctx_.registry.nodes().at(node_id);
  // A failing probe measured before the diagnostics that released the node began says nothing
  // about the repaired node: it must not quarantine it again (nor count it as flapping).
  if (auto released = ctx_.registry.released_from_quarantine_at(node_id);
      report.verdict == protocol::HealthStatus::fail && report.measured_at_ms != 0 && released &&
      static_cast<TimeMs>(report.measured_at_ms) < *released) {
    ctx_.log(action::Severity::info, fmt::format("node {}: ignoring a failing health report measured {} ms before the "
                                                 "diagnostics that released it from quarantine",
                                                 node_id, *released - static_cast<TimeMs>(report.measured_at_ms)));
    return {};
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
    std::uint32_t level = 1;
    for (const auto& check : report.checks) {
      if (check.status == protocol::HealthStatus::fail) level = std::max(level, level_seeing(check.category));
    }
    return {quarantine(node, "health probe failed: " + node.summary.health_detail, "lab", level, now)};
  }
  if (changed) ctx_.save(node);
  return {};
}

NodeFollowUps AgentSessions::diagnostics_ended(const std::string& node_id, const JobRecord& job, TimeMs now) {
  if (job.summary.workload != protocol::kDiagWorkload) return {};
  auto it = ctx_.registry.nodes().find(node_id);
  if (it == ctx_.registry.nodes().end()) return {};
  NodeRecord& node = it->second;
  auto outcome = diag_outcome(job.result);
  if (!outcome) return {};
  const auto level = static_cast<std::uint32_t>(std::clamp(outcome->level, 1, 3));
  if (outcome->verdict == "fail") {
    // The checks that found the fault are the ones that must pass to release the node.
    const std::string reason = fmt::format("level {} diagnostics failed (job {})", level, job.summary.job_id);
    if (node.summary.state != NodeState::quarantined) return {quarantine(node, reason, "lab", level, now)};
    raise_release_level(node, level, reason);
    node.summary.wrong_results_job_id = 0;  // a fault the diagnostics see: only they release it
    ctx_.save(node);
    return {};
  }
  if (node.summary.state != NodeState::quarantined) return {};
  if (level < release_diag_level(node)) {
    // A weaker level cannot see the fault: its pass says nothing about it.
    const std::string refused =
        fmt::format("node {} stays quarantined: level {} diagnostics cannot clear its quarantine ({}); it needs "
                    "level {} (kiln diag {} --level {})",
                    node_id, level, node.summary.quarantine_reason, release_diag_level(node), node_id,
                    release_diag_level(node));
    ctx_.log(action::Severity::warn, refused);
    ctx_.audit("release_refused", "node " + node_id, fmt::format("job {}: {}", job.summary.job_id, refused));
    return {node_follow_up::NoteOnJob{job.summary.job_id, refused}};
  }
  return {release_from_quarantine(
      node, fmt::format("level {} diagnostics {} (job {})", outcome->level, outcome->verdict, job.summary.job_id),
      job)};
}

node_follow_up::StatesChanged AgentSessions::release_from_quarantine(NodeRecord& node, const std::string& how,
                                                                     const JobRecord& job) {
  const std::string& node_id = node.summary.node_id;
  node.summary.state = node.draining ? NodeState::draining : NodeState::up;
  node.summary.health = protocol::HealthStatus::pass;
  ctx_.log(action::Severity::info, fmt::format("node {} leaves quarantine: {}; it was quarantined for: {}", node_id,
                                               how, node.summary.quarantine_reason));
  ctx_.audit("released_from_quarantine", "node " + node_id,
             fmt::format("{}; it was quarantined for: {}", how, node.summary.quarantine_reason));
  node.summary.quarantine_reason.clear();
  node.summary.quarantine_owner.clear();
  node.summary.release_diag_level = 0;
  node.summary.wrong_results_job_id = 0;
  ctx_.registry.released_from_quarantine(node_id, job.started_at_ms + ctx_.clock.wall_offset_ms());
  ctx_.save(node);
  return {};
}

NodeFollowUps AgentSessions::install_ended(const std::string& node_id, const JobRecord& job, TimeMs now) {
  if (job.summary.workload != protocol::kInstallWorkload) return {};
  auto it = ctx_.registry.nodes().find(node_id);
  if (it == ctx_.registry.nodes().end()) return {};
  NodeRecord& node = it->second;
  // The install report says whether the node may take work (docs/health.md); a node whose
  // stack may be half-installed never does, whatever the job's exit code says.
  auto doc = nlohmann::json::parse(job.result, nullptr, /*allow_exceptions=*/false);
  // The report comes from the node: a member of the wrong type is no report, never a throw.
  const auto text_of = [&](const char* key) {
    const auto member = doc.is_object() ? doc.find(key) : doc.end();
    return member != doc.end() && member->is_string() ? member->get<std::string>() : std::string();
  };
  const auto fit_member = doc.is_object() ? doc.find("fit_for_work") : doc.end();
  const bool fit = fit_member != doc.end() && fit_member->is_boolean() && fit_member->get<bool>();
  const std::string reason = text_of("reason").empty() ? std::string("no install report") : text_of("reason");
  const std::string outcome = text_of("outcome");
  // The outcomes of docs/health.md; anything else from the node is no report.
  static const std::set<std::string> kOutcomes = {"installed",     "already_installed", "refused",
                                                  "not_installed", "rolled_back",       "quarantined"};
  ctx_.audit(kOutcomes.count(outcome) != 0 ? "install_" + outcome : "install_failed", "node " + node_id,
             fmt::format("job {} by {}: {} {}{}", job.summary.job_id, job.summary.submitted_by, text_of("kind"),
                         text_of("version"),
                         kOutcomes.count(outcome) == 0 ? ": " + reason + "; " + job.summary.detail
                         : text_of("reason").empty()   ? std::string()
                                                       : ": " + text_of("reason")));
  if (!fit && node.summary.state != NodeState::quarantined) {
    return {quarantine(node, fmt::format("install job {} left the node unfit for work: {}", job.summary.job_id, reason),
                       "ops", 1, now)};
  }
  if (job.summary.state == JobState::succeeded && (outcome == "installed" || outcome == "already_installed")) {
    // What the node runs now, until its next hello reads it from the driver again.
    const std::string version = text_of("version");
    if (text_of("kind") == "firmware" && !version.empty()) {
      for (auto& chip : node.summary.chips) {
        if (!chip.firmware_version.empty()) chip.firmware_version = version;
      }
    } else if (text_of("kind") == "driver" && !version.empty()) {
      node.summary.driver_version = version;
    }
    ctx_.save(node);
    return {};
  }
  // A node that does not converge on its environment's bundle takes no work until someone looked.
  if (job.summary.submitted_by == kRolloutSubmitter && node.summary.state != NodeState::quarantined) {
    return {quarantine(node,
                       fmt::format("did not converge on bundle {}: install job {} {}: {}",
                                   job.summary.bundle_id.substr(0, 12), job.summary.job_id,
                                   outcome.empty() ? "failed" : outcome,
                                   text_of("reason").empty() ? job.summary.detail : text_of("reason")),
                       "ops", 1, now)};
  }
  return {};
}

std::uint32_t AgentSessions::release_diag_level(const NodeRecord& node) const {
  // A node quarantined before the level was kept with it: the knob's, or 3 when flapping.
  const std::uint32_t fallback = node.recent_quarantines >= 2 ? 3u : ctx_.knobs.quarantine_release_min_diag_level;
  return node.summary.release_diag_level != 0 ? node.summary.release_diag_level : fallback;
}

void AgentSessions::raise_release_level(NodeRecord& node, std::uint32_t level, const std::string& reason) {
  if (level <= release_diag_level(node)) return;
  node.summary.release_diag_level = level;
  node.summary.quarantine_reason = text::utf8_head(
      fmt::format("{}; also {}; released by {}", node.summary.quarantine_reason, reason, checks_of_level(level)),
      protocol::kMessageText.max_len);
  ctx_.save(node);
  ctx_.audit("quarantine_raised", "node " + node.summary.node_id,
             fmt::format("{}: it now returns after passing level {} diagnostics", reason, level));
}

node_follow_up::Quarantined AgentSessions::quarantine(NodeRecord& node, const std::string& reason,
                                                     const std::string& owner, std::uint32_t release_level, TimeMs now,
                                                     const Caller* by) {
  node.summary.state = NodeState::quarantined;
  ctx_.bridge.node_changed(node.summary.node_id);
  if (node.recent_quarantines == 0 || now - node.flap_window_start_ms > ctx_.knobs.flap_window_ms) {
    node.recent_quarantines = 0;
    node.flap_window_start_ms = now;
  }
  node.recent_quarantines += 1;
  const bool flapping = node.recent_quarantines >= 2;
  node.summary.release_diag_level =
      std::max({release_level, ctx_.knobs.quarantine_release_min_diag_level, flapping ? 3u : 1u});
  const std::string cause = flapping ? fmt::format("{} (quarantined {} times in {} h: flapping)", reason,
                                                   node.recent_quarantines, ctx_.knobs.flap_window_ms / 3600000)
                                     : reason;
  // The reason says what releases the node: the checks that can see what quarantined it.
  const std::string why = fmt::format("{}; released by {}", cause.empty() ? "quarantined" : cause,
                                      checks_of_level(node.summary.release_diag_level));
  // A non-empty reason is what marks the quarantine across a lost node's return (handle_hello).
  node.summary.quarantine_reason = text::utf8_head(why, protocol::kMessageText.max_len);
  node.summary.quarantine_owner = owner;
  ctx_.save(node);
  ctx_.log(action::Severity::warn, fmt::format("node {} quarantined (owner {}): {}", node.summary.node_id, owner, why));
  const std::string audited = fmt::format("owner {}: {}", owner, node.summary.quarantine_reason);
  if (by != nullptr) {
    ctx_.audit(*by, "quarantined", "node " + node.summary.node_id, audited);
  } else {
    ctx_.audit("quarantined", "node " + node.summary.node_id, audited);
  }
  return node_follow_up::Quarantined{node.summary.node_id};
}

std::optional<DrainTaken> AgentSessions::drain(const std::string& client, const Caller& caller,
                                               const protocol::Envelope& m, const protocol::DrainNode& drain) {
  if (caller.role != Role::ops && caller.role != Role::lab && caller.role != Role::admin) {
    ctx_.reply_error(
        client, m.header.id, Errc::unauthorized,
        fmt::format("role {} may not drain nodes; ask ops, lab or admin", protocol::enum_name(caller.role)));
    return std::nullopt;
  }
  auto it = ctx_.registry.nodes().find(drain.node_id);
  if (it == ctx_.registry.nodes().end()) {
    ctx_.reply_error(client, m.header.id, Errc::not_found,
                     fmt::format("node {} is not registered; `kiln nodes` lists the nodes", drain.node_id));
    return std::nullopt;
  }
  NodeRecord& node = it->second;
  node.draining = drain.drain;
  node.drain_reason = drain.drain ? (drain.reason.empty() ? "drained by " + caller.key_name : drain.reason) : "";
  if (node.summary.state == NodeState::up || node.summary.state == NodeState::draining) {
    node.summary.state = drain.drain ? NodeState::draining : NodeState::up;
  }
  ctx_.save(node);
  DrainTaken taken;
  taken.client = client;
  taken.corr = m.header.id;
  taken.follow_ups.emplace_back(node_follow_up::StatesChanged{});
  taken.caller = caller;
  taken.drain = drain;
  return taken;
}

void AgentSessions::answer_drain(const DrainTaken& taken) {
  const protocol::DrainNode& drain = taken.drain;
  ctx_.sink.push(action::ToClient{taken.client, protocol::Ok{drain.drain ? "draining" : "resumed"}, taken.corr});
  ctx_.log(action::Severity::info, fmt::format("node {} {} by {}{}", drain.node_id, drain.drain ? "drained" : "resumed",
                                               taken.caller.key_name, drain.reason.empty() ? "" : ": " + drain.reason));
  ctx_.audit(taken.caller, drain.drain ? "drained" : "undrained", "node " + drain.node_id, drain.reason);
}

void AgentSessions::lose(const std::string& node_id) {
  ctx_.registry.nodes().at(node_id).summary.state = NodeState::lost;
  ctx_.registry.close_session(node_id);
  ctx_.bridge.node_changed(node_id);
}

void AgentSessions::loss_recorded(const std::string& node_id, std::size_t failed_over, TimeMs now) {
  const NodeRecord& node = ctx_.registry.nodes().at(node_id);
  ctx_.save(node);
  ctx_.log(action::Severity::warn, fmt::format("node {} lost: silent for {} ms; {} jobs failed over", node_id,
                                               now - node.last_seen_ms, failed_over));
}

}  // namespace kiln::coordinator

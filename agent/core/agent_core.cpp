#include "agent/core/agent_core.h"

#include <algorithm>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/protocol/session_rules.h"

namespace kiln::agent {
namespace {

// Jobs and the agent's own work share one table; their owner names never collide.
std::string job_owner(std::uint64_t job_id) { return fmt::format("job:{}", job_id); }
std::string own_work_owner(const std::string& owner) { return "own:" + owner; }

// What a successful install changed (its report, docs/health.md), so the next hello says what the
// node runs now: a stale hello would make a rollout install the same package again.
void apply_install_report(AgentIdentity& identity, const std::string& report) {
  const auto doc = nlohmann::json::parse(report, nullptr, /*allow_exceptions=*/false);
  if (!doc.is_object()) return;
  const auto text_of = [&](const char* key) {
    const auto it = doc.find(key);
    return it != doc.end() && it->is_string() ? it->get<std::string>() : std::string();
  };
  const std::string version = text_of("version");
  if (version.empty() || (text_of("outcome") != "installed" && text_of("outcome") != "already_installed")) return;
  if (text_of("kind") == "driver") identity.driver_version = version;
  if (text_of("kind") == "firmware") {
    for (protocol::ChipInfo& chip : identity.chips) {
      if (!chip.firmware_version.empty()) chip.firmware_version = version;
    }
  }
}

}  // namespace

AgentCore::AgentCore(AgentIdentity identity, SessionKnobs knobs)
    : identity_(std::move(identity)),
      knobs_(knobs),
      heartbeat_interval_ms_(knobs.heartbeat_interval_ms),
      liveness_missed_beats_(knobs.liveness_missed_beats),
      backoff_ms_(knobs.reconnect_backoff_initial_ms),
      jitter_(stats::derive_seed(stats::stable_hash(identity_.node_id), stats::stable_hash("reconnect jitter"))) {}

void AgentCore::on_start(TimeMs now) { connect(now); }

std::optional<Action> AgentCore::poll_action() {
  if (actions_.empty()) return std::nullopt;
  Action a = std::move(actions_.front());
  actions_.pop_front();
  return a;
}

std::optional<TimeMs> AgentCore::next_deadline() const {
  if (reconnect_at_) return *reconnect_at_;
  if (state_ == SessionState::disconnected) return std::nullopt;
  const TimeMs silent_at = coordinator_last_seen_ + heartbeat_interval_ms_ * liveness_missed_beats_ + 1;
  if (state_ == SessionState::registering) return silent_at;
  TimeMs next = std::min(next_heartbeat_at_, silent_at);
  if (!probe_running_ && installs_running_.empty()) next = std::min(next, next_probe_at_);
  return next;
}

std::vector<std::uint64_t> AgentCore::running_jobs() const {
  std::vector<std::uint64_t> ids;
  for (const auto& [id, attempt] : running_) ids.push_back(id);
  return ids;
}

void AgentCore::connect(TimeMs now) {
  reconnect_at_.reset();
  connection_dropped_ = false;
  hellos_on_open_connection_ = 0;
  actions_.push_back(action::Connect{});
  send_hello(now);
}

void AgentCore::on_connection_lost() { connection_dropped_ = true; }

bool AgentCore::hello_on_open_connection_next() const { return retry_on_open_connection_ && !connection_dropped_; }

void AgentCore::send_hello(TimeMs now) {
  protocol::Hello hello;
  hello.node_id = identity_.node_id;
  hello.hardware_revision = identity_.hardware_revision;
  hello.agent_version = identity_.agent_version;
  hello.driver_version = identity_.driver_version;
  hello.protocol_versions.assign(protocol::kSupportedVersions.begin(), protocol::kSupportedVersions.end());
  hello.chips = identity_.chips;
  hello.host = identity_.host;
  hello.workloads = identity_.workloads;
  hello.rendezvous_address = identity_.rendezvous_address;
  hello.labels = identity_.labels;
  hello.running_jobs = running_jobs();
  for (const auto& [id, fin] : unacked_) hello.finished_jobs.push_back(id);
  state_ = SessionState::registering;
  // The hello itself starts the clock: no welcome within the liveness window means try again.
  coordinator_last_seen_ = now;
  last_hello_id_ = next_message_id_;
  send(std::move(hello));
}

void AgentCore::schedule_reconnect(TimeMs now, const std::string& why, bool on_open_connection) {
  // Jittered, so that the agents of a coordinator that stalled are not all back in the same
  // second: a registered session that went silent tries again anywhere within half a liveness
  // window (the coordinator gives every node a fresh one when its loop resumes), later tries
  // between half and all of the backoff.
  const bool was_registered = state_ == SessionState::registered;
  state_ = SessionState::disconnected;
  const DurationMs liveness_ms = heartbeat_interval_ms_ * liveness_missed_beats_;
  const DurationMs wait_ms =
      was_registered ? static_cast<DurationMs>(jitter_.uniform01() * static_cast<double>(std::max(backoff_ms_, liveness_ms / 2)))
                     : backoff_ms_ / 2 + static_cast<DurationMs>(jitter_.uniform01() * static_cast<double>(backoff_ms_ - backoff_ms_ / 2));
  // A few hellos go on the open connection; a coordinator silent through all of them may be hung
  // with a standby taking over, so then, and after a dropped connection, a new one is opened.
  retry_on_open_connection_ = on_open_connection && hellos_on_open_connection_ < protocol::kHellosOnOpenConnection;
  reconnect_at_ = now + wait_ms;
  log(action::Severity::warn, fmt::format("{}; {} in {} ms", why,
                                          hello_on_open_connection_next()
                                              ? "saying hello again on the open connection"
                                              : "reconnecting",
                                          wait_ms));
  backoff_ms_ = std::min(backoff_ms_ * 2, knobs_.reconnect_backoff_max_ms);
}

void AgentCore::on_tick(TimeMs now) {
  if (reconnect_at_ && now >= *reconnect_at_) {
    if (hello_on_open_connection_next()) {
      reconnect_at_.reset();
      ++hellos_on_open_connection_;
      send_hello(now);
    } else {
      connect(now);
    }
    return;
  }
  if (state_ == SessionState::disconnected) return;
  const DurationMs silence_ms = now - coordinator_last_seen_;
  if (silence_ms > heartbeat_interval_ms_ * liveness_missed_beats_) {
    schedule_reconnect(now, state_ == SessionState::registering
                                ? fmt::format("no welcome from the coordinator within {} ms", silence_ms)
                                : fmt::format("the coordinator has been silent for {} ms", silence_ms),
                       true);
    return;
  }
  if (state_ == SessionState::registered && now >= next_heartbeat_at_) {
    send(protocol::Heartbeat{running_jobs()});
    next_heartbeat_at_ = now + heartbeat_interval_ms_;
  }
  if (state_ == SessionState::registered && !probe_running_ && installs_running_.empty() && now >= next_probe_at_) {
    probe_running_ = true;
    actions_.push_back(action::RunProbe{});
  }
}

void AgentCore::on_probe_result(protocol::HealthReport report, TimeMs measured_at_wall_ms, TimeMs now) {
  report.measured_at_ms = static_cast<std::uint64_t>(measured_at_wall_ms);
  probe_running_ = false;
  next_probe_at_ = now + knobs_.probe_interval_ms;
  if (std::exchange(install_during_probe_, false) || !installs_running_.empty()) {
    log(action::Severity::info, "a health probe measured while an install ran is not reported; the install's own "
                                "check decides the node's health");
    return;
  }
  if (report.verdict == protocol::HealthStatus::fail) {
    log(action::Severity::warn, fmt::format("health probe failed ({} checks)", report.checks.size()));
  }
  if (state_ == SessionState::registered) send(report);
}

void AgentCore::on_message(const protocol::Envelope& m, TimeMs now) {
  // Any traffic from the coordinator counts as liveness, and shows the connection works.
  coordinator_last_seen_ = now;
  connection_dropped_ = false;
  std::visit(
      [&](const auto& body) {
        using T = std::decay_t<decltype(body)>;
        if constexpr (std::is_same_v<T, protocol::Welcome>) {
          // The answer to a hello before the newest one sent on this connection: the coordinator
          // reconciles by the newest, so jobs started after this welcome are not the agent's.
          if (m.header.corr != 0 && m.header.corr < last_hello_id_) {
            log(action::Severity::debug,
                fmt::format("ignoring the welcome to hello {}: hello {} is newer", m.header.corr, last_hello_id_));
            return;
          }
          state_ = SessionState::registered;
          // A welcome that arrives after its hello was given up on still counts.
          reconnect_at_.reset();
          hellos_on_open_connection_ = 0;
          heartbeat_interval_ms_ = body.heartbeat_interval_ms;
          liveness_missed_beats_ = body.liveness_missed_beats;
          backoff_ms_ = knobs_.reconnect_backoff_initial_ms;
          next_heartbeat_at_ = now + heartbeat_interval_ms_;
          for (std::uint64_t id : body.cancel_jobs) {
            if (running_.count(id)) {
              actions_.push_back(action::CancelJob{id, "the coordinator no longer assigns it to this node"});
            }
          }
          // Results kept while disconnected go out now; each is dropped once acknowledged.
          for (const auto& [id, fin] : unacked_) send(fin);
          log(action::Severity::info,
              fmt::format("registered with the coordinator (protocol v{}, heartbeat {} ms); {} results resent, "
                          "{} jobs cancelled",
                          body.protocol_version, body.heartbeat_interval_ms, unacked_.size(), body.cancel_jobs.size()));
        } else if constexpr (std::is_same_v<T, protocol::Heartbeat>) {
          // The answer to a heartbeat sent before the silence: the session lives, so the hello
          // waiting to go on this connection is not needed.
          if (state_ == SessionState::disconnected && hello_on_open_connection_next()) {
            reconnect_at_.reset();
            state_ = SessionState::registered;
            log(action::Severity::info, "the coordinator answered again; the session goes on");
          }
        } else if constexpr (std::is_same_v<T, protocol::JobStart>) {
          if (state_ == SessionState::registered) handle_job_start(body, now);
        } else if constexpr (std::is_same_v<T, protocol::JobCancel>) {
          if (running_.count(body.job_id)) actions_.push_back(action::CancelJob{body.job_id, body.reason});
        } else if constexpr (std::is_same_v<T, protocol::JobPreempt>) {
          if (running_.count(body.job_id)) {
            actions_.push_back(action::NotifyPreemption{body.job_id, body.grace_ms});
            log(action::Severity::info, fmt::format("job {}: preemption notice, {} ms to checkpoint: {}", body.job_id,
                                                    body.grace_ms, body.reason));
          }
        } else if constexpr (std::is_same_v<T, protocol::JobFinishedAck>) {
          auto it = unacked_.find(body.job_id);
          if (it != unacked_.end() && it->second.attempt == body.attempt) unacked_.erase(it);
        } else if constexpr (std::is_same_v<T, protocol::ErrorReply>) {
          if (body.code == to_string(Errc::not_registered)) {
            // One hello at a time: a second one could cross a job_start sent after the first
            // welcome and make the coordinator think that job vanished.
            if (state_ != SessionState::registering) {
              log(action::Severity::info, "the coordinator does not know this session; registering again");
              send_hello(now);
            }
          } else if (body.code == to_string(Errc::standby)) {
            // Another coordinator listed leads the store: the next session tries it.
            schedule_reconnect(now, fmt::format("the coordinator is a standby: {}", body.message), false);
          } else if (state_ == SessionState::registering) {
            // Refused registration (wrong key name, no common version): retrying soon would only
            // repeat it, so wait the longest backoff.
            backoff_ms_ = knobs_.reconnect_backoff_max_ms;
            schedule_reconnect(now, fmt::format("the coordinator refused registration: {}: {}", body.code,
                                                body.message),
                               false);
          } else {
            log(action::Severity::warn,
                fmt::format("the coordinator refused message {}: {}: {}", m.header.corr, body.code, body.message));
          }
        } else {
          send(protocol::ErrorReply{std::string(to_string(Errc::bad_message)),
                                    fmt::format("'{}' is not a message the coordinator may send to an agent",
                                                T::kType),
                                    {}},
               m.header.id);
        }
      },
      m.body);
}

void AgentCore::handle_job_start(const protocol::JobStart& start, TimeMs) {
  if (auto it = running_.find(start.job_id); it != running_.end()) {
    // Still running an earlier attempt the coordinator gave up on (say, after a partition):
    // the process is the same job with the same inputs, so it carries on as the new attempt.
    if (start.attempt > it->second) {
      log(action::Severity::info, fmt::format("job {}: attempt {} continues the running attempt {}", start.job_id,
                                              start.attempt, it->second));
      it->second = start.attempt;
      send(protocol::JobStarted{start.job_id, start.attempt});
    }
    return;  // otherwise a duplicate delivery
  }
  if (static_cast<std::int64_t>(running_.size()) >= knobs_.max_concurrent_jobs) {
    refuse_start(start, fmt::format("node {} already runs {} jobs, its max_concurrent_jobs", identity_.node_id,
                                    running_.size()));
    return;
  }
  for (std::uint32_t chip : start.chip_indices) {
    if (chip >= identity_.chips.size()) {
      refuse_start(start, fmt::format("chip {} does not exist on node {} ({} chips)", chip, identity_.node_id,
                                      identity_.chips.size()));
      return;
    }
  }
  const std::string description = fmt::format("job {} attempt {} ({})", start.job_id, start.attempt, start.workload);
  if (auto claimed = owners_.claim(job_owner(start.job_id), description, start.chip_indices); !claimed) {
    refuse_start(start, fmt::format("node {} did not start it: {}; submit it again once they are free",
                                    identity_.node_id, claimed.error().message));
    return;
  }
  running_[start.job_id] = start.attempt;
  if (start.workload == protocol::kInstallWorkload) {
    installs_running_.insert(start.job_id);
    install_during_probe_ = install_during_probe_ || probe_running_;
  }
  actions_.push_back(action::StartJob{start});
  send(protocol::JobStarted{start.job_id, start.attempt});
  log(action::Severity::info, fmt::format("job {} attempt {}: starting {} on chips [{}]", start.job_id, start.attempt,
                                          start.workload, fmt::join(start.chip_indices, ",")));
}

void AgentCore::refuse_start(const protocol::JobStart& start, std::string detail) {
  protocol::JobFinished refused;
  refused.job_id = start.job_id;
  refused.attempt = start.attempt;
  refused.outcome = protocol::JobOutcome::failed_to_start;
  refused.exit_code = -1;
  refused.detail = std::move(detail);
  log(action::Severity::warn,
      fmt::format("job {} attempt {} refused: {}", start.job_id, start.attempt, refused.detail));
  unacked_[start.job_id] = refused;
  send(refused);
}

Status AgentCore::claim_chips(const std::string& owner, const std::string& description,
                              const std::vector<std::uint32_t>& chips) {
  return owners_.claim(own_work_owner(owner), description, chips);
}

void AgentCore::release_chips(const std::string& owner) { owners_.release(own_work_owner(owner)); }

std::vector<std::uint32_t> AgentCore::chip_indices() const {
  std::vector<std::uint32_t> indices;
  for (const protocol::ChipInfo& chip : identity_.chips) indices.push_back(chip.index);
  return indices;
}

void AgentCore::on_job_ended(const JobEnded& ended, TimeMs) {
  auto it = running_.find(ended.job_id);
  if (it == running_.end()) return;
  owners_.release(job_owner(ended.job_id));
  protocol::JobFinished fin;
  fin.job_id = ended.job_id;
  fin.attempt = it->second;
  fin.outcome = ended.outcome;
  fin.exit_code = ended.exit_code;
  fin.duration_ms = ended.duration_ms;
  fin.output_tail = ended.output_tail;
  fin.result = ended.result;
  fin.detail = ended.detail;
  running_.erase(it);
  if (installs_running_.erase(ended.job_id) != 0 && ended.outcome == protocol::JobOutcome::succeeded) {
    apply_install_report(identity_, ended.result);
  }
  unacked_[fin.job_id] = fin;
  log(action::Severity::info, fmt::format("job {} attempt {} ended: {} (exit code {}, {} ms)", fin.job_id,
                                          fin.attempt, protocol::enum_name(fin.outcome), fin.exit_code,
                                          fin.duration_ms));
  if (state_ == SessionState::registered) send(fin);
}

void AgentCore::send(protocol::Body body, std::uint64_t corr) {
  actions_.push_back(action::Send{std::move(body), next_message_id_++, corr});
}

void AgentCore::refuse_message(protocol::ErrorReply reply, std::uint64_t corr) { send(std::move(reply), corr); }

void AgentCore::log(action::Severity severity, std::string text) {
  actions_.push_back(action::Log{severity, std::move(text)});
}

}  // namespace kiln::agent

// The agent's pure core: its session with the coordinator (register, heartbeat, notice a
// silent coordinator, reconnect with backoff) and the jobs it runs (start, cancel, report,
// keep each result until the coordinator acknowledges it). Events and `now` in, actions
// out; the shell owns the socket, the processes and the clock.
#pragma once

#include <deque>
#include <map>
#include <set>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "agent/core/chip_owners.h"
#include "common/enum_names.h"
#include "common/protocol/codec.h"
#include "common/stats/rng.h"
#include "common/time.h"

namespace kiln::agent {

struct AgentIdentity {
  std::string node_id;
  std::string hardware_revision;
  std::string agent_version;
  std::string driver_version;
  std::vector<protocol::ChipInfo> chips;
  protocol::HostInfo host;
  std::vector<std::string> workloads;  // what it runs besides the built-ins, by name
  std::string rendezvous_address;      // where other nodes reach its workloads
  std::vector<std::string> labels;     // key=value, what environments select it by
};

struct SessionKnobs {
  DurationMs heartbeat_interval_ms = 1000;
  std::int64_t liveness_missed_beats = 4;
  DurationMs reconnect_backoff_initial_ms = 500;
  DurationMs reconnect_backoff_max_ms = 30000;
  std::int64_t max_concurrent_jobs = 8;
  DurationMs probe_interval_ms = 60000;
};

namespace action {
// Drop the current connection (if any) and open a new one.
struct Connect {};
// The core numbers what it sends (the header id), so it can tell which hello a welcome answers.
struct Send {
  protocol::Body body;
  std::uint64_t id = 0;
  std::uint64_t corr = 0;
};
struct StartJob {
  protocol::JobStart job;
};
struct CancelJob {
  std::uint64_t job_id = 0;
  std::string reason;
};
// Run the health probes once (in a child process); report with on_probe_result, with the
// wall time the probe began.
struct RunProbe {};
// Tell the workload it is being preempted (SIGUSR1): it should checkpoint and exit.
struct NotifyPreemption {
  std::uint64_t job_id = 0;
  std::uint32_t grace_ms = 0;
};
enum class Severity { debug, info, warn, error };
struct Log {
  Severity severity = Severity::info;
  std::string text;
};
}  // namespace action

using Action = std::variant<action::Connect, action::Send, action::StartJob, action::CancelJob,
                            action::NotifyPreemption, action::RunProbe, action::Log>;

// How a job's process ended, as the shell reports it.
struct JobEnded {
  std::uint64_t job_id = 0;
  protocol::JobOutcome outcome = protocol::JobOutcome::failed;
  std::int32_t exit_code = 0;
  std::uint64_t duration_ms = 0;
  std::string output_tail;
  std::string result;
  std::string detail;
};

class AgentCore {
 public:
  enum class SessionState { disconnected, registering, registered };
  friend constexpr EnumTable<SessionState, 3> enum_names(SessionState) {
    return {{
        {SessionState::disconnected, "disconnected"},
        {SessionState::registering, "registering"},
        {SessionState::registered, "registered"},
    }};
  }

  AgentCore(AgentIdentity identity, SessionKnobs knobs);

  void on_start(TimeMs now);
  void on_message(const protocol::Envelope& message, TimeMs now);
  void on_job_ended(const JobEnded& ended, TimeMs now);
  // measured_at_wall_ms: when the probe began, on the wall clock (ms since the epoch); the
  // report carries it, so the coordinator can ignore one measured before a repair.
  void on_probe_result(protocol::HealthReport report, TimeMs measured_at_wall_ms, TimeMs now);
  void on_tick(TimeMs now);
  // The transport saw the connection to the coordinator drop (or a connection attempt refused):
  // the next try opens a new connection, to the next coordinator listed, rather than saying
  // hello again on this one.
  void on_connection_lost();
  // A message from the coordinator that could not be decoded is answered with this error.
  void refuse_message(protocol::ErrorReply reply, std::uint64_t corr);

  std::optional<Action> poll_action();
  std::optional<TimeMs> next_deadline() const;

  // Work the agent runs for itself (diagnostics asked on the local socket) takes its chips
  // from the same table as the jobs, so nothing runs beside it and it runs beside nothing.
  // The error names who holds the busy chips.
  Status claim_chips(const std::string& owner, const std::string& description, const std::vector<std::uint32_t>& chips);
  void release_chips(const std::string& owner);
  // Every chip index of the node, the ones reported unhealthy included.
  std::vector<std::uint32_t> chip_indices() const;

  SessionState session_state() const { return state_; }
  std::vector<std::uint64_t> running_jobs() const;
  std::size_t unacknowledged_results() const { return unacked_.size(); }

 private:
  void connect(TimeMs now);
  void send_hello(TimeMs now);
  void send(protocol::Body body, std::uint64_t corr = 0);
  void log(action::Severity severity, std::string text);
  // on_open_connection: whether the next try may say hello again on the open connection.
  void schedule_reconnect(TimeMs now, const std::string& why, bool on_open_connection);
  // Whether the scheduled try says hello on the open connection rather than opening a new one.
  bool hello_on_open_connection_next() const;
  void handle_job_start(const protocol::JobStart& start, TimeMs now);
  // Answers a job_start it will not run with job_finished{failed_to_start}, kept until acked.
  void refuse_start(const protocol::JobStart& start, std::string detail);

  AgentIdentity identity_;
  SessionKnobs knobs_;
  SessionState state_ = SessionState::disconnected;
  DurationMs heartbeat_interval_ms_;
  std::int64_t liveness_missed_beats_;
  DurationMs backoff_ms_;
  stats::Rng jitter_;  // seeded by the node's name: agents differ, a replay of one does not
  TimeMs coordinator_last_seen_ = 0;
  TimeMs next_heartbeat_at_ = 0;
  std::optional<TimeMs> reconnect_at_;
  // A coordinator that stalled still holds the connection: a hello on it costs no new CURVE
  // handshake, which is what a whole fleet reconnecting at once would swamp it with.
  bool retry_on_open_connection_ = false;
  int hellos_on_open_connection_ = 0;  // since the last welcome or new connection
  bool connection_dropped_ = false;
  std::uint64_t next_message_id_ = 1;
  std::uint64_t last_hello_id_ = 0;
  TimeMs next_probe_at_ = 0;
  bool probe_running_ = false;
  // While an install swaps firmware or a driver, the probes would measure the node half way;
  // the install's own check decides its health, so no probe runs then and none measured
  // across one is reported.
  std::set<std::uint64_t> installs_running_;
  bool install_during_probe_ = false;
  std::map<std::uint64_t, std::uint32_t> running_;  // job id -> attempt
  ChipOwners owners_;
  std::map<std::uint64_t, protocol::JobFinished> unacked_;
  std::deque<Action> actions_;
};

}  // namespace kiln::agent

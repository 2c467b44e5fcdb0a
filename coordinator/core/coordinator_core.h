// The coordinator's pure core: node registry with liveness, the job state machine and
// dispatch. Messages and `now` go in; actions come out through poll_action(). No sockets,
// clocks, threads or files: the shell (and the simulation tests) supply all of that.
#pragma once

#include <deque>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <variant>
#include <vector>

#include "common/error.h"
#include "common/protocol/codec.h"
#include "common/time.h"
#include "coordinator/core/knobs.h"
#include "coordinator/core/records.h"

namespace kiln::coordinator {

// Who sent a message, as the shell's authentication established it.
struct Caller {
  std::string key_name;
  protocol::Role role = protocol::Role::developer;
};

namespace action {
struct ToAgent {
  std::string peer;  // the agent connection's routing id
  protocol::Body body;
  std::uint64_t corr = 0;
};
struct ToClient {
  std::string client;  // the client connection's routing id
  protocol::Body body;
  std::uint64_t corr = 0;
};
// Made durable before any later action is carried out: replies that follow a save are only
// sent once the save succeeded.
struct SaveNode {
  NodeRecord node;
};
struct SaveJob {
  JobRecord job;
};
enum class Severity { debug, info, warn, error };
struct Log {
  Severity severity = Severity::info;
  std::string text;
};
}  // namespace action

using Action = std::variant<action::ToAgent, action::ToClient, action::SaveNode, action::SaveJob,
                            action::Log>;

class CoordinatorCore {
 public:
  // `recovered` is what the store held at start-up. Nodes come back without a session and
  // have one liveness timeout from `now` to register again before their jobs are failed over.
  CoordinatorCore(CoordinatorKnobs knobs, Snapshot recovered, TimeMs now);

  void on_agent_message(const std::string& peer, const Caller& caller,
                        const protocol::Envelope& message, TimeMs now);
  void on_client_message(const std::string& client, const Caller& caller,
                         const protocol::Envelope& message, TimeMs now);
  void on_tick(TimeMs now);

  std::optional<Action> poll_action();
  std::optional<TimeMs> next_deadline() const;

  // Read-only views, for the invariant checkers of the simulation tests.
  const std::map<std::uint64_t, JobRecord>& jobs() const { return jobs_; }
  const std::map<std::string, NodeRecord>& nodes() const { return nodes_; }
  std::optional<std::string> peer_of(const std::string& node_id) const;

 private:
  struct Session {
    std::string node_id;
    std::uint32_t protocol_version = protocol::kProtocolVersion;
  };

  void handle_hello(const std::string& peer, const Caller& caller, const protocol::Envelope& m,
                    const protocol::Hello& hello, TimeMs now);
  void handle_job_started(const std::string& node_id, const protocol::JobStarted& started, TimeMs now);
  void handle_job_finished(const std::string& peer, const std::string& node_id,
                           const protocol::Envelope& m, const protocol::JobFinished& finished,
                           TimeMs now);
  void handle_health_report(const std::string& node_id, const protocol::HealthReport& report, TimeMs now);
  void apply_diag_result(const std::string& node_id, const JobRecord& job, TimeMs now);
  void quarantine(NodeRecord& node, const std::string& reason, const std::string& owner, TimeMs now);
  void handle_heartbeat(const std::string& peer, const std::string& node_id,
                        const protocol::Envelope& m, const protocol::Heartbeat& beat, TimeMs now);

  void handle_submit(const std::string& client, const Caller& caller, const protocol::Envelope& m,
                     const protocol::SubmitJob& submit, TimeMs now);
  void handle_cancel(const std::string& client, const Caller& caller, const protocol::Envelope& m,
                     const protocol::CancelJob& cancel, TimeMs now);
  void handle_drain(const std::string& client, const Caller& caller, const protocol::Envelope& m,
                    const protocol::DrainNode& drain, TimeMs now);
  protocol::NodeList node_list(TimeMs now) const;
  protocol::JobList job_list(const protocol::ListJobs& request) const;

  // One attempt of an active job ended without a result from the agent (node lost, agent
  // restarted without it): requeue while attempts remain, otherwise the job is lost.
  void attempt_lost(JobRecord& job, const std::string& why, TimeMs now);
  void finish(JobRecord& job, protocol::JobState state, std::string detail, TimeMs now);
  void mark_node_lost(NodeRecord& node, TimeMs now);
  void dispatch(TimeMs now);
  std::optional<std::vector<std::uint32_t>> pick_chips(const NodeRecord& node, std::uint32_t count) const;
  std::vector<bool> chips_in_use(const std::string& node_id) const;
  void refresh_chip_counts(const std::string& node_id);
  bool node_has_session(const std::string& node_id) const;

  void reply_error(const std::string& client, std::uint64_t corr, Errc code, std::string message);
  void to_agent(const std::string& peer, protocol::Body body, std::uint64_t corr = 0);
  void log(action::Severity severity, std::string text);
  void save(const JobRecord& job);
  void save(const NodeRecord& node);

  CoordinatorKnobs knobs_;
  std::map<std::string, NodeRecord> nodes_;
  std::map<std::uint64_t, JobRecord> jobs_;
  std::set<std::uint64_t> active_jobs_;  // queued, assigned or running
  std::map<std::string, Session> sessions_;  // by peer
  std::map<std::string, std::string> peer_by_node_;
  std::uint64_t next_job_id_ = 1;
  std::deque<Action> actions_;
};

}  // namespace kiln::coordinator

// Agent sessions: what agents say about themselves and what people say about nodes. Registering
// (hello: admission, the node's inventory, the welcome), heartbeats, health reports, quarantine
// and the diagnostics and installs that end it, draining, and nodes lost when they go silent.
// The node registry (node_registry.h) keeps the nodes and sessions. It holds no other room: what
// it reads of the jobs is handed to each call, and what a node's change asks of the job table and
// the scheduler (the jobs of a hello, a quarantine's withdrawals and reruns, a lost node's
// failover) comes back to the router as follow-ups.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <variant>
#include <vector>

#include "common/protocol/codec.h"
#include "common/protocol/messages.h"
#include "coordinator/core/core_context.h"
#include "coordinator/core/records.h"

namespace kiln::coordinator {

class JobTable;

// What a node's change asks of the other rooms, in order; the router carries each out
// (CoordinatorCore::carry_out) where the room returns it.
namespace node_follow_up {
// A node's state changed (drained, released from quarantine): the scheduler is told the nodes'
// states (SchedulerDecisions::sync_node_states).
struct StatesChanged {};
// The node was quarantined: the scheduler learns it first, so no rerun or withdrawn attempt lands
// back on it; then its attempts that had not started are withdrawn (JobTable::node_quarantined)
// and the CI failures there run again elsewhere (JobTable::rerun_failures_of).
struct Quarantined {
  std::string node_id;
};
// A note for people added to an ended job's detail (JobTable::add_to_detail).
struct NoteOnJob {
  std::uint64_t job_id = 0;
  std::string note;
};
}  // namespace node_follow_up
using NodeFollowUp = std::variant<node_follow_up::StatesChanged, node_follow_up::Quarantined, node_follow_up::NoteOnJob>;
using NodeFollowUps = std::vector<NodeFollowUp>;

// A hello admitted: the session is open and the inventory taken. The router has the job table
// reconcile the node's jobs (filling in the welcome) and the scheduler learn the node, then the
// welcome goes out (AgentSessions::welcome), the job table resumes the node's work, and the
// registration is logged (AgentSessions::registered).
struct HelloTaken {
  std::string node_id;
  std::uint32_t version = 0;
  bool was_lost = false;
  std::set<std::uint64_t> running;  // the jobs the agent says it runs
  protocol::Welcome welcome;
};

// A client's request about a node that changed it: the router carries out `follow_ups`, then the
// room answers the client (AgentSessions::answer_drain, answer_quarantine).
struct NodeRequestTaken {
  std::string client;
  std::uint64_t corr = 0;
  NodeFollowUps follow_ups;
};
struct DrainTaken : NodeRequestTaken {
  Caller caller;
  protocol::DrainNode drain;
};
struct QuarantineTaken : NodeRequestTaken {
  protocol::QuarantineNode request;
  bool fresh = false;  // the node was not quarantined before
};

// A recheck allowed: the router submits the rerun (JobTable::submit_recheck) and hands back its id
// or why it was refused (AgentSessions::recheck_submitted).
struct RecheckAsked {
  std::string client;
  std::uint64_t corr = 0;
  Caller caller;
  std::string node_id;
  std::uint64_t failing_job_id = 0;
};

class AgentSessions {
 public:
  explicit AgentSessions(CoreContext context) : ctx_(context) {}

  std::optional<HelloTaken> hello(const std::string& peer, const Caller& caller, const protocol::Envelope& m,
                                  const protocol::Hello& hello, TimeMs now);
  // Saves the node and sends the welcome the job table filled in.
  void welcome(const std::string& peer, const protocol::Envelope& m, const HelloTaken& taken);
  void registered(const protocol::Hello& hello, const HelloTaken& taken, std::size_t jobs_lost);
  // The node registered on this connection, seen now; without a session, replies so and gives
  // nothing.
  std::optional<std::string> node_of_session(const std::string& peer, const protocol::Envelope& m, TimeMs now);
  [[nodiscard]] NodeFollowUps health_report(const std::string& node_id, const protocol::HealthReport& report,
                                            TimeMs now);
  // A job's current attempt ended on the node: a diagnostics, install or recheck result may
  // quarantine the node or release it. The router hands each ended job to all three, in this
  // order, carrying out each one's follow-ups before the next.
  [[nodiscard]] NodeFollowUps diagnostics_ended(const std::string& node_id, const JobRecord& job, TimeMs now);
  [[nodiscard]] NodeFollowUps install_ended(const std::string& node_id, const JobRecord& job, TimeMs now);
  [[nodiscard]] NodeFollowUps recheck_ended(const std::string& node_id, const JobRecord& job);

  std::optional<DrainTaken> drain(const std::string& client, const Caller& caller, const protocol::Envelope& m,
                                  const protocol::DrainNode& drain);
  void answer_drain(const DrainTaken& taken);
  std::optional<QuarantineTaken> quarantine_request(const std::string& client, const Caller& caller,
                                                    const protocol::Envelope& m,
                                                    const protocol::QuarantineNode& request, TimeMs now);
  // The node quarantined and the job table told: a quarantine for one job's wrong outputs names the
  // rerun that also releases it; the client is answered.
  void answer_quarantine(const QuarantineTaken& taken, const JobTable& jobs);
  // Reruns the job whose wrong outputs quarantined the node there (quarantine_recheck.cpp).
  std::optional<RecheckAsked> recheck_request(const std::string& client, const Caller& caller,
                                              const protocol::Envelope& m, const protocol::RecheckNode& request,
                                              const JobTable& jobs);
  void recheck_submitted(const RecheckAsked& asked, const Result<std::uint64_t>& job_id);

  // Nodes silent past their liveness deadline, each then lost in turn: `lose` ends its session;
  // the router has the job table stop waiting for what it was stopping, the scheduler learn it,
  // the job table fail its attempts over and the lease lifecycle requeue the leases holding chips
  // there; then `loss_recorded` saves the node and says how many jobs were failed over.
  std::vector<std::string> silent_nodes(TimeMs now) const { return ctx_.registry.silent_nodes(now); }
  void lose(const std::string& node_id);
  void loss_recorded(const std::string& node_id, std::size_t failed_over, TimeMs now);
  std::optional<TimeMs> next_deadline() const;

 private:
  // A hello is admitted for its key, a common protocol version, and not being a stale copy:
  // returns the version, or replies why not.
  std::optional<std::uint32_t> admit_hello(const std::string& peer, const Caller& caller, const protocol::Envelope& m,
                                           const protocol::Hello& hello);
  void take_inventory(NodeRecord& node, const protocol::Hello& hello, TimeMs now);
  // The node returns to service: `how` says what cleared its quarantine (the audit's words).
  node_follow_up::StatesChanged release_from_quarantine(NodeRecord& node, const std::string& how, const JobRecord& job);
  // `release_level`: the diagnostics level whose checks see what quarantined it (the knob's
  // minimum, or 3 for a flapping node, when higher). `by`: who asked for it, when not the
  // coordinator's own finding.
  node_follow_up::Quarantined quarantine(NodeRecord& node, const std::string& reason, const std::string& owner,
                                         std::uint32_t release_level, TimeMs now, const Caller* by = nullptr);
  // A quarantined node found at fault again by what only a higher level sees: that level releases it.
  void raise_release_level(NodeRecord& node, std::uint32_t level, const std::string& reason);
  // The diagnostics level that returns a quarantined node.
  std::uint32_t release_diag_level(const NodeRecord& node) const;

  CoreContext ctx_;
};

}  // namespace kiln::coordinator

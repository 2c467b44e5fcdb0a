// Agent sessions: what agents say about themselves and what people say about nodes. Registering
// (hello: admission, the node's inventory, the welcome), heartbeats, health reports, quarantine
// and the diagnostics and installs that end it, draining, and nodes lost when they go silent.
// The node registry (node_registry.h) keeps the nodes and sessions; what a hello or heartbeat
// says about jobs goes to the job table.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "common/protocol/codec.h"
#include "common/protocol/messages.h"
#include "coordinator/core/core_context.h"
#include "coordinator/core/records.h"

namespace kiln::coordinator {

class JobTable;
class LeaseLifecycle;
class SchedulerDecisions;

class AgentSessions {
 public:
  AgentSessions(CoreContext context, JobTable& jobs, LeaseLifecycle& leases, SchedulerDecisions& scheduling)
      : ctx_(context), jobs_(jobs), leases_(leases), scheduling_(scheduling) {}

  void hello(const std::string& peer, const Caller& caller, const protocol::Envelope& m, const protocol::Hello& hello,
             TimeMs now);
  // The node registered on this connection, seen now; without a session, replies so and gives
  // nothing.
  std::optional<std::string> node_of_session(const std::string& peer, const protocol::Envelope& m, TimeMs now);
  void heartbeat(const std::string& peer, const std::string& node_id, const protocol::Envelope& m,
                 const protocol::Heartbeat& beat, TimeMs now);
  void health_report(const std::string& node_id, const protocol::HealthReport& report, TimeMs now);
  // A job's current attempt ended on the node: a diagnostics or install result may quarantine
  // the node or release it.
  void job_ended(const std::string& node_id, const JobRecord& job, TimeMs now);

  void drain(const std::string& client, const Caller& caller, const protocol::Envelope& m,
             const protocol::DrainNode& drain, TimeMs now);
  void quarantine_request(const std::string& client, const Caller& caller, const protocol::Envelope& m,
                          const protocol::QuarantineNode& request, TimeMs now);
  // Reruns the job whose wrong outputs quarantined the node there (quarantine_recheck.cpp).
  void recheck_request(const std::string& client, const Caller& caller, const protocol::Envelope& m,
                       const protocol::RecheckNode& request, TimeMs now);

  // Nodes silent past their liveness deadline are lost, their attempts failed over.
  void lose_silent_nodes(TimeMs now);
  std::optional<TimeMs> next_deadline() const;

 private:
  // A hello is admitted for its key, a common protocol version, and not being a stale copy:
  // returns the version, or replies why not.
  std::optional<std::uint32_t> admit_hello(const std::string& peer, const Caller& caller, const protocol::Envelope& m,
                                           const protocol::Hello& hello);
  void take_inventory(NodeRecord& node, const protocol::Hello& hello, TimeMs now);
  void apply_diag_result(const std::string& node_id, const JobRecord& job, TimeMs now);
  void apply_install_result(const std::string& node_id, const JobRecord& job, TimeMs now);
  void apply_recheck_result(const std::string& node_id, const JobRecord& job, TimeMs now);
  // The node returns to service: `how` says what cleared its quarantine (the audit's words).
  void release_from_quarantine(NodeRecord& node, const std::string& how, const JobRecord& job, TimeMs now);
  // `release_level`: the diagnostics level whose checks see what quarantined it (the knob's
  // minimum, or 3 for a flapping node, when higher). `by`: who asked for it, when not the
  // coordinator's own finding.
  void quarantine(NodeRecord& node, const std::string& reason, const std::string& owner, std::uint32_t release_level,
                  TimeMs now, const Caller* by = nullptr);
  // A quarantined node found at fault again by what only a higher level sees: that level releases it.
  void raise_release_level(NodeRecord& node, std::uint32_t level, const std::string& reason);
  // The diagnostics level that returns a quarantined node.
  std::uint32_t release_diag_level(const NodeRecord& node) const;
  void mark_node_lost(NodeRecord& node, TimeMs now);

  CoreContext ctx_;
  JobTable& jobs_;
  LeaseLifecycle& leases_;
  SchedulerDecisions& scheduling_;
};

}  // namespace kiln::coordinator

// The nodes the coordinator knows, and their agents' sessions: who is registered on which
// connection, which hellos were already taken, until when a silent node counts as alive, and
// when the diagnostics that last released each node from quarantine began.
#pragma once

#include <algorithm>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/protocol/messages.h"
#include "common/time.h"
#include "coordinator/core/records.h"

namespace kiln::coordinator {

class NodeRegistry {
 public:
  struct Session {
    std::string node_id;
    std::uint32_t protocol_version = protocol::kProtocolVersion;
    // The node's record, read for every message of the session: a node once known is never
    // forgotten, so the record stays where it is.
    NodeRecord* node = nullptr;
  };

  // Recovered nodes (recover) have until `registration_deadline_ms` to say hello before
  // liveness counts: their agents may be in reconnect backoff.
  NodeRegistry(DurationMs liveness_timeout_ms, TimeMs registration_deadline_ms)
      : liveness_timeout_ms_(liveness_timeout_ms), registration_deadline_ms_(registration_deadline_ms) {}

  // A node from the store: no session yet.
  void recover(NodeRecord node, TimeMs now);

  std::map<std::string, NodeRecord>& nodes() { return nodes_; }
  const std::map<std::string, NodeRecord>& nodes() const { return nodes_; }
  NodeRecord* find(const std::string& node_id);

  // The node's agent registered on `peer`: a session on an older connection ends. Returns the
  // node's record, made empty for a node not known before.
  NodeRecord& open_session(const std::string& peer, const std::string& node_id, std::uint32_t protocol_version);
  // The node was lost: its session ends, and it no longer waits to register.
  void close_session(const std::string& node_id);
  const Session* session(const std::string& peer) const;
  std::optional<std::string> peer_of(const std::string& node_id) const;
  bool has_session(const std::string& node_id) const { return peer_by_node_.count(node_id) != 0; }

  // Why a hello must be dropped, if it must: a copy of one already taken, or from a connection
  // a later hello of the node replaced. Otherwise remembers it.
  std::optional<std::string> stale_hello(const std::string& node_id, const std::string& peer, std::uint64_t hello_id);

  // When a node that stays silent is lost: a recovered node that has not registered since the
  // start-up has until the registration deadline; none before a fresh window's end.
  //
  // The node's agent was heard from on its session: its liveness deadline moves to `now` plus
  // the timeout.
  void heard_from(NodeRecord& node, TimeMs now);
  // The earliest liveness deadline of a node that is not lost, and the nodes not lost whose deadline
  // is before `now` (in order of their ids). Both read an index of the nodes by when they were
  // last heard from, so a turn of the loop costs the same with 10 nodes or 10,000.
  std::optional<TimeMs> next_liveness_deadline() const;
  std::vector<std::string> silent_nodes(TimeMs now) const;
  // No node is lost before `until_ms`: the coordinator's loop did not run for a while, what the
  // agents sent meanwhile may not have been read yet, and those that gave up on it reconnect.
  void fresh_window(TimeMs until_ms) { window_deadline_ms_ = std::max(window_deadline_ms_, until_ms); }

  // When the diagnostics that released the node from quarantine started, on the wall clock
  // (the one health reports are stamped with); kept in the node's record, so it is stored.
  void released_from_quarantine(const std::string& node_id, TimeMs diagnostics_started_wall_ms) {
    nodes_.at(node_id).released_from_quarantine_wall_ms = std::max<TimeMs>(0, diagnostics_started_wall_ms);
  }
  std::optional<TimeMs> released_from_quarantine_at(const std::string& node_id) const;

  protocol::NodeList list(TimeMs now) const;

  // Why a request for `nodes` whole nodes of one revision (0: one node) with `chips` chips each, of `revision`
  // (empty: any) and on `node_id` (empty: any), can never be placed on the nodes known, in
  // words that list what the fleet has; nothing if it can, or if no node has registered yet.
  // Nodes that are down or quarantined count: they may come back.
  std::optional<std::string> never_placeable(std::string_view revision, std::uint32_t nodes, std::uint32_t chips,
                                             std::string_view node_id) const;

  // A hello's inventory was taken into the node's record (its revision and chips), with the
  // workloads its agent declares. Those are not stored: a recovered node's are unknown until its
  // agent says hello to this coordinator.
  void inventory_taken(const std::string& node_id, const std::vector<std::string>& workloads);
  // Why `workload` can never run, in words that list what the agents declare: no known node
  // declares it. Nothing if one does, or while a known node has not declared its workloads yet.
  std::optional<std::string> never_runs(std::string_view workload) const;

 private:
  DurationMs liveness_timeout_ms_ = 0;
  TimeMs window_deadline_ms_ = 0;
  std::map<std::string, NodeRecord> nodes_;
  // Recovered nodes that are not lost and have not registered since the start-up, and until when
  // they may.
  std::set<std::string> awaiting_registration_;
  // The other nodes with a session, by when they were last heard from (their last_seen_ms): the
  // order of their liveness deadlines. A node enters at its hello and leaves when it is lost.
  std::set<std::pair<TimeMs, std::string>> by_last_heard_;
  TimeMs registration_deadline_ms_ = 0;
  // Read for every message an agent sends and never listed: hashed, not ordered.
  std::unordered_map<std::string, Session> sessions_;  // by peer
  std::unordered_map<std::string, std::string> peer_by_node_;
  // Each node's most recent connections, oldest first, with the id of the last hello taken.
  struct HelloConnection {
    std::string peer;
    std::uint64_t last_hello_id = 0;
  };
  std::map<std::string, std::deque<HelloConnection>> hello_connections_;
  std::map<std::string, std::set<std::string>> declared_workloads_;  // by node
  // What never_placeable and never_runs read, counted over the nodes when first needed after a
  // hello or a recovery changed it: every submission asks, hellos are rare.
  struct FleetShape {
    std::map<std::string, std::size_t> nodes_by_revision;
    std::map<std::string, std::uint32_t> most_chips_by_revision;
    std::map<std::string, std::size_t> nodes_declaring;  // by workload
    std::size_t undeclared = 0;                          // nodes not heard from since the start
  };
  const FleetShape& shape() const;
  mutable std::optional<FleetShape> shape_;
};

}  // namespace kiln::coordinator

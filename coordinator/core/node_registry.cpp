#include "coordinator/core/node_registry.h"

#include <algorithm>
#include <vector>

#include <fmt/format.h>

namespace kiln::coordinator {

void NodeRegistry::recover(NodeRecord node, TimeMs now) {
  node.last_seen_ms = now;
  std::string id = node.summary.node_id;
  if (node.summary.state != protocol::NodeState::lost) awaiting_registration_.insert(id);
  nodes_.emplace(std::move(id), std::move(node));
  shape_.reset();
}

void NodeRegistry::heard_from(NodeRecord& node, TimeMs now) {
  const std::string& id = node.summary.node_id;
  by_last_heard_.erase({node.last_seen_ms, id});
  node.last_seen_ms = now;
  // Heard now, so (on the monotonic clock) last in the order: the hint makes the insert O(1).
  if (node.summary.state != protocol::NodeState::lost) by_last_heard_.emplace_hint(by_last_heard_.end(), now, id);
}

std::optional<TimeMs> NodeRegistry::next_liveness_deadline() const {
  std::optional<TimeMs> next;
  if (!awaiting_registration_.empty()) next = registration_deadline_ms_;
  if (!by_last_heard_.empty()) {
    const TimeMs deadline = std::max(by_last_heard_.begin()->first + liveness_timeout_ms_, window_deadline_ms_);
    next = std::min(next.value_or(deadline), deadline);
  }
  return next;
}

std::vector<std::string> NodeRegistry::silent_nodes(TimeMs now) const {
  std::vector<std::string> silent;
  if (now > registration_deadline_ms_) silent.assign(awaiting_registration_.begin(), awaiting_registration_.end());
  if (now > window_deadline_ms_) {
    for (const auto& [last_heard_ms, id] : by_last_heard_) {
      if (now <= last_heard_ms + liveness_timeout_ms_) break;
      silent.push_back(id);
    }
  }
  std::sort(silent.begin(), silent.end());
  return silent;
}

NodeRecord* NodeRegistry::find(const std::string& node_id) {
  auto it = nodes_.find(node_id);
  return it == nodes_.end() ? nullptr : &it->second;
}

NodeRecord& NodeRegistry::open_session(const std::string& peer, const std::string& node_id,
                                       std::uint32_t protocol_version) {
  if (auto old = peer_by_node_.find(node_id); old != peer_by_node_.end() && old->second != peer) {
    sessions_.erase(old->second);
  }
  NodeRecord& node = nodes_[node_id];
  sessions_[peer] = Session{node_id, protocol_version, &node};
  peer_by_node_[node_id] = peer;
  awaiting_registration_.erase(node_id);
  return node;
}

void NodeRegistry::close_session(const std::string& node_id) {
  awaiting_registration_.erase(node_id);
  if (auto node = nodes_.find(node_id); node != nodes_.end()) by_last_heard_.erase({node->second.last_seen_ms, node_id});
  if (auto peer = peer_by_node_.find(node_id); peer != peer_by_node_.end()) {
    sessions_.erase(peer->second);
    peer_by_node_.erase(peer);
  }
}

const NodeRegistry::Session* NodeRegistry::session(const std::string& peer) const {
  auto it = sessions_.find(peer);
  return it == sessions_.end() ? nullptr : &it->second;
}

std::optional<std::string> NodeRegistry::peer_of(const std::string& node_id) const {
  auto it = peer_by_node_.find(node_id);
  if (it == peer_by_node_.end()) return std::nullopt;
  return it->second;
}

std::optional<std::string> NodeRegistry::stale_hello(const std::string& node_id, const std::string& peer,
                                                     std::uint64_t hello_id) {
  auto& connections = hello_connections_[node_id];
  auto known = std::find_if(connections.begin(), connections.end(),
                            [&](const HelloConnection& c) { return c.peer == peer; });
  if (known != connections.end() && std::next(known) != connections.end()) {
    return std::string("its connection was replaced by a later one");
  }
  if (known != connections.end() && hello_id <= known->last_hello_id) {
    return fmt::format("a copy of hello {} on the same connection, already taken", known->last_hello_id);
  }
  if (known == connections.end()) {
    connections.push_back(HelloConnection{peer, hello_id});
    // A few recent connections suffice: a copy outlives its connection by a network delay.
    constexpr std::size_t kConnectionsKept = 4;
    if (connections.size() > kConnectionsKept) connections.pop_front();
  } else {
    known->last_hello_id = hello_id;
  }
  return std::nullopt;
}

std::optional<TimeMs> NodeRegistry::released_from_quarantine_at(const std::string& node_id) const {
  auto it = nodes_.find(node_id);
  if (it == nodes_.end() || it->second.released_from_quarantine_wall_ms == 0) return std::nullopt;
  return it->second.released_from_quarantine_wall_ms;
}

protocol::NodeList NodeRegistry::list(TimeMs now) const {
  protocol::NodeList list;
  for (const auto& [id, node] : nodes_) {
    protocol::NodeSummary s = node.summary;
    s.last_seen_ms_ago = static_cast<std::uint64_t>(std::max<TimeMs>(0, now - node.last_seen_ms));
    list.nodes.push_back(std::move(s));
  }
  return list;
}

namespace {

std::string count_text(std::size_t n, std::string_view one) {
  return fmt::format("{} {}{}", n, one, n == 1 ? "" : "s");
}

}  // namespace

void NodeRegistry::inventory_taken(const std::string& node_id, const std::vector<std::string>& workloads) {
  declared_workloads_[node_id] = std::set<std::string>(workloads.begin(), workloads.end());
  shape_.reset();
}

const NodeRegistry::FleetShape& NodeRegistry::shape() const {
  if (shape_) return *shape_;
  FleetShape& shape = shape_.emplace();
  for (const auto& [id, node] : nodes_) {
    const std::string& revision = node.summary.hardware_revision;
    ++shape.nodes_by_revision[revision];
    std::uint32_t& most = shape.most_chips_by_revision[revision];
    most = std::max(most, node.summary.chips_total);
    auto declared = declared_workloads_.find(id);
    if (declared == declared_workloads_.end()) {
      ++shape.undeclared;
      continue;
    }
    for (const std::string& workload : declared->second) ++shape.nodes_declaring[workload];
  }
  return shape;
}

std::optional<std::string> NodeRegistry::never_runs(std::string_view workload) const {
  if (nodes_.empty()) return std::nullopt;
  const FleetShape& fleet = shape();
  if (fleet.undeclared > 0 || fleet.nodes_declaring.count(std::string(workload)) != 0) return std::nullopt;
  // Written only for a refusal.
  std::set<std::string> declared;
  for (const auto& [name, nodes] : fleet.nodes_declaring) declared.insert(name);
  if (declared.empty()) {
    return fmt::format("no agent declares workload '{}', nor any other: add it to the agents' [workloads]", workload);
  }
  return fmt::format("no agent declares workload '{}'; the agents declare {}", workload, fmt::join(declared, ", "));
}

std::optional<std::string> NodeRegistry::never_placeable(std::string_view revision, std::uint32_t nodes,
                                                         std::uint32_t chips, std::string_view node_id) const {
  if (nodes_.empty()) return std::nullopt;
  const std::map<std::string, std::size_t>& nodes_by_revision = shape().nodes_by_revision;
  // Written only for a refusal: every submission passes through here.
  const auto has = [&] {
    std::vector<std::string> fleet;
    for (const auto& [rev, n] : nodes_by_revision) fleet.push_back(fmt::format("{} ({})", rev, count_text(n, "node")));
    return fmt::format("the fleet has revision{} {}", fleet.size() == 1 ? "" : "s", fmt::join(fleet, ", "));
  };
  if (!revision.empty() && nodes_by_revision.count(std::string(revision)) == 0) {
    return fmt::format("no node has hardware revision '{}'; {}", revision, has());
  }
  const std::string of_revision = revision.empty() ? std::string() : fmt::format(" of revision {}", revision);
  if (!node_id.empty()) {
    auto it = nodes_.find(std::string(node_id));
    if (it == nodes_.end()) return std::nullopt;  // refused as unregistered elsewhere
    const protocol::NodeSummary& node = it->second.summary;
    if (!revision.empty() && node.hardware_revision != revision) {
      return fmt::format("node {} has hardware revision {}, not {}; drop --node or --rev", node_id,
                         node.hardware_revision, revision);
    }
    if (chips > node.chips_total) {
      return fmt::format("node {} has {}, fewer than the {} asked for", node_id, count_text(node.chips_total, "chip"),
                         chips);
    }
    return std::nullopt;
  }
  std::uint32_t largest = 0;
  for (const auto& [rev, most] : shape().most_chips_by_revision) {
    if (revision.empty() || rev == revision) largest = std::max(largest, most);
  }
  // Whole nodes of one lease are all of one revision (the scheduler places them so).
  std::size_t most_of_one_revision = 0;
  for (const auto& [rev, n] : nodes_by_revision) {
    if (revision.empty() || rev == revision) most_of_one_revision = std::max(most_of_one_revision, n);
  }
  if (nodes > most_of_one_revision) {
    return fmt::format("{} of one revision asked for, but the fleet has {}{}; {}", count_text(nodes, "whole node"),
                       count_text(most_of_one_revision, "node"), revision.empty() ? " of any one revision" : of_revision,
                       has());
  }
  if (chips > largest) {
    return fmt::format("{} on one node asked for, but the largest node{} has {}", count_text(chips, "chip"),
                       of_revision, count_text(largest, "chip"));
  }
  return std::nullopt;
}

}  // namespace kiln::coordinator

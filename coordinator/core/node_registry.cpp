#include "coordinator/core/node_registry.h"

#include <algorithm>
#include <vector>

#include <fmt/format.h>

namespace kiln::coordinator {

void NodeRegistry::recover(NodeRecord node, TimeMs now) {
  node.last_seen_ms = now;
  std::string id = node.summary.node_id;
  awaiting_registration_.insert(id);
  nodes_.emplace(std::move(id), std::move(node));
}

NodeRecord* NodeRegistry::find(const std::string& node_id) {
  auto it = nodes_.find(node_id);
  return it == nodes_.end() ? nullptr : &it->second;
}

void NodeRegistry::open_session(const std::string& peer, const std::string& node_id, std::uint32_t protocol_version) {
  if (auto old = peer_by_node_.find(node_id); old != peer_by_node_.end() && old->second != peer) {
    sessions_.erase(old->second);
  }
  sessions_[peer] = Session{node_id, protocol_version};
  peer_by_node_[node_id] = peer;
  awaiting_registration_.erase(node_id);
}

void NodeRegistry::close_session(const std::string& node_id) {
  awaiting_registration_.erase(node_id);
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

TimeMs NodeRegistry::liveness_deadline(const NodeRecord& node) const {
  if (awaiting_registration_.count(node.summary.node_id)) return registration_deadline_ms_;
  return std::max(node.last_seen_ms + liveness_timeout_ms_, window_deadline_ms_);
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

void NodeRegistry::declare_workloads(const std::string& node_id, const std::vector<std::string>& workloads) {
  declared_workloads_[node_id] = std::set<std::string>(workloads.begin(), workloads.end());
}

std::optional<std::string> NodeRegistry::never_runs(std::string_view workload) const {
  if (nodes_.empty()) return std::nullopt;
  std::set<std::string> declared;
  for (const auto& [id, node] : nodes_) {
    auto it = declared_workloads_.find(id);
    if (it == declared_workloads_.end()) return std::nullopt;  // not heard from since the start
    if (it->second.count(std::string(workload)) != 0) return std::nullopt;
    declared.insert(it->second.begin(), it->second.end());
  }
  if (declared.empty()) {
    return fmt::format("no agent declares workload '{}', nor any other: add it to the agents' [workloads]", workload);
  }
  return fmt::format("no agent declares workload '{}'; the agents declare {}", workload, fmt::join(declared, ", "));
}

std::optional<std::string> NodeRegistry::never_placeable(std::string_view revision, std::uint32_t nodes,
                                                         std::uint32_t chips, std::string_view node_id) const {
  if (nodes_.empty()) return std::nullopt;
  std::map<std::string, std::size_t> nodes_by_revision;
  for (const auto& [id, node] : nodes_) ++nodes_by_revision[node.summary.hardware_revision];
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
  for (const auto& [id, node] : nodes_) {
    if (!revision.empty() && node.summary.hardware_revision != revision) continue;
    largest = std::max(largest, node.summary.chips_total);
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

// The registry's liveness index: the earliest deadline and the silent nodes, read from the nodes
// ordered by when they were last heard from, agree with a scan of every node.
#include <doctest/doctest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>

#include "coordinator/core/node_registry.h"

using namespace kiln;
using namespace kiln::coordinator;

namespace {

constexpr DurationMs kRegistryTimeoutMs = 4000;

// Registers a node as a hello does: a session, then its state and when it was heard from.
void say_hello(NodeRegistry& registry, const std::string& node_id, const std::string& peer, TimeMs now) {
  NodeRecord& node = registry.open_session(peer, node_id, protocol::kProtocolVersion);
  node.summary.node_id = node_id;
  node.summary.state = protocol::NodeState::up;
  registry.heard_from(node, now);
}

void lose_node(NodeRegistry& registry, const std::string& node_id) {
  registry.nodes().at(node_id).summary.state = protocol::NodeState::lost;
  registry.close_session(node_id);
}

NodeRecord recovered_record(const std::string& node_id, protocol::NodeState state) {
  NodeRecord node;
  node.summary.node_id = node_id;
  node.summary.state = state;
  return node;
}

}  // namespace

TEST_CASE("the next liveness deadline is the earliest last heard plus the timeout, strictly passed to be lost") {
  NodeRegistry registry(kRegistryTimeoutMs, 0);
  CHECK_FALSE(registry.next_liveness_deadline().has_value());
  say_hello(registry, "n2", "p2", 200);
  say_hello(registry, "n1", "p1", 100);
  say_hello(registry, "n3", "p3", 300);
  CHECK(registry.next_liveness_deadline() == 4100);
  CHECK(registry.silent_nodes(4100).empty());
  CHECK(registry.silent_nodes(4101) == std::vector<std::string>{"n1"});
  CHECK(registry.silent_nodes(4301) == std::vector<std::string>{"n1", "n2", "n3"});
  // Heard from again: its deadline moves, the next one is the following node's.
  registry.heard_from(registry.nodes().at("n1"), 5000);
  CHECK(registry.next_liveness_deadline() == 4200);
  CHECK(registry.silent_nodes(4250) == std::vector<std::string>{"n2"});
}

TEST_CASE("a lost node leaves the index and a hello brings it back") {
  NodeRegistry registry(kRegistryTimeoutMs, 0);
  say_hello(registry, "n1", "p1", 100);
  say_hello(registry, "n2", "p2", 200);
  lose_node(registry, "n1");
  CHECK(registry.next_liveness_deadline() == 4200);
  CHECK(registry.silent_nodes(10000) == std::vector<std::string>{"n2"});
  lose_node(registry, "n2");
  CHECK_FALSE(registry.next_liveness_deadline().has_value());
  CHECK(registry.silent_nodes(10000).empty());
  say_hello(registry, "n1", "p1b", 9000);
  CHECK(registry.next_liveness_deadline() == 13000);
}

TEST_CASE("after a stall no node is silent before the fresh window ends") {
  NodeRegistry registry(kRegistryTimeoutMs, 0);
  say_hello(registry, "n1", "p1", 100);
  registry.fresh_window(20000);
  CHECK(registry.next_liveness_deadline() == 20000);
  CHECK(registry.silent_nodes(19000).empty());
  CHECK(registry.silent_nodes(20001) == std::vector<std::string>{"n1"});
}

TEST_CASE("recovered nodes have until the registration deadline; those recovered lost are not waited for") {
  NodeRegistry registry(kRegistryTimeoutMs, 40000);
  registry.recover(recovered_record("n1", protocol::NodeState::up), 0);
  registry.recover(recovered_record("n2", protocol::NodeState::lost), 0);
  CHECK(registry.next_liveness_deadline() == 40000);
  CHECK(registry.silent_nodes(39000).empty());
  CHECK(registry.silent_nodes(40001) == std::vector<std::string>{"n1"});
  // Its hello ends the wait: from then on its own silence counts.
  say_hello(registry, "n1", "p1", 1000);
  CHECK(registry.next_liveness_deadline() == 5000);
}

TEST_CASE("a sweep of hellos, heartbeats, losses and stalls keeps the index equal to a scan of the nodes") {
  for (unsigned seed = 1; seed <= 20; ++seed) {
    CAPTURE(seed);
    std::mt19937 random(seed);
    const TimeMs registration_deadline_ms = 30000;
    NodeRegistry registry(kRegistryTimeoutMs, registration_deadline_ms);
    std::set<std::string> awaiting;
    for (int i = 0; i < 5; ++i) {
      const std::string id = "r" + std::to_string(i);
      const bool lost = random() % 3 == 0;
      registry.recover(recovered_record(id, lost ? protocol::NodeState::lost : protocol::NodeState::up), 0);
      if (!lost) awaiting.insert(id);
    }
    TimeMs window_ms = 0;
    TimeMs now = 0;
    int connection = 0;
    for (int step = 0; step < 400; ++step) {
      now += static_cast<TimeMs>(random() % 500);
      const std::string id = (random() % 2 ? "n" : "r") + std::to_string(random() % 8);
      NodeRecord* node = registry.find(id);
      switch (random() % 5) {
        case 0:
          say_hello(registry, id, "p" + std::to_string(++connection), now);
          awaiting.erase(id);
          break;
        case 1:
        case 2:
          if (node && registry.has_session(id)) registry.heard_from(*node, now);
          break;
        case 3:
          if (node && node->summary.state != protocol::NodeState::lost) {
            lose_node(registry, id);
            awaiting.erase(id);
          }
          break;
        default:
          if (random() % 10 == 0) {
            window_ms = std::max(window_ms, now + 5000);
            registry.fresh_window(now + 5000);
          }
      }
      // The scan: every node not lost, with a session or waiting to register.
      std::optional<TimeMs> next;
      std::vector<std::string> silent;
      const TimeMs probe = now + static_cast<TimeMs>(random() % 6000);
      for (const auto& [nid, n] : registry.nodes()) {
        if (n.summary.state == protocol::NodeState::lost) continue;
        const bool waits = awaiting.count(nid) != 0;
        if (!waits && !registry.has_session(nid)) continue;
        const TimeMs deadline = waits ? registration_deadline_ms : std::max(n.last_seen_ms + kRegistryTimeoutMs, window_ms);
        next = std::min(next.value_or(deadline), deadline);
        if (probe > deadline) silent.push_back(nid);
      }
      REQUIRE(registry.next_liveness_deadline() == next);
      REQUIRE(registry.silent_nodes(probe) == silent);
    }
  }
}

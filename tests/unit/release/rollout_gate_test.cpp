#include "release/rollout_gate.h"

#include <doctest/doctest.h>

namespace kiln::release {
namespace {

const std::string kBundle(64, 'b');

protocol::NodeConvergence in_sync(const std::string& node_id) {
  return {node_id, "in_sync", "2.0", "2.0", "r2", "r2", 7, ""};
}

protocol::NodeSummary up(const std::string& node_id) {
  protocol::NodeSummary node;
  node.node_id = node_id;
  return node;
}

// What `kiln envs` says when dev converged on the bundle on n01 and n02.
protocol::EnvironmentList dev_converged() {
  protocol::EnvironmentList list;
  list.repository = "/srv/environments";
  list.commit = std::string(40, 'c');
  list.environments.push_back({"dev", kBundle, "converged", "", {in_sync("n01"), in_sync("n02")}});
  return list;
}

std::string refusal(const Status& status) {
  REQUIRE_FALSE(status.has_value());
  CHECK(status.error().code == Errc::conflict);
  return status.error().message;
}

bool has(const std::string& text, const std::string& part) {
  if (text.find(part) != std::string::npos) return true;
  MESSAGE("expected '" << part << "' in:\n" << text);
  return false;
}

TEST_CASE("a bundle goes on once the previous environment converged on it with every node up") {
  CHECK(check_previous_rollout("staging", "dev", kBundle, dev_converged(), {up("n01"), up("n02")}).has_value());
}

TEST_CASE("a halted rollout with its canary quarantined keeps the bundle where it is, saying why and what to do") {
  auto list = dev_converged();
  auto& dev = list.environments[0];
  dev.rollout = "halted";
  dev.detail = "stopped after a node failed to converge (node n01: install job 3 failed: ...)";
  dev.nodes[0].state = "failed";
  dev.nodes[0].detail = "install job 3 failed: the driver installer did not start (Exec format error)";
  dev.nodes[1].state = "drifted";
  auto canary = up("n01");
  canary.state = protocol::NodeState::quarantined;
  canary.quarantine_reason = "did not converge on bundle bbbbbbbbbbbb";
  const std::string why = refusal(check_previous_rollout("staging", "dev", kBundle, list, {canary, up("n02")}));
  CHECK(has(why, "bundle bbbbbbbbbbbb may not go to staging yet: its rollout in dev is halted"));
  CHECK(has(why, "n01 failed (install job 3 failed: the driver installer did not start (Exec format error)), "
                 "quarantined (did not converge on bundle bbbbbbbbbbbb)"));
  CHECK(has(why, "n02 drifted"));
  CHECK(has(why, "roll dev back (`kiln release rollback dev`) or promote a fixed bundle"));
}

TEST_CASE("a converged environment with a node quarantined or lost since is not healthy") {
  auto quarantined = up("n02");
  quarantined.state = protocol::NodeState::quarantined;
  quarantined.quarantine_reason = "health probe: hbm_ecc fail";
  std::string why = refusal(check_previous_rollout("staging", "dev", kBundle, dev_converged(), {up("n01"), quarantined}));
  CHECK(has(why, "its rollout in dev is converged; n02 quarantined (health probe: hbm_ecc fail)"));
  CHECK(has(why, "roll dev back"));

  auto lost = up("n01");
  lost.state = protocol::NodeState::lost;
  why = refusal(check_previous_rollout("staging", "dev", kBundle, dev_converged(), {lost, up("n02")}));
  CHECK(has(why, "n01 lost: its agent is not connected"));
}

TEST_CASE("a rollout still under way, or with nothing to run on, is no evidence yet") {
  auto list = dev_converged();
  list.environments[0].rollout = "canary";
  list.environments[0].detail = "one node first; the rest once it converged";
  list.environments[0].nodes[0].state = "converging";
  list.environments[0].nodes[0].detail = "install job 4 is running";
  list.environments[0].nodes[1].state = "drifted";
  std::string why = refusal(check_previous_rollout("staging", "dev", kBundle, list, {up("n01"), up("n02")}));
  CHECK(has(why, "its rollout in dev is canary (one node first; the rest once it converged); n01 converging (install "
                 "job 4 is running); n02 drifted"));
  CHECK(has(why, "wait until `kiln envs` shows dev converged with every node up, then promote again"));

  list.environments[0].rollout = "idle";
  list.environments[0].detail = "no nodes belong to it";
  list.environments[0].nodes.clear();
  why = refusal(check_previous_rollout("staging", "dev", kBundle, list, {}));
  CHECK(has(why, "no node belongs to dev, so no node has run it there"));
  CHECK(has(why, "nodes or node_labels in environments/dev.toml"));
}

TEST_CASE("the coordinator must roll the bundle out in the previous environment: watched, and read up to it") {
  auto list = dev_converged();
  list.environments[0].bundle_id = std::string(64, 'a');
  list.problem = "git show failed";
  std::string why = refusal(check_previous_rollout("staging", "dev", kBundle, list, {up("n01"), up("n02")}));
  CHECK(has(why, "the coordinator's reading of /srv/environments (commit cccccccccccc) (its newest reading failed: git "
                 "show failed) rolls out aaaaaaaaaaaa in dev, not this bundle"));

  list.environments.clear();
  why = refusal(check_previous_rollout("staging", "dev", kBundle, list, {}));
  CHECK(has(why, "has no environment dev; wait until `kiln envs` shows dev on bundle bbbbbbbbbbbb and converged"));

  why = refusal(check_previous_rollout("staging", "dev", kBundle, protocol::EnvironmentList{}, {}));
  CHECK(has(why, "the coordinator watches no environments repository"));
  CHECK(has(why, "set [environments] repo in coordinator.toml"));
}

}  // namespace
}  // namespace kiln::release

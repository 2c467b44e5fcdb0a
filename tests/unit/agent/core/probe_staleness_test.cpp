// A probe result stamped by the agent core, as the real agent stamps it, read by the
// coordinator core: one measured before a repair never quarantines the repaired node again.
#include <doctest/doctest.h>

#include "agent/core/agent_core.h"
#include "tests/support/core_harness.h"

using namespace kiln;
using namespace kiln::protocol;

namespace {

// An agent core registered with the coordinator, whose probe results are taken as sent.
struct ProbingAgent {
  agent::AgentCore core;

  ProbingAgent() : core(identity(), agent::SessionKnobs{}) {
    core.on_start(0);
    Welcome welcome;
    welcome.heartbeat_interval_ms = 1000;
    welcome.liveness_missed_beats = 3;
    core.on_message(make_envelope(welcome, 1), 0);
    while (core.poll_action()) {
    }
  }

  static agent::AgentIdentity identity() {
    agent::AgentIdentity id;
    id.node_id = "n01";
    id.hardware_revision = "a";
    for (std::uint32_t i = 0; i < 8; ++i) id.chips.push_back(ChipInfo{i, "n01-" + std::to_string(i), "1.0", 0, true});
    return id;
  }

  // The report the agent sends for a failing probe that began at measured_at_wall_ms.
  HealthReport failing_probe(TimeMs measured_at_wall_ms, TimeMs now) {
    core.on_probe_result(coordinator::testing::failing_probe(), measured_at_wall_ms, now);
    std::optional<HealthReport> sent;
    while (auto action = core.poll_action()) {
      if (auto* send = std::get_if<agent::action::Send>(&*action)) {
        if (auto* health = std::get_if<HealthReport>(&send->body)) sent = *health;
      }
    }
    REQUIRE(sent.has_value());
    return *sent;
  }
};

}  // namespace

TEST_CASE("the agent stamps each probe result with the wall time the probe began") {
  ProbingAgent agent;
  CHECK(agent.failing_probe(1'700'000'000'123, 50).measured_at_ms == 1'700'000'000'123U);
}

TEST_CASE("a probe the agent measured before a repair, arriving after the release, does not quarantine the node "
          "again") {
  coordinator::testing::Harness coordinator;
  ProbingAgent agent;
  coordinator.agent("p1", "n01", coordinator::testing::hello("n01", "a"), 0);
  coordinator.agent("p1", "n01", agent.failing_probe(1000, 1000), 1000);
  REQUIRE(coordinator.core.nodes().at("n01").summary.state == NodeState::quarantined);
  // Measured during the fault; its report is still on the way when the node is repaired.
  const HealthReport stale = agent.failing_probe(1500, 1500);

  SubmitJob diag;
  diag.workload = std::string(kDiagWorkload);
  diag.node_id = "n01";
  const auto diag_job = coordinator.submit("lab1", Role::lab, diag, 2000);
  coordinator.agent("p1", "n01", coordinator::testing::diag_result(diag_job, 2), 3000);
  REQUIRE(coordinator.core.nodes().at("n01").summary.state == NodeState::up);
  coordinator.agent("p1", "n01", stale, 3100);
  CHECK(coordinator.core.nodes().at("n01").summary.state == NodeState::up);
  CHECK(coordinator.core.nodes().at("n01").recent_quarantines == 1);

  // A probe begun after the diagnostics began speaks for the repaired node.
  coordinator.agent("p1", "n01", agent.failing_probe(4000, 4000), 4000);
  CHECK(coordinator.core.nodes().at("n01").summary.state == NodeState::quarantined);
}

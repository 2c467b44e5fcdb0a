// What integration tests ask the coordinator, through a real client.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "common/protocol/messages.h"
#include "client/client.h"
#include "tests/integration/fleet_fixture.h"

namespace kiln::testing {

inline std::optional<protocol::NodeSummary> node(cli::Client& client, const std::string& id) {
  auto reply = client.request(protocol::ListNodes{});
  if (!reply) return std::nullopt;
  for (const auto& n : std::get<protocol::NodeList>(*reply).nodes) {
    if (n.node_id == id) return n;
  }
  return std::nullopt;
}

inline std::optional<protocol::JobDetail> job(cli::Client& client, std::uint64_t id) {
  auto reply = client.request(protocol::GetJob{id});
  if (!reply) return std::nullopt;
  return std::get<protocol::JobDetail>(*reply);
}

inline std::uint64_t submit(cli::Client& client, protocol::SubmitJob request) {
  auto reply = client.request(std::move(request));
  REQUIRE_MESSAGE(reply.has_value(), reply.error().message);
  return std::get<protocol::JobAccepted>(*reply).job_id;
}

inline bool node_state_is(cli::Client& client, const std::string& id, protocol::NodeState state) {
  auto n = node(client, id);
  return n && n->state == state;
}

inline bool job_state_is(cli::Client& client, std::uint64_t id, protocol::JobState state) {
  auto j = job(client, id);
  return j && j->job.state == state;
}

inline bool job_ended(cli::Client& client, std::uint64_t id) {
  auto j = job(client, id);
  return j && protocol::is_terminal(j->job.state);
}

// Submits the job and waits for it to end; generous, as the machine may be loaded.
inline protocol::JobDetail run_to_end(cli::Client& client, const protocol::SubmitJob& request) {
  const std::uint64_t id = submit(client, request);
  REQUIRE(Fleet::eventually([&] { return job_ended(client, id); }, std::chrono::seconds(60)));
  return *job(client, id);
}

// A coordinator and the agents, all up; returns a client with KEY_NAME, authorized as ROLE.
inline std::unique_ptr<cli::Client> start_nodes(Fleet& fleet, const std::vector<AgentSpec>& agents,
                                                const std::string& key_name = "dev",
                                                const std::string& role = "developer") {
  fleet.add_key(key_name, role);
  for (const auto& agent : agents) fleet.add_agent(agent);
  fleet.start_coordinator();
  for (const auto& agent : agents) fleet.start_agent(agent.node_id);
  auto client = fleet.client(key_name);
  REQUIRE(Fleet::eventually(
      [&] {
        for (const auto& agent : agents) {
          if (!node_state_is(*client, agent.node_id, protocol::NodeState::up)) return false;
        }
        return true;
      },
      std::chrono::seconds(15)));
  return client;
}

// A coordinator and agent n01 (revision a), up; returns a client with KEY_NAME, authorized as ROLE.
inline std::unique_ptr<cli::Client> start_one_node(Fleet& fleet, const std::string& key_name = "dev",
                                                   const std::string& role = "developer") {
  return start_nodes(fleet, {{"n01", "a"}}, key_name, role);
}

// What a test restarts the coordinator under: on an up node, a smoke job that has succeeded and
// a 3 s sleep job running (one attempt).
struct JobsInFlight {
  std::uint64_t done_id = 0;
  std::uint64_t running_id = 0;
};
inline JobsInFlight finished_and_running_jobs(cli::Client& client) {
  using namespace std::chrono_literals;
  JobsInFlight jobs;
  protocol::SubmitJob smoke;
  smoke.workload = "smoke";
  jobs.done_id = submit(client, smoke);
  REQUIRE(Fleet::eventually([&] { return job_state_is(client, jobs.done_id, protocol::JobState::succeeded); }, 15s));
  protocol::SubmitJob sleeper;
  sleeper.workload = "sleep";
  sleeper.args = {"3"};
  sleeper.chips = 1;
  sleeper.max_attempts = 1;
  jobs.running_id = submit(client, sleeper);
  REQUIRE(Fleet::eventually([&] { return job_state_is(client, jobs.running_id, protocol::JobState::running); }, 10s));
  return jobs;
}

}  // namespace kiln::testing

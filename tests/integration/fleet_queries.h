// What integration tests ask the coordinator, through a real client.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <doctest/doctest.h>

#include "common/protocol/messages.h"
#include "coordinator/cli/client.h"

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

}  // namespace kiln::testing

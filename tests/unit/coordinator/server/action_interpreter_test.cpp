// The shell's action interpreter: the ordering rules it keeps for the real server and the
// simulation, and the admission of received messages.
#include <doctest/doctest.h>

#include "coordinator/server/action_interpreter.h"
#include "tests/support/core_harness.h"

using namespace kiln;
using namespace kiln::coordinator;
using namespace kiln::protocol;
using namespace kiln::coordinator::testing;

namespace {

// The harness's memory, with a store that fails from the chosen save on.
struct FailingStore : Harness {
  int saves_before_failure = 0;

  Status save_job(const JobRecord& job) override {
    if (saves_before_failure-- <= 0) return fail(Errc::io, "disk full");
    return Harness::save_job(job);
  }
};

SubmitJob smoke() {
  SubmitJob s;
  s.workload = "smoke";
  s.chips = 1;
  s.priority_class = PriorityClass::experiment;
  s.max_attempts = 1;
  return s;
}

Frames frames_of(Envelope envelope) {
  auto frames = encode(envelope);
  REQUIRE(frames.has_value());
  return *frames;
}

}  // namespace

TEST_CASE("a failed save stops the interpreter before the reply that depends on it") {
  FailingStore io;
  io.agent("p1", "n01", hello("n01", "a"), 0);
  io.core.on_client_message("c-dev", Caller{"dev", Role::developer}, make_envelope(smoke(), 1), 10);
  const std::size_t sent_to_agent = io.to_agents.size();
  auto status = carry_out_actions(io.core, io);
  REQUIRE_FALSE(status.has_value());
  CHECK(status.error().message == "disk full");
  CHECK(io.stored_jobs.empty());
  CHECK(io.to_clients.empty());  // job_accepted was not sent
  CHECK(io.to_agents.size() == sent_to_agent);  // nor job_start
  // The reply is still the core's to give: it was left undone, not dropped on the floor.
  bool reply_left = false;
  while (auto a = io.core.poll_action()) {
    if (auto* c = std::get_if<action::ToClient>(&*a)) reply_left |= std::holds_alternative<JobAccepted>(c->body);
  }
  CHECK(reply_left);
}

TEST_CASE("a message that does not decode is refused with an error reply to its sender") {
  Harness io;
  CodecLimits limits;

  SUBCASE("a valid message is admitted and nothing is sent") {
    const Frames f = frames_of(make_envelope(Whoami{}, 5));
    auto envelope = admit_message(ReceivedFrames{"c-dev", false, "dev", f.header, f.body}, limits, io);
    REQUIRE(envelope.has_value());
    CHECK(std::holds_alternative<Whoami>(envelope->body));
    CHECK(io.to_clients.empty());
  }
  SUBCASE("a broken body: bad_message, answering the message's id, on the agent socket") {
    const Frames f = frames_of(make_envelope(Heartbeat{}, 5));
    auto envelope =
        admit_message(ReceivedFrames{"p1", true, "n01", f.header, f.body.substr(0, f.body.size() / 2)}, limits, io);
    REQUIRE_FALSE(envelope.has_value());
    CHECK(io.to_clients.empty());
    REQUIRE(io.to_agents.size() == 1);
    CHECK(io.to_agents[0].peer == "p1");
    CHECK(io.to_agents[0].corr == 5);
    const auto& reply = std::get<ErrorReply>(io.to_agents[0].body);
    CHECK(reply.code == "bad_message");
    CHECK(reply.message == envelope.error().message);
  }
  SUBCASE("an unsupported version: the reply lists the versions the coordinator speaks") {
    Envelope future = make_envelope(Whoami{}, 6);
    future.header.v = 99;
    const Frames f = frames_of(future);
    auto envelope = admit_message(ReceivedFrames{"c-dev", false, "dev", f.header, f.body}, limits, io);
    REQUIRE_FALSE(envelope.has_value());
    REQUIRE(io.to_clients.size() == 1);
    CHECK(io.to_clients[0].client == "c-dev");
    const auto& reply = std::get<ErrorReply>(io.to_clients[0].body);
    CHECK(reply.code == "unsupported_version");
    CHECK(reply.supported_versions == std::vector<std::uint32_t>(kSupportedVersions.begin(), kSupportedVersions.end()));
  }
}

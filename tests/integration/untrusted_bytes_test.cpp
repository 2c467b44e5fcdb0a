// Bytes a peer or a workload chose never stop the coordinator: every string field of every
// message, sent from both sockets with ill-formed UTF-8, is refused with an error naming the
// field, and a workload that prints binary or cuts a character at the tail's edge finishes
// with its output stored.
#include <doctest/doctest.h>

#include <signal.h>

#include <zmq.hpp>

#include "common/keys.h"
#include "common/text/utf8.h"
#include "common/transport/zmq_transport.h"
#include "tests/integration/fleet_fixture.h"
#include "tests/integration/fleet_queries.h"
#include "tests/support/message_samples.h"

using namespace kiln;
using namespace kiln::testing;
using namespace std::chrono_literals;

namespace {

// A peer that sends frames as they are, bypassing the encoder's checks.
class RawPeer {
 public:
  RawPeer(zmq::context_t& context, const Fleet& fleet, const std::string& key_name, const std::string& endpoint)
      : socket_(context, zmq::socket_type::dealer) {
    auto keys = load_secret_key_file((fleet.dir() / (key_name + ".key")).string());
    auto server = load_public_key_file((fleet.dir() / "coordinator.pub").string());
    REQUIRE(keys.has_value());
    REQUIRE(server.has_value());
    transport::configure_curve_client(socket_, *keys, *server, 1 << 20);
    socket_.connect(endpoint);
  }

  // Sends the frames and returns the reply, or nothing within the timeout.
  std::optional<protocol::Envelope> exchange(const protocol::Frames& frames) {
    REQUIRE(transport::send(socket_, nullptr, frames).has_value());
    zmq::pollitem_t item{socket_.handle(), 0, ZMQ_POLLIN, 0};
    if (zmq::poll(&item, 1, 3000ms) <= 0) return std::nullopt;
    auto received = transport::receive(socket_, false);
    if (!received) return std::nullopt;
    auto envelope = protocol::decode(received->header, received->body);
    if (!envelope) return std::nullopt;
    return std::move(*envelope);
  }

 private:
  zmq::socket_t socket_;
};

}  // namespace

TEST_CASE("ill-formed UTF-8 in any string field, from a developer or an agent key, is refused and the coordinator "
          "stays up") {
  Fleet fleet("untrusted-bytes");
  fleet.add_key("dev", "developer");
  fleet.add_key("rogue", "agent");
  fleet.start_coordinator();
  auto client = fleet.client("dev");
  REQUIRE(Fleet::eventually([&] { return client->request(protocol::Whoami{}).has_value(); }, 10s));

  zmq::context_t context;
  RawPeer from_client(context, fleet, "dev", fleet.client_endpoint());
  RawPeer from_agent(context, fleet, "rogue", fleet.agent_endpoint());
  std::size_t refused = 0;
  for_each_sample([&](const SampleMessage& sample) {
    protocol::Frames frames{sample.frames.header, with_marker_byte(sample.frames.body, '\xFF')};
    for (RawPeer* peer : {&from_client, &from_agent}) {
      auto reply = peer->exchange(frames);
      REQUIRE_MESSAGE(reply.has_value(), "no answer to ", sample.type, " with a bad ", sample.field,
                      "; coordinator log:\n", fleet.log_of("coordinator"));
      const auto* error = std::get_if<protocol::ErrorReply>(&reply->body);
      REQUIRE_MESSAGE(error != nullptr, sample.type);
      CHECK(error->code == "bad_message");
      CHECK_MESSAGE(error->message.find(sample.field) != std::string::npos, error->message);
      ++refused;
    }
  });
  CHECK(refused >= 200);  // each string field from both sockets
  // A header whose type is not UTF-8 is refused too.
  auto sample = sample_message<protocol::Whoami>(std::nullopt);
  std::string header = sample.frames.header;
  header.replace(header.find("whoami"), 1, "\xFF");
  auto reply = from_client.exchange(protocol::Frames{header, sample.frames.body});
  REQUIRE(reply.has_value());
  CHECK(std::holds_alternative<protocol::ErrorReply>(reply->body));

  CHECK(fleet.coordinator_running());
  CHECK(client->request(protocol::Whoami{}).has_value());
}

TEST_CASE("a workload that prints binary, or more than the tail holds of multi-byte text, finishes and is stored") {
  Fleet fleet("binary-output");
  fleet.add_key("dev", "developer");
  fleet.add_agent({"n01"});
  fleet.start_coordinator();
  fleet.start_agent("n01");
  auto client = fleet.client("dev");
  REQUIRE(Fleet::eventually([&] { return node_state_is(*client, "n01", protocol::NodeState::up); }, 20s));

  auto shell_job = [&](const std::string& script) {
    protocol::SubmitJob s;
    s.workload = "shell";
    s.args = {"-c", script};
    s.chips = 1;
    return submit(*client, s);
  };
  const auto binary = shell_job("printf 'before\\377\\376\\000\\200after\\n'");
  // 100,001 bytes of "é\n": the 64 KiB tail starts inside a character.
  const auto wide = shell_job("yes '\xC3\xA9' | head -c 100001");
  for (auto id : {binary, wide}) {
    REQUIRE_MESSAGE(Fleet::eventually([&] { return job_ended(*client, id); }, 30s), fleet.log_of("coordinator"));
    auto detail = job(*client, id);
    REQUIRE(detail.has_value());
    CHECK_MESSAGE(detail->job.state == protocol::JobState::succeeded, detail->job.detail);
    CHECK(text::is_valid_utf8(detail->output_tail));
  }
  auto shown = job(*client, binary);
  CHECK(shown->output_tail.starts_with("before"));
  CHECK(shown->output_tail.find("\xEF\xBF\xBD") != std::string::npos);
  CHECK(shown->output_tail.find("after") != std::string::npos);
  auto tail = job(*client, wide);
  CHECK(tail->output_tail.size() <= protocol::kOutputTail.max_len);
  CHECK(tail->output_tail.size() >= protocol::kOutputTail.max_len - 3);
  CHECK(tail->output_tail.ends_with("\xC3\xA9"));
  CHECK(tail->output_tail.find("\xEF\xBF\xBD") == std::string::npos);

  // The stored jobs survive a restart of the coordinator, which reads them back.
  fleet.stop_coordinator(SIGKILL);
  fleet.start_coordinator();
  REQUIRE(Fleet::eventually([&] { return job(*client, wide).has_value(); }, 20s));
  CHECK(job(*client, wide)->output_tail == tail->output_tail);
  CHECK(fleet.coordinator_running());
  std::string out;
  CHECK(fleet.kiln("dev", {"result", std::to_string(binary)}, &out) == 0);
}

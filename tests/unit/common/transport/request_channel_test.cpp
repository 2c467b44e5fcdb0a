// The request channel against a stand-in coordinator on loopback: a read asked of a coordinator
// that dies before answering is asked again of the next one, a submit never is; with several
// coordinators listed, what a standby refused or none could receive goes to the next.
#include <doctest/doctest.h>

#include <chrono>
#include <future>
#include <optional>

#include "common/keys.h"
#include "common/protocol/messages.h"
#include "common/transport/request_channel.h"

using namespace kiln;
using namespace std::chrono_literals;

namespace {

// Takes requests like the coordinator's client endpoint and answers only when told to.
class StandIn {
 public:
  StandIn(const KeyPair& keys, const std::string& endpoint) : router_(context_, zmq::socket_type::router) {
    transport::configure_curve_server(router_, keys, "kiln", 1 << 20);
    router_.bind(endpoint);
  }

  std::string endpoint() { return router_.get(zmq::sockopt::last_endpoint); }

  std::optional<transport::Received> take(std::chrono::milliseconds within) {
    zmq::pollitem_t item{router_.handle(), 0, ZMQ_POLLIN, 0};
    if (zmq::poll(&item, 1, within) == 0) return std::nullopt;
    auto received = transport::receive(router_, true);
    REQUIRE(received.has_value());
    return *received;
  }

  void answer(const transport::Received& request, protocol::Body reply) {
    auto envelope = protocol::decode(request.header, request.body);
    REQUIRE(envelope.has_value());
    auto sent = transport::send_envelope(router_, &request.routing_id,
                                         protocol::make_envelope(std::move(reply), 1, envelope->header.id), {});
    REQUIRE(sent.has_value());
  }

 private:
  zmq::context_t context_;
  zmq::socket_t router_;
};

struct Keys {
  KeyPair server = *generate_keypair();
  KeyPair client = *generate_keypair();
};

transport::Reconnect following_from_the_start() {
  transport::Reconnect reconnect;
  reconnect.enabled = true;
  reconnect.before_first_answer = true;
  reconnect.initial_ms = 50;
  reconnect.max_ms = 200;
  reconnect.give_up_ms = 20000;
  return reconnect;
}

}  // namespace

TEST_CASE("a read whose coordinator dies before answering is asked again of the coordinator that comes back") {
  Keys keys;
  auto first = std::make_optional<StandIn>(keys.server, "tcp://127.0.0.1:*");
  const std::string endpoint = first->endpoint();
  transport::RequestChannel channel({endpoint}, keys.client, keys.server.public_key, 10000, following_from_the_start());
  auto reply = std::async(std::launch::async, [&] { return channel.request(protocol::Whoami{}, true); });

  // The request arrives, and its coordinator goes away without a word.
  REQUIRE(first->take(10s).has_value());
  first.reset();

  StandIn second(keys.server, endpoint);
  auto again = second.take(10s);
  REQUIRE_MESSAGE(again.has_value(), "the read was not asked again after the connection dropped");
  second.answer(*again, protocol::WhoamiReply{"ci", protocol::Role::ci, protocol::kProtocolVersion, "test"});
  REQUIRE(reply.wait_for(10s) == std::future_status::ready);
  auto body = reply.get();
  REQUIRE_MESSAGE(body.has_value(), body.error().message);
  CHECK(std::holds_alternative<protocol::WhoamiReply>(*body));
}

TEST_CASE("a request that may not be repeated fails when its connection drops, and is not sent again") {
  Keys keys;
  auto first = std::make_optional<StandIn>(keys.server, "tcp://127.0.0.1:*");
  const std::string endpoint = first->endpoint();
  transport::RequestChannel channel({endpoint}, keys.client, keys.server.public_key, 10000, following_from_the_start());
  auto reply = std::async(std::launch::async, [&] { return channel.request(protocol::Whoami{}, false); });
  REQUIRE(first->take(10s).has_value());
  first.reset();

  StandIn second(keys.server, endpoint);
  REQUIRE(reply.wait_for(10s) == std::future_status::ready);
  auto body = reply.get();
  REQUIRE_FALSE(body.has_value());
  CHECK(body.error().code == Errc::unavailable);
  CHECK_FALSE(second.take(1s).has_value());
}

TEST_CASE("a submit sent while the coordinator is away fails, and is not carried out when it comes back") {
  Keys keys;
  auto first = std::make_optional<StandIn>(keys.server, "tcp://127.0.0.1:*");
  const std::string endpoint = first->endpoint();
  transport::RequestChannel channel({endpoint}, keys.client, keys.server.public_key, 2000, following_from_the_start());
  // Connected and answered once, as a qualifier is before the coordinator restarts.
  auto hello = std::async(std::launch::async, [&] { return channel.request(protocol::Whoami{}, true); });
  auto asked_first = first->take(10s);
  REQUIRE(asked_first.has_value());
  first->answer(*asked_first, protocol::WhoamiReply{"ci", protocol::Role::ci, protocol::kProtocolVersion, "test"});
  REQUIRE(hello.get().has_value());
  first.reset();
  auto body = channel.request(protocol::Whoami{}, false);
  REQUIRE_FALSE(body.has_value());
  CHECK(body.error().code == Errc::unavailable);
  // The coordinator is back: what the caller was told failed must not arrive now.
  StandIn second(keys.server, endpoint);
  CHECK_FALSE(second.take(1500ms).has_value());
  // The next request goes through.
  auto reply = std::async(std::launch::async, [&] { return channel.request(protocol::Whoami{}, true); });
  auto asked = second.take(10s);
  REQUIRE(asked.has_value());
  second.answer(*asked, protocol::WhoamiReply{"ci", protocol::Role::ci, protocol::kProtocolVersion, "test"});
  REQUIRE(reply.wait_for(10s) == std::future_status::ready);
  CHECK(reply.get().has_value());
}

TEST_CASE("connections given up while the coordinator is away leave the channel working when it is back") {
  Keys keys;
  auto first = std::make_optional<StandIn>(keys.server, "tcp://127.0.0.1:*");
  const std::string endpoint = first->endpoint();
  transport::RequestChannel channel({endpoint}, keys.client, keys.server.public_key, 300, following_from_the_start());
  first.reset();
  // Each failed request closes its connection while ZeroMQ reports retries on it.
  for (int i = 0; i < 5; ++i) CHECK_FALSE(channel.request(protocol::Whoami{}, false).has_value());
  StandIn second(keys.server, endpoint);
  auto reply = std::async(std::launch::async, [&] { return channel.request(protocol::Whoami{}, true); });
  auto asked = second.take(10s);
  REQUIRE_MESSAGE(asked.has_value(), "the channel's sockets no longer send: its I/O thread hangs");
  second.answer(*asked, protocol::WhoamiReply{"ci", protocol::Role::ci, protocol::kProtocolVersion, "test"});
  REQUIRE(reply.wait_for(10s) == std::future_status::ready);
  CHECK(reply.get().has_value());
}

TEST_CASE("a person's client that never heard the coordinator reports the silence instead of retrying") {
  Keys keys;
  StandIn silent(keys.server, "tcp://127.0.0.1:*");
  transport::Reconnect reconnect = following_from_the_start();
  reconnect.before_first_answer = false;
  transport::RequestChannel channel({silent.endpoint()}, keys.client, keys.server.public_key, 500, reconnect);
  auto body = channel.request(protocol::Whoami{}, true);
  REQUIRE_FALSE(body.has_value());
  CHECK(body.error().code == Errc::timeout);
  CHECK(body.error().message.find(silent.endpoint()) != std::string::npos);
  // It was asked once.
  CHECK(silent.take(100ms).has_value());
  CHECK_FALSE(silent.take(300ms).has_value());
}

TEST_CASE("a submission a standby refused, or that found no coordinator listening, goes to the next one listed") {
  Keys keys;
  StandIn standby(keys.server, "tcp://127.0.0.1:*");
  StandIn active(keys.server, "tcp://127.0.0.1:*");
  // Nothing listens on the first address: its connection is refused.
  std::string nobody;
  {
    StandIn gone(keys.server, "tcp://127.0.0.1:*");
    nobody = gone.endpoint();
  }
  transport::Reconnect once;  // a person's client: never asks twice what may have been done
  transport::RequestChannel channel({nobody, standby.endpoint(), active.endpoint()}, keys.client,
                                    keys.server.public_key, 10000, once);
  protocol::SubmitJob submit;
  submit.workload = "smoke";
  auto reply = std::async(std::launch::async, [&] { return channel.request(submit, false); });
  auto refused = standby.take(10s);
  REQUIRE(refused.has_value());
  standby.answer(*refused, protocol::ErrorReply{"standby", "this coordinator is a standby and did nothing", {}});
  auto taken = active.take(10s);
  REQUIRE(taken.has_value());
  active.answer(*taken, protocol::JobAccepted{7});
  REQUIRE(reply.wait_for(10s) == std::future_status::ready);
  auto body = reply.get();
  REQUIRE(body.has_value());
  CHECK(std::get<protocol::JobAccepted>(*body).job_id == 7);
  // Each coordinator was asked once.
  CHECK_FALSE(standby.take(200ms).has_value());
  CHECK_FALSE(active.take(200ms).has_value());
}

TEST_CASE("when every coordinator listed refuses, the error says what each one said") {
  Keys keys;
  StandIn standby(keys.server, "tcp://127.0.0.1:*");
  std::string nobody;
  {
    StandIn gone(keys.server, "tcp://127.0.0.1:*");
    nobody = gone.endpoint();
  }
  transport::Reconnect once;
  transport::RequestChannel channel({standby.endpoint(), nobody}, keys.client, keys.server.public_key, 1000, once);
  auto reply = std::async(std::launch::async, [&] { return channel.request(protocol::Whoami{}, true); });
  while (auto asked = standby.take(1500ms)) {
    standby.answer(*asked, protocol::ErrorReply{"standby", "a standby: the active one is elsewhere", {}});
  }
  REQUIRE(reply.wait_for(10s) == std::future_status::ready);
  auto body = reply.get();
  REQUIRE_FALSE(body.has_value());
  CHECK(body.error().code == Errc::unavailable);
  CHECK(body.error().message.find("none of the 2 coordinators listed took the request") != std::string::npos);
  CHECK(body.error().message.find(standby.endpoint() + ": a standby: the active one is elsewhere") != std::string::npos);
  CHECK(body.error().message.find(nobody + ": refused the connection") != std::string::npos);
}

#include "common/transport/request_channel.h"

#include <algorithm>
#include <chrono>
#include <thread>
#include <utility>

#include <fmt/format.h>

namespace kiln::transport {

RequestChannel::RequestChannel(std::string endpoint, KeyPair keys, std::string server_key, std::uint32_t timeout_ms,
                               Reconnect reconnect)
    : endpoint_(std::move(endpoint)),
      keys_(std::move(keys)),
      server_key_(std::move(server_key)),
      timeout_ms_(timeout_ms),
      reconnect_(std::move(reconnect)) {
  open();
}

RequestChannel::~RequestChannel() = default;

Result<protocol::Body> RequestChannel::request(const protocol::Body& body, bool may_repeat) {
  const bool following = reconnect_.enabled && (answered_ || reconnect_.before_first_answer);
  if (!following || !may_repeat) {
    Exchange attempt = exchange(body, following);
    // A request that got no answer may still wait in the socket's queue (the coordinator was
    // away, or a handshake broke off): a new socket drops it, so it is not carried out later
    // behind the back of a caller who was told it failed.
    if (!attempt.answered) open();
    return std::move(attempt.reply);
  }
  const auto since = std::chrono::steady_clock::now();
  std::uint32_t backoff_ms = reconnect_.initial_ms;
  while (true) {
    Exchange attempt = exchange(body, true);
    if (!attempt.connection_lost) {
      if (!attempt.answered) open();
      return std::move(attempt.reply);
    }
    const auto silent_ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - since).count();
    if (silent_ms >= reconnect_.give_up_ms) {
      return fail(Errc::unavailable,
                  fmt::format("the coordinator at {} has not answered for {} s; {}", endpoint_, silent_ms / 1000,
                              reconnect_.give_up_advice));
    }
    if (reconnect_.notice) {
      reconnect_.notice(fmt::format("the coordinator at {} is not answering ({}); reconnecting in {} ms", endpoint_,
                                    attempt.reply.error().message, backoff_ms));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(backoff_ms));
    backoff_ms = std::min(2 * backoff_ms, reconnect_.max_ms);
    open();
  }
}

// A new connection: a new socket, so nothing queued on the old one is sent late.
void RequestChannel::open() {
  monitor_.reset();
  socket_ = zmq::socket_t(context_, zmq::socket_type::dealer);
  configure_curve_client(socket_, keys_, server_key_, limits_.max_message_bytes);
  monitor_ = std::make_unique<HandshakeMonitor>(context_, socket_, fmt::format("request-{}", connections_++));
  socket_.connect(endpoint_);
}

RequestChannel::Exchange RequestChannel::exchange(const protocol::Body& body, bool following) {
  const std::uint64_t id = next_id_++;
  auto envelope = protocol::make_envelope(body, id);
  if (auto auth = monitor_->poll(); !auth) return {tl::unexpected(auth.error())};
  (void)monitor_->take_connection_lost();  // what happened before this request does not matter to it
  if (auto s = send_envelope(socket_, nullptr, envelope, limits_); !s) {
    // A DEALER queues until connected; a full queue means the coordinator is unreachable.
    return {tl::unexpected(s.error()), following};
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms_);
  while (true) {
    if (auto auth = monitor_->poll(); !auth) return {tl::unexpected(auth.error())};
    if (following && monitor_->take_connection_lost()) return {fail(Errc::unavailable, "the connection dropped"), true};
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      return {fail(Errc::timeout, fmt::format("no answer from the coordinator at {} within {} ms; is it running, and "
                                              "is the address right?",
                                              endpoint_, timeout_ms_)),
              following};
    }
    zmq::pollitem_t items[] = {{socket_.handle(), 0, ZMQ_POLLIN, 0}, {monitor_->socket().handle(), 0, ZMQ_POLLIN, 0}};
    try {
      zmq::poll(items, 2, std::min<std::chrono::milliseconds>(left, std::chrono::milliseconds(100)));
    } catch (const zmq::error_t& e) {
      if (e.num() == EINTR) return {fail(Errc::io, "interrupted")};
      return {fail(Errc::io, e.what())};
    }
    if (!(items[0].revents & ZMQ_POLLIN)) continue;
    auto received = receive(socket_, false);
    if (!received) continue;
    auto reply = protocol::decode(received->header, received->body, limits_);
    if (!reply) {
      return {fail(reply.error().code, "the coordinator's reply was invalid: " + reply.error().message), false, true};
    }
    if (reply->header.corr != id) continue;  // a late reply to an earlier, timed-out request
    answered_ = true;
    if (auto* error = std::get_if<protocol::ErrorReply>(&reply->body)) {
      return {fail(errc_from_string(error->code).value_or(Errc::internal), error->message), false, true};
    }
    return {std::move(reply->body), false, true};
  }
}

}  // namespace kiln::transport

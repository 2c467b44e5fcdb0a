#include "common/transport/request_channel.h"

#include <algorithm>
#include <chrono>
#include <thread>
#include <utility>

#include <fmt/format.h>

namespace kiln::transport {

namespace {

// How long a request waits for a connection to one of several coordinators before it tries the
// next: a CURVE handshake on a live host takes milliseconds.
constexpr std::uint32_t kHandshakeWaitMs = 2000;

std::uint64_t ms_since(std::chrono::steady_clock::time_point since) {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - since).count());
}

}  // namespace

RequestChannel::RequestChannel(std::vector<std::string> endpoints, KeyPair keys, std::string server_key,
                               std::uint32_t timeout_ms, Reconnect reconnect)
    : endpoints_(std::move(endpoints)),
      last_answers_(endpoints_.size()),
      keys_(std::move(keys)),
      server_key_(std::move(server_key)),
      timeout_ms_(timeout_ms),
      reconnect_(std::move(reconnect)) {
  open();
}

RequestChannel::~RequestChannel() = default;

Result<protocol::Body> RequestChannel::request(const protocol::Body& body, bool may_repeat) {
  const bool following = reconnect_.enabled && (answered_ || reconnect_.before_first_answer);
  const auto since = std::chrono::steady_clock::now();
  std::uint32_t backoff_ms = reconnect_.initial_ms;
  std::size_t untaken_in_a_row = 0;
  while (true) {
    Exchange attempt = exchange(body, following);
    if (attempt.untaken && endpoints_.size() > 1) {
      // Nothing was done, so the next coordinator of the list may do it, whatever was asked.
      last_answers_[current_] = attempt.reply.error().message;
      move_on();
      if (++untaken_in_a_row % endpoints_.size() != 0) continue;
      // Every coordinator listed refused or could not be reached: a standby may be taking over.
      const std::uint64_t allowed_ms = following ? reconnect_.give_up_ms : timeout_ms_;
      if (ms_since(since) >= allowed_ms) return none_took(ms_since(since));
      std::this_thread::sleep_for(std::chrono::milliseconds(std::min<std::uint64_t>(backoff_ms, allowed_ms)));
      backoff_ms = std::min(2 * backoff_ms, reconnect_.max_ms);
      continue;
    }
    if (!following || !may_repeat || !attempt.connection_lost) {
      // A request that got no answer may still wait in the socket's queue (the coordinator was
      // away, or a handshake broke off): a new socket drops it, so it is not carried out later
      // behind the back of a caller who was told it failed. The next request tries the next
      // coordinator listed, which may have taken over.
      if (!attempt.answered) move_on();
      return std::move(attempt.reply);
    }
    const auto silent_ms = ms_since(since);
    if (silent_ms >= reconnect_.give_up_ms) {
      return fail(Errc::unavailable,
                  fmt::format("the coordinator at {} has not answered for {} s; {}", endpoint(), silent_ms / 1000,
                              reconnect_.give_up_advice));
    }
    if (reconnect_.notice) {
      reconnect_.notice(fmt::format("the coordinator at {} is not answering ({}); reconnecting in {} ms", endpoint(),
                                    attempt.reply.error().message, backoff_ms));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(backoff_ms));
    backoff_ms = std::min(2 * backoff_ms, reconnect_.max_ms);
    move_on();
  }
}

Result<protocol::Body> RequestChannel::none_took(std::uint64_t elapsed_ms) {
  std::string why;
  for (std::size_t i = 0; i < endpoints_.size(); ++i) why += fmt::format("; {}: {}", endpoints_[i], last_answers_[i]);
  return fail(Errc::unavailable, fmt::format("none of the {} coordinators listed took the request within {} s{}; "
                                             "check that one of them is active (`kiln-coordinator` logs "
                                             "\"taking over\" or \"listening\")",
                                             endpoints_.size(), elapsed_ms / 1000, why));
}

void RequestChannel::move_on() {
  current_ = (current_ + 1) % endpoints_.size();
  open();
}

// A new connection: a new socket, so nothing queued on the old one is sent late.
void RequestChannel::open() {
  monitor_.reset();
  socket_ = zmq::socket_t(context_, zmq::socket_type::dealer);
  configure_curve_client(socket_, keys_, server_key_, limits_.max_message_bytes);
  monitor_ = std::make_unique<HandshakeMonitor>(context_, socket_, fmt::format("request-{}", connections_++));
  socket_.connect(endpoint());
}

RequestChannel::Exchange RequestChannel::exchange(const protocol::Body& body, bool following) {
  const std::uint64_t id = next_id_++;
  auto envelope = protocol::make_envelope(body, id);
  if (auto auth = monitor_->poll(); !auth) return {tl::unexpected(auth.error())};
  (void)monitor_->take_connection_lost();  // what happened before this request does not matter to it
  if (auto s = send_envelope(socket_, nullptr, envelope, limits_); !s) {
    // A DEALER queues until connected; a full queue means the coordinator is unreachable.
    return {tl::unexpected(s.error()), following, false, !monitor_->succeeded()};
  }
  const auto sent = std::chrono::steady_clock::now();
  const auto deadline = sent + std::chrono::milliseconds(timeout_ms_);
  const bool several = endpoints_.size() > 1;
  while (true) {
    if (auto auth = monitor_->poll(); !auth) return {tl::unexpected(auth.error())};
    const bool lost = monitor_->take_connection_lost();
    // Before a CURVE handshake nothing reaches the coordinator: with others listed, a refused or
    // slow connection moves on at once, a submission included.
    if (several && !monitor_->succeeded() && (lost || ms_since(sent) >= kHandshakeWaitMs)) {
      return {fail(Errc::unavailable, lost ? "refused the connection" : "did not complete a connection"), true, false,
              true};
    }
    if (following && lost) return {fail(Errc::unavailable, "the connection dropped"), true};
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      return {fail(Errc::timeout, fmt::format("no answer from the coordinator at {} within {} ms; is it running, and "
                                              "is the address right?",
                                              endpoint(), timeout_ms_)),
              following, false, !monitor_->succeeded()};
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
    if (auto* error = std::get_if<protocol::ErrorReply>(&reply->body)) {
      const Errc code = errc_from_string(error->code).value_or(Errc::internal);
      if (code == Errc::standby) return {fail(code, error->message), false, false, true};
      answered_ = true;
      return {fail(code, error->message), false, true};
    }
    answered_ = true;
    return {std::move(reply->body), false, true};
  }
}

}  // namespace kiln::transport

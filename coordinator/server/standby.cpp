#include "coordinator/server/standby.h"

#include <unistd.h>

#include <chrono>

#include <fmt/format.h>
#include <zmq.hpp>

#include "common/protocol/codec.h"
#include "common/transport/zmq_transport.h"
#include "coordinator/server/coordinator_sockets.h"

namespace kiln::coordinator {
namespace {

constexpr int kRefusalsPerTurn = 1000;

// Every message is refused with `standby`: nothing is done, so whatever it asked may go to the
// next coordinator of the caller's list, a submission included.
void refuse_all(zmq::socket_t& socket, const std::string& why, const protocol::CodecLimits& limits,
                std::uint64_t& next_id, spdlog::logger& logger) {
  for (int i = 0; i < kRefusalsPerTurn; ++i) {
    auto received = transport::receive(socket, true);
    if (!received) {
      if (received.error().code == Errc::unavailable) return;
      continue;
    }
    auto header = protocol::decode_header(received->header, limits);
    if (!header) continue;
    auto reply = protocol::make_envelope(protocol::ErrorReply{std::string(to_string(Errc::standby)), why, {}},
                                         next_id++, header->id);
    if (auto s = transport::send_envelope(socket, &received->routing_id, reply, limits, received->delimited); !s) {
      logger.debug("could not tell a caller this coordinator is a standby: {}", s.error().message);
    }
  }
}

}  // namespace

std::string coordinator_name() {
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) != 0) return "kiln-coordinator";
  return fmt::format("kiln-coordinator on {}", host);
}

Result<bool> wait_until_leading(Store& store, const CoordinatorConfig& config, const KeyPair& keys,
                                spdlog::logger& logger, const std::atomic<bool>& stop, int retry_ms) {
  const std::string name = coordinator_name();
  auto led = store.try_lead(name);
  if (!led) return tl::unexpected(led.error());
  if (*led) return true;

  CoordinatorSockets sockets;
  if (auto s = bind_sockets(sockets, config, keys); !s) return tl::unexpected(s.error());
  // The serving coordinator binds these addresses the moment this one takes over.
  sockets.agents.set(zmq::sockopt::linger, 0);
  sockets.clients.set(zmq::sockopt::linger, 0);
  protocol::CodecLimits limits;
  limits.max_message_bytes = config.max_message_bytes;

  std::string leader;
  const auto refusal = [&] {
    return fmt::format("this coordinator ({}) is a standby and did nothing; the active one is {}; ask the next "
                       "coordinator in your configuration's list",
                       name, leader);
  };
  auto holder = store.leader();
  if (!holder) return tl::unexpected(holder.error());
  leader = *holder;
  logger.info("standing by: the {} is led by {}; answering `standby` on {} and {} until it can take over",
              store_description(config), leader, config.agent_endpoint, config.client_endpoint);
  const auto since = std::chrono::steady_clock::now();
  std::uint64_t next_id = 1;
  auto next_try = std::chrono::steady_clock::now() + std::chrono::milliseconds(retry_ms);
  while (!stop.load()) {
    zmq::pollitem_t items[] = {{sockets.zap.handle(), 0, ZMQ_POLLIN, 0},
                               {sockets.agents.handle(), 0, ZMQ_POLLIN, 0},
                               {sockets.clients.handle(), 0, ZMQ_POLLIN, 0}};
    const auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(next_try - std::chrono::steady_clock::now());
    try {
      zmq::poll(items, 3, std::max(wait, std::chrono::milliseconds(0)));
    } catch (const zmq::error_t& e) {
      if (e.num() == EINTR) continue;
      return fail(Errc::io, fmt::format("poll failed: {}", e.what()));
    }
    if (items[0].revents & ZMQ_POLLIN) answer_zap(sockets, config, logger);
    if (items[1].revents & ZMQ_POLLIN) refuse_all(sockets.agents, refusal(), limits, next_id, logger);
    if (items[2].revents & ZMQ_POLLIN) refuse_all(sockets.clients, refusal(), limits, next_id, logger);
    if (std::chrono::steady_clock::now() < next_try) continue;
    next_try = std::chrono::steady_clock::now() + std::chrono::milliseconds(retry_ms);
    auto taken = store.try_lead(name);
    if (!taken) return tl::unexpected(taken.error());
    if (*taken) {
      const auto waited_ms =
          std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - since).count();
      logger.warn("taking over: {} no longer leads the {} (stood by for {} ms)", leader, store_description(config),
                  waited_ms);
      return true;
    }
    holder = store.leader();
    if (!holder) return tl::unexpected(holder.error());
    if (*holder != leader) logger.info("the {} is now led by {}", store_description(config), *holder);
    leader = *holder;
  }
  return false;
}

}  // namespace kiln::coordinator

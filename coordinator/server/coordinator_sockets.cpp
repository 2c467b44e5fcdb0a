#include "coordinator/server/coordinator_sockets.h"

#include <charconv>
#include <cstdint>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "common/protocol/roles.h"
#include "common/transport/zmq_transport.h"

namespace kiln::coordinator {
namespace {

constexpr const char* kZapEndpoint = "inproc://zeromq.zap.01";
constexpr const char* kAgentDomain = "agents";
constexpr const char* kClientDomain = "clients";
// ZMQ_AFFINITY bits: the I/O thread that carries each socket's connections.
constexpr int kIoThreads = 2;
constexpr std::uint64_t kAgentIoThread = 1;
constexpr std::uint64_t kClientIoThread = 2;

}  // namespace

CoordinatorSockets::CoordinatorSockets()
    : context(kIoThreads),
      zap(context, zmq::socket_type::rep),
      agents(context, zmq::socket_type::router),
      clients(context, zmq::socket_type::router) {}

Status bind_sockets(CoordinatorSockets& sockets, const CoordinatorConfig& config, const KeyPair& keys) {
  try {
    sockets.zap.bind(kZapEndpoint);
    for (auto* s : {&sockets.agents, &sockets.clients}) {
      transport::configure_curve_server(*s, keys, s == &sockets.agents ? kAgentDomain : kClientDomain,
                                        config.max_message_bytes);
      s->set(zmq::sockopt::router_mandatory, 1);
    }
    sockets.agents.set(zmq::sockopt::affinity, kAgentIoThread);
    sockets.clients.set(zmq::sockopt::affinity, kClientIoThread);
    sockets.agents.bind(config.agent_endpoint);
    sockets.clients.bind(config.client_endpoint);
  } catch (const zmq::error_t& e) {
    return fail(Errc::io, fmt::format("cannot listen on {} / {}: {}; is another coordinator running, or is "
                                      "the address wrong in {}?",
                                      config.agent_endpoint, config.client_endpoint, e.what(), config.source_path));
  }
  return {};
}

void answer_zap(CoordinatorSockets& sockets, const CoordinatorConfig& config, spdlog::logger& logger) {
  zmq::socket_t& zap = sockets.zap;
  std::vector<zmq::message_t> frames;
  do {
    zmq::message_t f;
    if (!zap.recv(f, zmq::recv_flags::dontwait)) break;
    frames.push_back(std::move(f));
  } while (zap.get(zmq::sockopt::rcvmore));
  if (frames.size() < 6) return;
  const std::string version = frames[0].to_string();
  const std::string request_id = frames[1].to_string();
  const std::string domain = frames[2].to_string();
  const std::string address = frames[3].to_string();
  const std::string mechanism = frames[5].to_string();
  std::string status = "400";
  std::string text = "unknown key";
  std::string user_id;
  if (mechanism == "CURVE" && frames.size() >= 7 && frames[6].size() == 32) {
    char z85[41] = {};
    zmq_z85_encode(z85, static_cast<const uint8_t*>(frames[6].data()), 32);
    auto it = config.key_index_by_public_key.find(z85);
    if (it == config.key_index_by_public_key.end()) {
      logger.warn("refused a connection from {} with unknown key {} on the {} socket", address, z85, domain);
    } else {
      const AuthorizedKey& key = config.authorized_keys[it->second];
      const bool is_agent = key.role == protocol::Role::agent;
      if (is_agent != (domain == kAgentDomain)) {
        text = "wrong socket for this role";
        logger.warn("refused key '{}' ({}) from {} on the {} socket: agent keys use the agent endpoint, "
                    "other roles the client endpoint",
                    key.name, protocol::enum_name(key.role), address, domain);
      } else {
        status = "200";
        text = "OK";
        user_id = std::to_string(it->second);
      }
    }
  } else {
    logger.warn("refused a connection from {} using {}: only CURVE is accepted", address, mechanism);
  }
  try {
    zap.send(zmq::buffer(version), zmq::send_flags::sndmore);
    zap.send(zmq::buffer(request_id), zmq::send_flags::sndmore);
    zap.send(zmq::buffer(status), zmq::send_flags::sndmore);
    zap.send(zmq::buffer(text), zmq::send_flags::sndmore);
    zap.send(zmq::buffer(user_id), zmq::send_flags::sndmore);
    zap.send(zmq::str_buffer(""), zmq::send_flags::none);
  } catch (const zmq::error_t& e) {
    logger.error("cannot answer a ZAP request: {}", e.what());
  }
}

const AuthorizedKey& authorized_key_of(const CoordinatorConfig& config, std::string_view user_id) {
  std::size_t index = 0;
  const auto [end, error] = std::from_chars(user_id.data(), user_id.data() + user_id.size(), index);
  KILN_ASSERT(error == std::errc() && end == user_id.data() + user_id.size() && index < config.authorized_keys.size(),
              "ZAP admits only authorized keys, each named by its index");
  return config.authorized_keys[index];
}

}  // namespace kiln::coordinator

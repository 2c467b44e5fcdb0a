// The coordinator's two CURVE ROUTER sockets and the ZAP handler that admits each public key
// to one of them by its role. The serving coordinator and a standby bind them the same way.
//
// Each ROUTER has a ZeroMQ I/O thread of its own: the agents' thread decrypts thousands of
// heartbeats a second, and after a stall works through seconds of them, while a client's request
// on the other thread is read at once.
#pragma once

#include <zmq.hpp>

#include "common/error.h"
#include "common/keys.h"
#include "common/logging.h"
#include "coordinator/server/coordinator_config.h"

namespace kiln::coordinator {

struct CoordinatorSockets {
  CoordinatorSockets();
  zmq::context_t context;
  zmq::socket_t zap;
  zmq::socket_t agents;
  zmq::socket_t clients;
};

// Binds the ZAP handler first (it must exist before a CURVE socket accepts a connection), then
// the agent and client endpoints of `config`.
Status bind_sockets(CoordinatorSockets& sockets, const CoordinatorConfig& config, const KeyPair& keys);

// Answers one ZAP request (RFC 27) waiting on `sockets.zap`: an authorized key on the socket of
// its role is admitted with the key's position in `config.authorized_keys` as the user id, so
// each later message can be traced to one key and its role; anything else is refused and logged.
void answer_zap(CoordinatorSockets& sockets, const CoordinatorConfig& config, spdlog::logger& logger);

// The key that `answer_zap` admitted as `user_id`, the User-Id of each message received.
const AuthorizedKey& authorized_key_of(const CoordinatorConfig& config, std::string_view user_id);

}  // namespace kiln::coordinator

// One request at a time to the coordinator over a DEALER socket with CURVE, the reply matched
// by corr, and what to do when the connection drops: the kiln client and the agent's artifact
// fetcher both talk to the coordinator this way.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include <zmq.hpp>

#include "common/error.h"
#include "common/keys.h"
#include "common/protocol/codec.h"
#include "common/transport/reconnect.h"
#include "common/transport/zmq_transport.h"

namespace kiln::transport {

class RequestChannel {
 public:
  // Throws zmq::error_t when the endpoint cannot be used at all (a malformed address).
  RequestChannel(std::string endpoint, KeyPair keys, std::string server_key, std::uint32_t timeout_ms,
                 Reconnect reconnect);
  ~RequestChannel();

  // Sends one request and waits for its reply; `may_repeat` says asking twice changes nothing
  // (a read or a watch). An ErrorReply comes back as an Error with the coordinator's code and
  // message.
  Result<protocol::Body> request(const protocol::Body& body, bool may_repeat);

  void set_give_up_ms(std::uint32_t give_up_ms) { reconnect_.give_up_ms = give_up_ms; }
  void set_timeout_ms(std::uint32_t timeout_ms) { timeout_ms_ = timeout_ms; }

 private:
  struct Exchange {
    Result<protocol::Body> reply;
    bool connection_lost = false;  // no reply can come on this connection: ask again on a new one
    bool answered = false;         // the coordinator replied (maybe with an error)
  };

  void open();
  Exchange exchange(const protocol::Body& body, bool following);

  std::string endpoint_;
  KeyPair keys_;
  std::string server_key_;
  std::uint32_t timeout_ms_;
  Reconnect reconnect_;
  protocol::CodecLimits limits_;
  zmq::context_t context_;
  zmq::socket_t socket_;
  std::unique_ptr<HandshakeMonitor> monitor_;
  std::uint64_t connections_ = 0;
  std::uint64_t next_id_ = 1;
  bool answered_ = false;  // the coordinator has answered once: from now on this requester follows
};

}  // namespace kiln::transport

// One request at a time to the coordinator over a DEALER socket with CURVE, the reply matched
// by corr, and what to do when the connection drops: the kiln client and the agent's artifact
// fetcher both talk to the coordinator this way. With several coordinators listed (an active
// one and its standbys, docs/operations.md), a request that none of them took (a standby's
// `standby`, or no connection ever made) goes to the next one in the list.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <zmq.hpp>

#include "common/error.h"
#include "common/keys.h"
#include "common/protocol/codec.h"
#include "common/transport/reconnect.h"
#include "common/transport/zmq_transport.h"

namespace kiln::transport {

class RequestChannel {
 public:
  // `endpoints` holds one or more addresses, tried in order. Throws zmq::error_t when an
  // endpoint cannot be used at all (a malformed address).
  RequestChannel(std::vector<std::string> endpoints, KeyPair keys, std::string server_key, std::uint32_t timeout_ms,
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
    bool untaken = false;          // certainly not carried out: a standby's refusal, or never connected
  };

  void open();
  // The next coordinator of the list, on a new connection.
  void move_on();
  Result<protocol::Body> none_took(std::uint64_t elapsed_ms);
  Exchange exchange(const protocol::Body& body, bool following);
  const std::string& endpoint() const { return endpoints_[current_]; }

  std::vector<std::string> endpoints_;
  std::size_t current_ = 0;
  std::vector<std::string> last_answers_;  // per endpoint: why it did not take the last request
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

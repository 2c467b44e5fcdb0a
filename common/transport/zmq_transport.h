// ZeroMQ plumbing shared by the coordinator, the agent and the client: CURVE setup, the
// two-frame message format, and a monitor that turns a refused CURVE handshake into an
// error a person can act on.
#pragma once

#include <optional>
#include <string>
#include <utility>

#include <zmq.hpp>

#include "common/error.h"
#include "common/keys.h"
#include "common/protocol/codec.h"

namespace kiln::transport {

struct Received {
  std::string routing_id;  // ROUTER sockets only
  bool delimited = false;  // the peer is a REQ socket: replies carry an empty delimiter frame
  std::string user_id;     // what the ZAP handler named this peer (the coordinator: its key's index)
  std::string header;
  std::string body;
};

// Reads one whole multipart message. `routed` sockets (ROUTER) carry the peer's routing id
// first. A message with the wrong number of frames is read completely and refused.
Result<Received> receive(zmq::socket_t& socket, bool routed);

// Sends [routing id, [empty delimiter,]] header, body. Returns an error when the peer is gone
// (ROUTER with ZMQ_ROUTER_MANDATORY) or the send would block.
Status send(zmq::socket_t& socket, const std::string* routing_id, const protocol::Frames& frames,
            bool delimited = false);

// Encodes and sends an envelope.
Status send_envelope(zmq::socket_t& socket, const std::string* routing_id, const protocol::Envelope& envelope,
                     const protocol::CodecLimits& limits, bool delimited = false);

void configure_curve_server(zmq::socket_t& socket, const KeyPair& own, const std::string& zap_domain,
                            std::size_t max_message_bytes);
void configure_curve_client(zmq::socket_t& socket, const KeyPair& own, const std::string& server_public_key,
                            std::size_t max_message_bytes);

// Watches a client socket's handshakes. poll() returns an error once the server refused our
// key or spoke a different protocol, so a client can say so instead of waiting forever.
class HandshakeMonitor {
 public:
  HandshakeMonitor(zmq::context_t& context, zmq::socket_t& watched, const std::string& name);
  // Stops the socket's events before the reader goes: ZeroMQ's I/O thread sends each event with
  // a blocking send, so a monitored socket closed after its reader would hang that thread, and
  // every socket of the context with it. Destroy the monitor before the watched socket.
  ~HandshakeMonitor();
  HandshakeMonitor(const HandshakeMonitor&) = delete;
  HandshakeMonitor& operator=(const HandshakeMonitor&) = delete;
  Status poll();
  bool succeeded() const { return succeeded_; }
  // Whether the connection dropped, or a connection attempt was refused, since the last call:
  // a reply to what was sent before cannot come any more.
  bool take_connection_lost() { return std::exchange(connection_lost_, false); }
  zmq::socket_t& socket() { return pair_; }

 private:
  zmq::socket_t pair_;
  void* watched_;
  bool succeeded_ = false;
  bool connection_lost_ = false;
  std::optional<Error> failure_;
};

}  // namespace kiln::transport

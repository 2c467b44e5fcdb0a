#include "common/transport/zmq_transport.h"

#include <cstring>
#include <vector>

#include <fmt/format.h>

namespace kiln::transport {

Result<Received> receive(zmq::socket_t& socket, bool routed) {
  std::vector<zmq::message_t> frames;
  std::string user_id;
  try {
    do {
      zmq::message_t frame;
      if (!socket.recv(frame, zmq::recv_flags::dontwait)) break;
      if (frames.empty() || user_id.empty()) {
        if (const char* uid = zmq_msg_gets(frame.handle(), "User-Id")) user_id = uid;
      }
      frames.push_back(std::move(frame));
    } while (socket.get(zmq::sockopt::rcvmore));
  } catch (const zmq::error_t& e) {
    return fail(Errc::io, fmt::format("cannot receive: {}", e.what()));
  }
  if (frames.empty()) return fail(Errc::unavailable, "no message waiting");
  Received r;
  r.user_id = std::move(user_id);
  std::size_t i = 0;
  if (routed) r.routing_id = frames[i++].to_string();
  // A REQ peer puts an empty delimiter frame before its message.
  if (routed && frames.size() == 4 && frames[1].size() == 0) {
    r.delimited = true;
    ++i;
  }
  const std::size_t expected = (routed ? 3 : 2) + (r.delimited ? 1 : 0);
  if (frames.size() != expected) {
    return fail(Errc::bad_message, fmt::format("a message must have 2 frames (header, body), got {}",
                                               frames.size() - (routed ? 1 : 0)));
  }
  r.header = frames[i++].to_string();
  r.body = frames[i].to_string();
  return r;
}

Status send(zmq::socket_t& socket, const std::string* routing_id, const protocol::Frames& frames, bool delimited) {
  try {
    if (routing_id) {
      if (!socket.send(zmq::buffer(*routing_id), zmq::send_flags::sndmore | zmq::send_flags::dontwait)) {
        return fail(Errc::unavailable, "the send queue is full; the peer is not reading");
      }
      if (delimited) socket.send(zmq::str_buffer(""), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
    }
    if (!socket.send(zmq::buffer(frames.header), zmq::send_flags::sndmore | zmq::send_flags::dontwait) ||
        !socket.send(zmq::buffer(frames.body), zmq::send_flags::dontwait)) {
      return fail(Errc::unavailable, "the send queue is full; the peer is not reading");
    }
  } catch (const zmq::error_t& e) {
    if (e.num() == EHOSTUNREACH) return fail(Errc::unavailable, "the peer has disconnected");
    return fail(Errc::io, fmt::format("cannot send: {}", e.what()));
  }
  return {};
}

Status send_envelope(zmq::socket_t& socket, const std::string* routing_id, const protocol::Envelope& envelope,
                     const protocol::CodecLimits& limits, bool delimited) {
  auto frames = protocol::encode(envelope, limits);
  if (!frames) return tl::unexpected(frames.error());
  return send(socket, routing_id, *frames, delimited);
}

void configure_curve_server(zmq::socket_t& socket, const KeyPair& own, const std::string& zap_domain,
                            std::size_t max_message_bytes) {
  socket.set(zmq::sockopt::curve_server, 1);
  socket.set(zmq::sockopt::curve_secretkey, own.secret_key);
  socket.set(zmq::sockopt::zap_domain, zap_domain);
  socket.set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(max_message_bytes));
  socket.set(zmq::sockopt::linger, 0);
}

void configure_curve_client(zmq::socket_t& socket, const KeyPair& own, const std::string& server_public_key,
                            std::size_t max_message_bytes) {
  socket.set(zmq::sockopt::curve_serverkey, server_public_key);
  socket.set(zmq::sockopt::curve_publickey, own.public_key);
  socket.set(zmq::sockopt::curve_secretkey, own.secret_key);
  socket.set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(max_message_bytes));
  socket.set(zmq::sockopt::linger, 0);
}

HandshakeMonitor::HandshakeMonitor(zmq::context_t& context, zmq::socket_t& watched, const std::string& name)
    : pair_(context, zmq::socket_type::pair), watched_(watched.handle()) {
  const std::string endpoint = "inproc://kiln-monitor-" + name;
  const int events = ZMQ_EVENT_HANDSHAKE_SUCCEEDED | ZMQ_EVENT_HANDSHAKE_FAILED_AUTH |
                     ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL | ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL |
                     ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_CONNECT_RETRIED;
  zmq_socket_monitor(watched.handle(), endpoint.c_str(), events);
  pair_.connect(endpoint);
}

HandshakeMonitor::~HandshakeMonitor() {
  // Room in the pipe for the stop event, then no more events: closing the socket later sends none.
  for (zmq::message_t event; pair_.recv(event, zmq::recv_flags::dontwait);) {
  }
  zmq_socket_monitor(watched_, nullptr, 0);
}

Status HandshakeMonitor::poll() {
  while (!failure_) {
    zmq::message_t event;
    if (!pair_.recv(event, zmq::recv_flags::dontwait)) break;
    std::uint16_t id = 0;
    std::uint32_t value = 0;
    if (event.size() >= 6) {
      std::memcpy(&id, event.data(), sizeof(id));
      std::memcpy(&value, static_cast<const char*>(event.data()) + 2, sizeof(value));
    }
    zmq::message_t address;
    if (event.more()) (void)pair_.recv(address, zmq::recv_flags::none);
    if (id == ZMQ_EVENT_HANDSHAKE_SUCCEEDED) {
      succeeded_ = true;
    } else if (id == ZMQ_EVENT_DISCONNECTED || id == ZMQ_EVENT_CONNECT_RETRIED) {
      connection_lost_ = true;
    } else if (id == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH) {
      failure_ = Error{Errc::unauthenticated,
                       fmt::format("the coordinator at {} refused this key (ZAP status {}); ask an admin to "
                                   "add your public key to its authorized keys",
                                   address.to_string(), value)};
    } else if (id == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL || id == ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL) {
      failure_ = Error{Errc::unauthenticated,
                       fmt::format("the CURVE handshake with {} failed; check that the coordinator public key "
                                   "in your configuration is the coordinator's",
                                   address.to_string())};
    }
  }
  if (failure_) return tl::unexpected(*failure_);
  return {};
}

}  // namespace kiln::transport

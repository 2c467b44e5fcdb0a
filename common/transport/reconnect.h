// What a requester does when the coordinator stops answering; kept apart from the ZeroMQ
// plumbing so the client's header stays light.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

namespace kiln::transport {

// How a requester keeps going across a coordinator restart (docs/protocol.md §5.6). Once the
// coordinator has answered (or from the first request, with before_first_answer), a request
// that may be asked twice whose connection drops, or that gets no answer within the timeout,
// is asked again on a new connection after a backoff that doubles from initial_ms up to
// max_ms; after give_up_ms without an answer it fails as `unavailable`. Other requests are
// never sent twice.
struct Reconnect {
  bool enabled = false;
  // A requester that knows the coordinator exists (an agent's fetcher) follows from its first
  // request; a person's client first wants to hear that the address is right.
  bool before_first_answer = false;
  std::uint32_t initial_ms = 500;
  std::uint32_t max_ms = 8000;
  std::uint32_t give_up_ms = 600000;
  // What the person should do once the requester gives up.
  std::string give_up_advice = "what you followed is kept by the coordinator: run the command again once it is back";
  // Told before each new attempt, in words for people (kiln prints it on stderr).
  std::function<void(const std::string&)> notice;
};

}  // namespace kiln::transport

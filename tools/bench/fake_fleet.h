// The load of kiln-bench-scale: fake agents speaking the agent session of docs/protocol.md
// (hello, heartbeats at the welcome's interval, job_start answered with job_started and, after a
// while, job_finished; the agent's liveness timeout and jittered reconnect of §8), thousands of
// them multiplexed on a few threads (one DEALER socket per agent, as the protocol needs: one
// routing id per session), and request/reply clients. Against a raw CURVE echo server the same
// agents count an echoed hello as the welcome and an echoed heartbeat as its answer, so both runs
// send the same messages over the same sockets.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/keys.h"
#include "common/protocol/messages.h"
#include "common/time.h"

namespace zmq {
class context_t;
class socket_t;
}  // namespace zmq

namespace kiln::bench {

TimeMs steady_ms();
double steady_us();

struct FleetOptions {
  std::string endpoint;           // the agents' endpoint
  std::string server_public_key;  // Z85
  std::vector<KeyPair> keys;      // one per agent; agent i is node_id(first_index + i)
  std::size_t first_index = 0;    // where this fleet's slice starts in the whole fleet
  int threads = 1;
  bool echo = false;  // the server echoes every message back
  std::uint32_t heartbeat_interval_ms = 1000;
  std::uint32_t liveness_missed_beats = 4;
  std::uint32_t reconnect_backoff_initial_ms = 500;
  std::uint32_t reconnect_backoff_max_ms = 30000;
  std::uint32_t job_ms = 30000;       // how long a started job runs before it finishes
  std::uint32_t connects_per_second = 1000;  // the first hellos are spread at this rate
};

std::string node_id(std::size_t index);

// What the agents saw, summed over the threads.
struct FleetCounts {
  std::size_t registered = 0;        // agents in the registered state now
  std::uint64_t heartbeats_answered = 0;
  std::uint64_t hellos_sent = 0;
  std::uint64_t connections_opened = 0;  // each a CURVE handshake for the coordinator
  std::uint64_t not_registered = 0;  // error not_registered received: the session was gone
  std::uint64_t timeouts = 0;        // sessions the agents gave up on (silence over the liveness timeout)
  std::uint64_t jobs_started = 0;
  std::uint64_t jobs_finished = 0;
  std::uint64_t connect_failures = 0;  // sockets the bench could not open (files, sockets)
};

// The agents of a run, whether in this process or spread over several.
class Fleet {
 public:
  virtual ~Fleet() = default;
  virtual FleetCounts counts() = 0;
  // The heartbeat round trips (µs) measured since the last call.
  virtual std::vector<double> take_heartbeat_rtts_us() = 0;
  // When each hello was sent since the last call (steady ms, the same clock in every process).
  virtual std::vector<TimeMs> take_hello_times_ms() = 0;
};

class FakeFleet : public Fleet {
 public:
  explicit FakeFleet(FleetOptions options);
  ~FakeFleet() override;
  FakeFleet(const FakeFleet&) = delete;
  FakeFleet& operator=(const FakeFleet&) = delete;

  FleetCounts counts() override;
  std::vector<double> take_heartbeat_rtts_us() override;
  std::vector<TimeMs> take_hello_times_ms() override;

 private:
  struct Worker;
  FleetOptions options_;
  std::unique_ptr<zmq::context_t> context_;
  std::vector<std::unique_ptr<Worker>> workers_;
  std::atomic<bool> stop_{false};
  std::vector<std::thread> threads_;
};

// A fleet too large for one process's file limit runs as slices, each in a process of its own
// that answers the bench's questions over a stream socket: one command byte, then the answer.
// Serves `fleet` on `fd` until the other end closes it.
void serve_fleet_slice(Fleet& fleet, int fd);

// The bench's side: the slices' answers summed (counts) or joined (samples). A slice whose process
// ended counts nothing from then on, and says so once on stderr.
class FleetSlices : public Fleet {
 public:
  explicit FleetSlices(std::vector<int> fds);
  ~FleetSlices() override;
  FleetSlices(const FleetSlices&) = delete;
  FleetSlices& operator=(const FleetSlices&) = delete;

  FleetCounts counts() override;
  std::vector<double> take_heartbeat_rtts_us() override;
  std::vector<TimeMs> take_hello_times_ms() override;

 private:
  std::vector<int> fds_;  // -1 once that slice stopped answering
};

// One client connection doing request/reply: `window` requests in flight at most. Against the
// echo server a reply is matched by its header id, against the coordinator by its corr. Its
// ZeroMQ threads' names start with kRequesterThreadPrefix, so that the thread timing its round
// trips can find them (TimingClient in bench_scale_main.cpp).
inline constexpr int kRequesterThreadPrefix = 7;
class Requester {
 public:
  Requester(const std::string& endpoint, const KeyPair& keys, const std::string& server_public_key, bool echo);
  ~Requester();
  Requester(const Requester&) = delete;
  Requester& operator=(const Requester&) = delete;

  struct Reply {
    protocol::Body body;
    double rtt_us = 0;
  };
  // Sends one request and waits for its reply; nothing on a timeout.
  std::optional<Reply> call(protocol::Body body, int timeout_ms);
  // Sends `bodies` with at most `window` awaiting replies; the replies in order of arrival.
  // Stops early after `timeout_ms` without a reply.
  std::vector<Reply> pipeline(std::vector<protocol::Body> bodies, std::size_t window, int timeout_ms);

 private:
  std::unique_ptr<zmq::context_t> context_;
  std::unique_ptr<zmq::socket_t> socket_;
  bool echo_ = false;
  std::uint64_t next_id_ = 1;
};

// The references: a ROUTER per endpoint that sends every message back unchanged, and on
// `durable_client_endpoint` one that first appends the messages to `durable_file` and calls
// fdatasync, once for all the messages read in one turn (as the coordinator's group commit does).
// Runs until `stop`; a failed write or sync stops it with 1.
int run_echo_server(const std::string& agent_endpoint, const std::string& client_endpoint,
                    const std::string& durable_client_endpoint, const std::string& durable_file, const KeyPair& keys,
                    const std::atomic<bool>& stop);

}  // namespace kiln::bench

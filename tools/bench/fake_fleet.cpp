#include "tools/bench/fake_fleet.h"

#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <iostream>
#include <map>
#include <queue>
#include <random>
#include <type_traits>

#include <fmt/format.h>
#include <zmq.hpp>

#include "common/protocol/codec.h"
#include "common/protocol/session_rules.h"
#include "common/transport/zmq_transport.h"

namespace kiln::bench {
namespace {

constexpr std::size_t kMaxMessageBytes = 1 << 20;
constexpr int kMaxEventsPerWait = 256;
constexpr int kIdleWaitMs = 5;

}  // namespace

TimeMs steady_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

double steady_us() {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string node_id(std::size_t index) { return fmt::format("bench{:05}", index); }

// The agents of one thread, with their sockets in one epoll set (each socket's ZMQ_FD) and their
// timers in one heap.
struct FakeFleet::Worker {
  enum class State { disconnected, registering, registered };
  struct Job {
    std::uint64_t id = 0;
    std::uint32_t attempt = 1;
    TimeMs finish_at_ms = 0;
  };
  struct Agent {
    std::size_t index = 0;  // in this fleet's keys
    std::string node_id;
    const KeyPair* keys = nullptr;
    std::unique_ptr<zmq::socket_t> socket;
    State state = State::disconnected;
    TimeMs last_heard_ms = 0;
    TimeMs next_beat_ms = 0;
    TimeMs reconnect_at_ms = 0;
    std::uint32_t backoff_ms = 0;
    std::uint64_t next_id = 1;
    std::uint64_t hello_id = 0;
    bool retry_on_open_connection = false;
    int hellos_on_open_connection = 0;  // since the last welcome or new connection
    std::uint64_t beat_id = 0;
    double beat_sent_us = 0;
    std::vector<Job> jobs;
    std::map<std::uint64_t, protocol::JobFinished> unacked;  // by job id
    std::mt19937_64 random;
    TimeMs due_ms = 0;  // the heap entry that counts
  };

  Worker(const FleetOptions& options, zmq::context_t& context, std::size_t first, std::size_t count)
      : options_(options), context_(context), epoll_fd_(::epoll_create1(EPOLL_CLOEXEC)) {
    const TimeMs start = steady_ms();
    const double spacing_ms = 1000.0 / std::max<std::uint32_t>(1, options.connects_per_second);
    agents_.resize(count);
    for (std::size_t i = 0; i < count; ++i) {
      Agent& a = agents_[i];
      a.index = first + i;
      const std::size_t in_whole_fleet = options.first_index + a.index;
      a.node_id = node_id(in_whole_fleet);
      a.keys = &options.keys[a.index];
      a.random.seed(std::hash<std::string>{}(a.node_id));
      a.backoff_ms = options.reconnect_backoff_initial_ms;
      // Spaced by the place in the whole fleet: slices started together keep the fleet's rate.
      a.reconnect_at_ms = start + static_cast<TimeMs>(spacing_ms * static_cast<double>(in_whole_fleet));
      schedule(i, a.reconnect_at_ms);
    }
  }
  ~Worker() {
    for (Agent& a : agents_) a.socket.reset();
    ::close(epoll_fd_);
  }

  void run(const std::atomic<bool>& stop) {
    epoll_event events[kMaxEventsPerWait];
    while (!stop.load(std::memory_order_relaxed)) {
      const TimeMs now = steady_ms();
      while (!timers_.empty() && timers_.top().first <= now) {
        const auto [due, i] = timers_.top();
        timers_.pop();
        if (agents_[i].due_ms == due) on_timer(i, now);
      }
      int wait_ms = kIdleWaitMs;
      if (!timers_.empty()) wait_ms = static_cast<int>(std::clamp<TimeMs>(timers_.top().first - now, 0, kIdleWaitMs));
      const int n = ::epoll_wait(epoll_fd_, events, kMaxEventsPerWait, wait_ms);
      for (int e = 0; e < n; ++e) drain(events[e].data.u32);
    }
  }

  FleetCounts counts() const {
    std::lock_guard lock(mutex_);
    return counts_;
  }
  std::vector<double> take_rtts() {
    std::lock_guard lock(mutex_);
    return std::exchange(rtts_us_, {});
  }
  std::vector<TimeMs> take_hellos() {
    std::lock_guard lock(mutex_);
    return std::exchange(hello_times_ms_, {});
  }

 private:
  DurationMs liveness_timeout_ms() const {
    return static_cast<DurationMs>(options_.heartbeat_interval_ms) * options_.liveness_missed_beats;
  }

  void schedule(std::size_t i, TimeMs due) {
    agents_[i].due_ms = due;
    timers_.emplace(due, i);
  }

  // The agent's next timer: its reconnect, or its next heartbeat, job end or liveness check.
  void reschedule(std::size_t i) {
    Agent& a = agents_[i];
    if (a.state == State::disconnected) return schedule(i, a.reconnect_at_ms);
    TimeMs due = a.last_heard_ms + liveness_timeout_ms() + 1;
    if (a.state == State::registered) due = std::min(due, a.next_beat_ms);
    for (const Job& j : a.jobs) due = std::min(due, j.finish_at_ms);
    schedule(i, due);
  }

  void on_timer(std::size_t i, TimeMs now) {
    Agent& a = agents_[i];
    if (a.state == State::disconnected) {
      if (now >= a.reconnect_at_ms) {
        // §8.3: a few hellos on the open connection before a new one. The bench never kills the
        // coordinator, so these agents do not watch for a dropped connection as kiln-agent does.
        if (a.retry_on_open_connection && a.socket) {
          ++a.hellos_on_open_connection;
          send_hello(a, now);
        } else {
          connect(i, now);
        }
      }
      reschedule(i);
      return drain(static_cast<std::uint32_t>(i));
    }
    // What arrived first: a send may have taken the socket's wake-up for a message now waiting.
    drain(static_cast<std::uint32_t>(i));
    if (a.state == State::disconnected) return;
    if (now - a.last_heard_ms > liveness_timeout_ms()) {
      // §8.1: a session that went silent waits a draw from 0 to max(backoff, half the timeout).
      const bool was_registered = a.state == State::registered;
      end_session(a);
      a.retry_on_open_connection = a.hellos_on_open_connection < protocol::kHellosOnOpenConnection;
      const std::uint32_t upper = was_registered
                                      ? std::max<std::uint32_t>(a.backoff_ms, static_cast<std::uint32_t>(liveness_timeout_ms() / 2))
                                      : a.backoff_ms;
      const std::uint32_t lower = was_registered ? 0 : a.backoff_ms / 2;
      a.reconnect_at_ms = now + std::uniform_int_distribution<std::uint32_t>(lower, upper)(a.random);
      a.backoff_ms = std::min(a.backoff_ms * 2, options_.reconnect_backoff_max_ms);
      count([](FleetCounts& c) { ++c.timeouts; });
      return reschedule(i);
    }
    for (std::size_t j = 0; j < a.jobs.size();) {
      if (a.jobs[j].finish_at_ms > now) {
        ++j;
        continue;
      }
      protocol::JobFinished done;
      done.job_id = a.jobs[j].id;
      done.attempt = a.jobs[j].attempt;
      done.duration_ms = options_.job_ms;
      a.unacked[done.job_id] = done;
      a.jobs.erase(a.jobs.begin() + static_cast<std::ptrdiff_t>(j));
      send(a, done);
      count([](FleetCounts& c) { ++c.jobs_finished; });
    }
    if (a.state == State::registered && now >= a.next_beat_ms) {
      protocol::Heartbeat beat;
      for (const Job& j : a.jobs) beat.running_jobs.push_back(j.id);
      a.beat_id = send(a, beat);
      a.beat_sent_us = steady_us();
      a.next_beat_ms = now + options_.heartbeat_interval_ms;
    }
    reschedule(i);
    drain(static_cast<std::uint32_t>(i));
  }

  void connect(std::size_t i, TimeMs now) {
    Agent& a = agents_[i];
    disconnect(a);
    try {
      a.socket = std::make_unique<zmq::socket_t>(context_, zmq::socket_type::dealer);
      transport::configure_curve_client(*a.socket, *a.keys, options_.server_public_key, kMaxMessageBytes);
      a.socket->set(zmq::sockopt::linger, 0);
      a.socket->connect(options_.endpoint);
    } catch (const zmq::error_t&) {
      // Out of sockets or files for now: the agent tries again after its backoff, as a real one would.
      a.socket.reset();
      a.reconnect_at_ms = now + a.backoff_ms;
      count([](FleetCounts& c) { ++c.connect_failures; });
      return;
    }
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u32 = static_cast<std::uint32_t>(i);
    ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, a.socket->get(zmq::sockopt::fd), &ev);
    a.hellos_on_open_connection = 0;
    count([](FleetCounts& c) { ++c.connections_opened; });
    send_hello(a, now);
  }

  void disconnect(Agent& a) {
    if (a.socket) {
      ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, a.socket->get(zmq::sockopt::fd), nullptr);
      a.socket.reset();
    }
    end_session(a);
  }

  // The session is over; the connection may stay open for the next hello.
  void end_session(Agent& a) {
    if (a.state == State::registered) count([](FleetCounts& c) { --c.registered; });
    a.state = State::disconnected;
  }

  void send_hello(Agent& a, TimeMs now) {
    protocol::Hello hello;
    hello.node_id = a.node_id;
    hello.hardware_revision = "a";
    hello.agent_version = "bench";
    hello.driver_version = "bench";
    hello.protocol_versions = {protocol::kProtocolVersion};
    for (std::uint32_t c = 0; c < 8; ++c) {
      hello.chips.push_back(protocol::ChipInfo{c, fmt::format("{}-{}", a.node_id, c), "1.0.0", c / 4, true});
    }
    hello.host = protocol::HostInfo{a.node_id, 2, 64, 8};
    for (const Job& j : a.jobs) hello.running_jobs.push_back(j.id);
    for (const auto& [id, f] : a.unacked) hello.finished_jobs.push_back(id);
    hello.workloads = {"bench"};
    a.hello_id = send(a, hello);
    a.state = State::registering;
    a.last_heard_ms = now;
    std::lock_guard lock(mutex_);
    ++counts_.hellos_sent;
    hello_times_ms_.push_back(now);
  }

  std::uint64_t send(Agent& a, protocol::Body body) {
    const std::uint64_t id = a.next_id++;
    (void)transport::send_envelope(*a.socket, nullptr, protocol::make_envelope(std::move(body), id), {});
    return id;
  }

  // Reads whatever the agent's socket holds. ZMQ_FD only says that something may have changed, so
  // every wake-up and every send is followed by reading until nothing is left.
  void drain(std::uint32_t i) {
    Agent& a = agents_[i];
    while (a.socket && (a.socket->get(zmq::sockopt::events) & ZMQ_POLLIN)) {
      auto received = transport::receive(*a.socket, false);
      if (!received) continue;
      auto envelope = protocol::decode(received->header, received->body);
      if (envelope) on_message(i, *envelope);
    }
  }

  void on_message(std::size_t i, const protocol::Envelope& m) {
    Agent& a = agents_[i];
    const TimeMs now = steady_ms();
    a.last_heard_ms = now;
    // The echo sends our own message back: its id is ours, where the coordinator's corr is.
    const std::uint64_t answers = options_.echo ? m.header.id : m.header.corr;
    const bool welcome = (std::holds_alternative<protocol::Welcome>(m.body) && answers >= a.hello_id) ||
                         (options_.echo && std::holds_alternative<protocol::Hello>(m.body) && answers == a.hello_id);
    if (welcome) {
      if (a.state != State::registered) count([](FleetCounts& c) { ++c.registered; });
      a.state = State::registered;
      a.hellos_on_open_connection = 0;
      a.backoff_ms = options_.reconnect_backoff_initial_ms;
      a.next_beat_ms = now + std::uniform_int_distribution<TimeMs>(0, options_.heartbeat_interval_ms)(a.random);
      if (const auto* w = std::get_if<protocol::Welcome>(&m.body)) {
        std::erase_if(a.jobs, [&](const Job& j) {
          return std::find(w->cancel_jobs.begin(), w->cancel_jobs.end(), j.id) != w->cancel_jobs.end();
        });
      }
      for (const auto& [id, finished] : a.unacked) send(a, finished);
    } else if (std::holds_alternative<protocol::Heartbeat>(m.body)) {
      if (a.state == State::disconnected && a.retry_on_open_connection) {
        a.state = State::registered;
        count([](FleetCounts& c) { ++c.registered; });
      }
      if (answers == a.beat_id && a.beat_id != 0) {
        const double rtt = steady_us() - a.beat_sent_us;
        a.beat_id = 0;
        std::lock_guard lock(mutex_);
        ++counts_.heartbeats_answered;
        rtts_us_.push_back(rtt);
      }
    } else if (const auto* start = std::get_if<protocol::JobStart>(&m.body)) {
      a.jobs.push_back(Job{start->job_id, start->attempt, now + options_.job_ms});
      send(a, protocol::JobStarted{start->job_id, start->attempt});
      count([](FleetCounts& c) { ++c.jobs_started; });
    } else if (const auto* cancel = std::get_if<protocol::JobCancel>(&m.body)) {
      for (const Job& j : a.jobs) {
        if (j.id != cancel->job_id) continue;
        protocol::JobFinished done;
        done.job_id = j.id;
        done.attempt = j.attempt;
        done.outcome = protocol::JobOutcome::cancelled;
        a.unacked[j.id] = done;
        send(a, done);
      }
      std::erase_if(a.jobs, [&](const Job& j) { return j.id == cancel->job_id; });
    } else if (const auto* ack = std::get_if<protocol::JobFinishedAck>(&m.body)) {
      a.unacked.erase(ack->job_id);
    } else if (const auto* error = std::get_if<protocol::ErrorReply>(&m.body)) {
      if (error->code == to_string(Errc::not_registered)) {
        if (a.state == State::registered) count([](FleetCounts& c) { --c.registered; });
        count([](FleetCounts& c) { ++c.not_registered; });
        send_hello(a, now);
      }
    }
    reschedule(i);
  }

  template <class F>
  void count(F&& f) {
    std::lock_guard lock(mutex_);
    f(counts_);
  }

  const FleetOptions& options_;
  zmq::context_t& context_;
  int epoll_fd_;
  std::vector<Agent> agents_;
  std::priority_queue<std::pair<TimeMs, std::size_t>, std::vector<std::pair<TimeMs, std::size_t>>, std::greater<>>
      timers_;
  mutable std::mutex mutex_;
  FleetCounts counts_;
  std::vector<double> rtts_us_;
  std::vector<TimeMs> hello_times_ms_;
};

FakeFleet::FakeFleet(FleetOptions options) : options_(std::move(options)) {
  // A closed socket counts until ZeroMQ's reaper has taken it: room for a reconnect storm's.
  context_ = std::make_unique<zmq::context_t>(1, static_cast<int>(4 * options_.keys.size()) + 1024);
  const std::size_t n = options_.keys.size();
  const std::size_t threads = std::clamp<std::size_t>(static_cast<std::size_t>(options_.threads), 1, std::max<std::size_t>(n, 1));
  for (std::size_t t = 0; t < threads; ++t) {
    const std::size_t first = n * t / threads;
    const std::size_t last = n * (t + 1) / threads;
    workers_.push_back(std::make_unique<Worker>(options_, *context_, first, last - first));
  }
  for (auto& w : workers_) threads_.emplace_back([this, worker = w.get()] { worker->run(stop_); });
}

FakeFleet::~FakeFleet() {
  stop_ = true;
  for (auto& t : threads_) t.join();
  workers_.clear();
  context_.reset();
}

namespace {

void add_counts(FleetCounts& sum, const FleetCounts& c) {
  sum.registered += c.registered;
  sum.heartbeats_answered += c.heartbeats_answered;
  sum.hellos_sent += c.hellos_sent;
  sum.connections_opened += c.connections_opened;
  sum.not_registered += c.not_registered;
  sum.timeouts += c.timeouts;
  sum.jobs_started += c.jobs_started;
  sum.jobs_finished += c.jobs_finished;
  sum.connect_failures += c.connect_failures;
}

}  // namespace

FleetCounts FakeFleet::counts() {
  FleetCounts sum;
  for (const auto& w : workers_) add_counts(sum, w->counts());
  return sum;
}

namespace {

// What every worker measured, in one list.
template <class T, class Workers, class Take>
std::vector<T> gather(Workers& workers, Take take) {
  std::vector<T> all;
  for (auto& w : workers) {
    std::vector<T> some = take(*w);
    all.insert(all.end(), some.begin(), some.end());
  }
  return all;
}

}  // namespace

std::vector<double> FakeFleet::take_heartbeat_rtts_us() {
  return gather<double>(workers_, [](Worker& w) { return w.take_rtts(); });
}

std::vector<TimeMs> FakeFleet::take_hello_times_ms() {
  return gather<TimeMs>(workers_, [](Worker& w) { return w.take_hellos(); });
}

namespace {

// The slices' commands, one byte each.
constexpr char kAskCounts = 'c';
constexpr char kTakeHeartbeatRtts = 'r';
constexpr char kTakeHelloTimes = 'h';

// Both ends are this program, so the answers are the values' bytes as they are in memory.
static_assert(std::is_trivially_copyable_v<FleetCounts>);

bool send_whole(int fd, const void* data, std::size_t size) {
  const char* at = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t sent = ::send(fd, at, size, MSG_NOSIGNAL);
    if (sent < 0 && errno == EINTR) continue;
    if (sent <= 0) return false;
    at += sent;
    size -= static_cast<std::size_t>(sent);
  }
  return true;
}

bool receive_whole(int fd, void* data, std::size_t size) {
  char* at = static_cast<char*>(data);
  while (size > 0) {
    const ssize_t got = ::recv(fd, at, size, 0);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;
    at += got;
    size -= static_cast<std::size_t>(got);
  }
  return true;
}

template <class T>
bool send_samples(int fd, const std::vector<T>& samples) {
  const std::uint64_t n = samples.size();
  return send_whole(fd, &n, sizeof n) && send_whole(fd, samples.data(), n * sizeof(T));
}

template <class T>
std::optional<std::vector<T>> receive_samples(int fd) {
  std::uint64_t n = 0;
  if (!receive_whole(fd, &n, sizeof n)) return std::nullopt;
  std::vector<T> samples(n);
  if (!receive_whole(fd, samples.data(), n * sizeof(T))) return std::nullopt;
  return samples;
}

}  // namespace

void serve_fleet_slice(Fleet& fleet, int fd) {
  char command = 0;
  while (receive_whole(fd, &command, 1)) {
    bool answered = false;
    if (command == kAskCounts) {
      const FleetCounts counts = fleet.counts();
      answered = send_whole(fd, &counts, sizeof counts);
    } else if (command == kTakeHeartbeatRtts) {
      answered = send_samples(fd, fleet.take_heartbeat_rtts_us());
    } else if (command == kTakeHelloTimes) {
      answered = send_samples(fd, fleet.take_hello_times_ms());
    }
    if (!answered) return;
  }
}

FleetSlices::FleetSlices(std::vector<int> fds) : fds_(std::move(fds)) {}

FleetSlices::~FleetSlices() {
  for (int fd : fds_) {
    if (fd >= 0) ::close(fd);
  }
}

namespace {

// Asks every live slice and hands each answer to `add`; a slice that does not answer is closed
// and said so once, on stderr.
template <class Ask>
void ask_slices(std::vector<int>& fds, char command, Ask ask) {
  for (std::size_t i = 0; i < fds.size(); ++i) {
    if (fds[i] < 0) continue;
    if (send_whole(fds[i], &command, 1) && ask(fds[i])) continue;
    std::cerr << fmt::format("agent process {} stopped answering; its agents count as gone (see agents-*.log in the "
                             "bench's directory, kept with --keep)\n",
                             i + 1);
    ::close(fds[i]);
    fds[i] = -1;
  }
}

}  // namespace

FleetCounts FleetSlices::counts() {
  FleetCounts sum;
  ask_slices(fds_, kAskCounts, [&](int fd) {
    FleetCounts c;
    if (!receive_whole(fd, &c, sizeof c)) return false;
    add_counts(sum, c);
    return true;
  });
  return sum;
}

std::vector<double> FleetSlices::take_heartbeat_rtts_us() {
  std::vector<double> all;
  ask_slices(fds_, kTakeHeartbeatRtts, [&](int fd) {
    auto some = receive_samples<double>(fd);
    if (some) all.insert(all.end(), some->begin(), some->end());
    return some.has_value();
  });
  return all;
}

std::vector<TimeMs> FleetSlices::take_hello_times_ms() {
  std::vector<TimeMs> all;
  ask_slices(fds_, kTakeHelloTimes, [&](int fd) {
    auto some = receive_samples<TimeMs>(fd);
    if (some) all.insert(all.end(), some->begin(), some->end());
    return some.has_value();
  });
  return all;
}

Requester::Requester(const std::string& endpoint, const KeyPair& keys, const std::string& server_public_key, bool echo)
    : context_(std::make_unique<zmq::context_t>(1)), echo_(echo) {
  context_->set(zmq::ctxopt::thread_name_prefix, kRequesterThreadPrefix);
  socket_ = std::make_unique<zmq::socket_t>(*context_, zmq::socket_type::dealer);
  transport::configure_curve_client(*socket_, keys, server_public_key, kMaxMessageBytes);
  socket_->set(zmq::sockopt::linger, 0);
  socket_->connect(endpoint);
}

Requester::~Requester() {
  socket_.reset();
  context_.reset();
}

std::optional<Requester::Reply> Requester::call(protocol::Body body, int timeout_ms) {
  std::vector<protocol::Body> one;
  one.push_back(std::move(body));
  auto replies = pipeline(std::move(one), 1, timeout_ms);
  if (replies.empty()) return std::nullopt;
  return std::move(replies.front());
}

std::vector<Requester::Reply> Requester::pipeline(std::vector<protocol::Body> bodies, std::size_t window,
                                                  int timeout_ms) {
  std::vector<Reply> replies;
  std::map<std::uint64_t, double> sent_us;  // by id
  std::size_t next = 0;
  TimeMs last_progress_ms = steady_ms();
  while (replies.size() < bodies.size()) {
    while (next < bodies.size() && sent_us.size() < window) {
      const std::uint64_t id = next_id_++;
      sent_us[id] = steady_us();
      (void)transport::send_envelope(*socket_, nullptr, protocol::make_envelope(std::move(bodies[next++]), id), {});
    }
    zmq::pollitem_t item{socket_->handle(), 0, ZMQ_POLLIN, 0};
    zmq::poll(&item, 1, std::chrono::milliseconds(50));
    while (socket_->get(zmq::sockopt::events) & ZMQ_POLLIN) {
      auto received = transport::receive(*socket_, false);
      if (!received) continue;
      auto envelope = protocol::decode(received->header, received->body);
      if (!envelope) continue;
      auto it = sent_us.find(echo_ ? envelope->header.id : envelope->header.corr);
      if (it == sent_us.end()) continue;
      replies.push_back(Reply{std::move(envelope->body), steady_us() - it->second});
      sent_us.erase(it);
      last_progress_ms = steady_ms();
    }
    if (steady_ms() - last_progress_ms > timeout_ms) break;
  }
  return replies;
}

namespace {

// The durable echo's turn: the messages waiting on `socket` (up to the coordinator's batch),
// appended to `file` with one write and one fdatasync, then sent back. False when the write or
// the sync failed.
bool echo_durably(zmq::socket_t& socket, int file) {
  std::vector<transport::Received> batch;
  std::string bytes;
  for (int i = 0; i < 1000; ++i) {
    auto received = transport::receive(socket, true);
    if (!received) break;
    bytes += received->header;
    bytes += received->body;
    batch.push_back(std::move(*received));
  }
  if (batch.empty()) return true;
  for (std::size_t written = 0; written < bytes.size();) {
    const ssize_t n = ::write(file, bytes.data() + written, bytes.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return false;
    written += static_cast<std::size_t>(n);
  }
  if (::fdatasync(file) != 0) return false;
  for (const auto& m : batch) (void)transport::send(socket, &m.routing_id, protocol::Frames{m.header, m.body});
  return true;
}

}  // namespace

int run_echo_server(const std::string& agent_endpoint, const std::string& client_endpoint,
                    const std::string& durable_client_endpoint, const std::string& durable_file, const KeyPair& keys,
                    const std::atomic<bool>& stop) {
  const int file = ::open(durable_file.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (file < 0) {
    std::cerr << fmt::format("cannot open {} for the durable echo: {}; the bench's directory must be writable\n",
                             durable_file, std::strerror(errno));
    return 1;
  }
  zmq::context_t context(1);
  zmq::socket_t agents(context, zmq::socket_type::router);
  zmq::socket_t clients(context, zmq::socket_type::router);
  zmq::socket_t durable_clients(context, zmq::socket_type::router);
  for (auto* s : {&agents, &clients, &durable_clients}) {
    s->set(zmq::sockopt::curve_server, 1);
    s->set(zmq::sockopt::curve_secretkey, keys.secret_key);
    s->set(zmq::sockopt::maxmsgsize, static_cast<std::int64_t>(kMaxMessageBytes));
    s->set(zmq::sockopt::router_mandatory, 1);
    s->set(zmq::sockopt::linger, 0);
  }
  agents.bind(agent_endpoint);
  clients.bind(client_endpoint);
  durable_clients.bind(durable_client_endpoint);
  int status = 0;
  while (!stop.load() && status == 0) {
    zmq::pollitem_t items[] = {{agents.handle(), 0, ZMQ_POLLIN, 0},
                               {clients.handle(), 0, ZMQ_POLLIN, 0},
                               {durable_clients.handle(), 0, ZMQ_POLLIN, 0}};
    try {
      zmq::poll(items, 3, std::chrono::milliseconds(200));
    } catch (const zmq::error_t& e) {
      // The SIGTERM that stops the echo interrupts its wait; anything else is a real failure.
      if (e.num() != EINTR) throw;
      continue;
    }
    for (int s = 0; s < 2; ++s) {
      if (!(items[s].revents & ZMQ_POLLIN)) continue;
      zmq::socket_t& socket = s == 0 ? agents : clients;
      // What the coordinator's loop does with every message, minus the coordinator: read it
      // whole, then send it back.
      for (int i = 0; i < 1000; ++i) {
        auto received = transport::receive(socket, true);
        if (!received) break;
        (void)transport::send(socket, &received->routing_id, protocol::Frames{received->header, received->body});
      }
    }
    if ((items[2].revents & ZMQ_POLLIN) && !echo_durably(durable_clients, file)) {
      std::cerr << fmt::format("the durable echo could not write or sync {}: {}; free space on its filesystem\n",
                               durable_file, std::strerror(errno));
      status = 1;
    }
  }
  ::close(file);
  return status;
}

}  // namespace kiln::bench

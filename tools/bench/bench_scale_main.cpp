// kiln-bench-scale: one real kiln-coordinator (SQLite in a temporary directory, on loopback, CURVE
// keys made for the run) under N fake agents at 1 Hz and request/reply clients, beside a raw ZeroMQ
// CURVE echo server under the same load as the reference. See docs/performance.md, "Scale".
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <limits>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "common/transport/loopback_ports.h"
#include "common/http/client.h"
#include "common/keys.h"
#include "common/process/proc_stat.h"
#include "common/version.h"
#include "tools/bench/bench_process.h"
#include "tools/bench/fake_fleet.h"

namespace fs = std::filesystem;
using kiln::KeyPair;
using kiln::TimeMs;
using namespace kiln::bench;

namespace {

struct Settings {
  std::vector<std::size_t> agents = {100, 1000, 3000, 10000};
  int threads = 1;
  int measure_seconds = 10;
  int requests = 200;        // sequential submits and leases timed
  std::size_t queued = 10000;  // the queue the throughput is measured at
  std::size_t burst = 2000;    // jobs submitted, pipelined, at that queue
  std::uint32_t heartbeat_interval_ms = 1000;
  std::uint32_t liveness_missed_beats = 4;
  std::uint32_t connects_per_second = 1000;
  int repeats = 1;  // echo and coordinator pairs per fleet size
  bool stall = true;
  bool pin = true;  // the server on a CPU of its own, the load on the others
  bool timing_priority = true;  // the timing client at real-time priority where allowed
  std::size_t agent_processes = 0;     // 0: as many as the file limit needs
  std::size_t agents_per_process = 0;  // what one process's file limit holds
  std::string coordinator;
  bool json = false;
  bool keep = false;
};

std::atomic<bool> g_stop{false};

constexpr rlim_t kFilesWanted = 65536;

// Where the server under test and its load run. Pinned, the server (coordinator or echo, all
// its threads) has one CPU to itself and the fake agents and clients share the others, so a
// round trip's tail measures the server, not the scheduler handing its core to the load.
struct Placement {
  std::vector<int> server;  // empty: wherever the kernel puts it
  std::vector<int> load;
  std::string text() const {
    if (server.empty()) return "not pinned: the server and the load shared every CPU";
    return fmt::format("pinned: the server on CPU {}, the fake agents and clients on CPU{} {}", server.front(),
                       load.size() > 1 ? "s" : "", fmt::join(load, ","));
  }
};

// User and system CPU time of a process so far, from /proc/PID/stat (fields 14 and 15).
double cpu_ms(pid_t pid) {
  const auto stat = kiln::ProcStat::read(std::to_string(pid));
  if (!stat) return 0;
  return (stat->number(14).value_or(0) + stat->number(15).value_or(0)) * 1000.0 /
         static_cast<double>(::sysconf(_SC_CLK_TCK));
}


// CPU time of a server so far, in nanoseconds' resolution: the sum of its threads' time on a CPU
// (/proc/PID/task/TID/schedstat, first field). /proc/PID/stat counts in clock ticks (10 ms), which a
// small fleet's window does not fill: 50 agents cost a few milliseconds a second. The server's
// threads live as long as it does, so none of its time leaves with an exited thread. Without
// schedstat (a kernel built without it), the ticks.
double server_cpu_ms(pid_t pid) {
  std::error_code error;
  std::filesystem::directory_iterator tasks(fmt::format("/proc/{}/task", pid), error);
  double ns = 0;
  bool read_any = false;
  for (; !error && tasks != std::filesystem::directory_iterator(); tasks.increment(error)) {
    std::ifstream in(tasks->path() / "schedstat");
    double on_cpu_ns = 0;
    if (in >> on_cpu_ns) {
      ns += on_cpu_ns;
      read_any = true;
    }
  }
  return read_any ? ns / 1e6 : cpu_ms(pid);
}

double percentile(std::vector<double> values, double p) {
  if (values.empty()) return NAN;
  std::sort(values.begin(), values.end());
  const auto at = static_cast<std::size_t>(std::ceil(p * static_cast<double>(values.size()))) ;
  return values[std::clamp<std::size_t>(at, 1, values.size()) - 1];
}

double median(std::vector<double> values) { return percentile(std::move(values), 0.5); }

struct Latency {
  double p50_ms = NAN;
  double p99_ms = NAN;
  double max_ms = NAN;
  std::size_t samples = 0;
};

// The coordinator's own share of the timed requests of one type, from its /metrics
// (kiln_client_request_seconds) read before and after them, or of its store's commits meanwhile
// (kiln_store_commit_seconds): the upper bounds of the buckets its quantiles fall in, since a
// histogram keeps no finer.
struct OwnTime {
  double p50_at_most_ms = NAN;
  double p99_at_most_ms = NAN;
  std::uint64_t requests = 0;
};

// A histogram family's buckets in a /metrics text, by the value of its `type` label ("" for a
// family without one): (upper bound in seconds, cumulative count), in the order written, the +Inf
// bucket as infinity.
std::map<std::string, std::vector<std::pair<double, double>>> histogram_buckets(const std::string& metrics,
                                                                              std::string_view family) {
  const std::string bucket = fmt::format("{}_bucket{{", family);
  std::map<std::string, std::vector<std::pair<double, double>>> out;
  std::istringstream lines(metrics);
  for (std::string line; std::getline(lines, line);) {
    if (!line.starts_with(bucket)) continue;
    const auto label = [&](std::string_view name) -> std::optional<std::string> {
      const std::string key = fmt::format("{}=\"", name);
      const auto at = line.find(key);
      if (at == std::string::npos) return std::nullopt;
      const auto from = at + key.size();
      const auto to = line.find('"', from);
      if (to == std::string::npos) return std::nullopt;
      return line.substr(from, to - from);
    };
    const auto le = label("le");
    const auto close = line.rfind("} ");
    if (!le || close == std::string::npos) continue;
    const double bound = *le == "+Inf" ? INFINITY : std::strtod(le->c_str(), nullptr);
    out[label("type").value_or("")].emplace_back(bound, std::strtod(line.c_str() + close + 2, nullptr));
  }
  return out;
}

// What a family observed of `type` between two readings of /metrics, as bucket bounds of its p50
// and p99.
OwnTime own_time(const std::string& before, const std::string& after, std::string_view family,
                 const std::string& type = "") {
  OwnTime own;
  const auto was = histogram_buckets(before, family);
  const auto now = histogram_buckets(after, family);
  const auto buckets = now.find(type);
  if (buckets == now.end() || buckets->second.empty()) return own;
  const auto earlier = was.find(type);
  std::vector<std::pair<double, double>> delta = buckets->second;
  if (earlier != was.end() && earlier->second.size() == delta.size()) {
    for (std::size_t i = 0; i < delta.size(); ++i) delta[i].second -= earlier->second[i].second;
  }
  const double total = delta.back().second;
  own.requests = static_cast<std::uint64_t>(total);
  if (total <= 0) return own;
  const auto at_most_ms = [&](double q) {
    for (const auto& [bound, count] : delta) {
      if (count >= q * total) return bound * 1000;
    }
    return double{INFINITY};
  };
  own.p50_at_most_ms = at_most_ms(0.5);
  own.p99_at_most_ms = at_most_ms(0.99);
  return own;
}

// A thread's time on a CPU and waiting for one, from the kernel's schedstat (milliseconds since it
// started); zeros where the kernel keeps no schedstat.
struct ThreadSchedule {
  double ran_ms = 0;
  double waited_ms = 0;
};

ThreadSchedule thread_schedule(pid_t pid, pid_t tid) {
  std::ifstream in(fmt::format("/proc/{}/task/{}/schedstat", pid, tid));
  unsigned long long ran_ns = 0;
  unsigned long long waited_ns = 0;
  if (!(in >> ran_ns >> waited_ns)) return {};
  return {static_cast<double>(ran_ns) / 1e6, static_cast<double>(waited_ns) / 1e6};
}

// The threads that time round trips: the calling one and the Requesters' ZeroMQ threads, never a
// fake agent's. On the load's CPUs a client that waits for a fake agent's turn on the CPU adds
// that wait to the reply it times: at 10,000 agents its own waits (p99 5-12 ms) were most of the
// echo's p99, so the ratios compared the load generator with itself. While a TimingClient lives,
// its threads run at real-time priority (SCHED_FIFO 1) where the bench may raise them, and it
// measures what they still wait for a CPU.
class TimingClient {
 public:
  explicit TimingClient(bool real_time) {
    tids_.push_back(static_cast<pid_t>(::gettid()));
    const std::string prefix = fmt::format("{}/", kRequesterThreadPrefix);
    std::error_code ec;
    for (const auto& task : fs::directory_iterator("/proc/self/task", ec)) {
      std::ifstream comm(task.path() / "comm");
      std::string name;
      if (std::getline(comm, name) && name.rfind(prefix, 0) == 0) tids_.push_back(std::stoi(task.path().filename().string()));
    }
    if (!real_time) return;
    sched_param param{};
    param.sched_priority = 1;
    std::size_t raised = 0;
    for (; raised < tids_.size(); ++raised) {
      if (::sched_setscheduler(tids_[raised], SCHED_FIFO | SCHED_RESET_ON_FORK, &param) != 0) break;
    }
    real_time_ = raised == tids_.size();
    if (!real_time_) {
      refusal_ = std::strerror(errno);
      restore(raised);
    }
  }
  ~TimingClient() {
    if (real_time_) restore(tids_.size());
  }
  TimingClient(const TimingClient&) = delete;
  TimingClient& operator=(const TimingClient&) = delete;

  bool real_time() const { return real_time_; }
  const std::string& refusal() const { return refusal_; }
  // What these threads have waited for a CPU since they started, in microseconds.
  double waited_us() const {
    double total_ms = 0;
    for (pid_t tid : tids_) total_ms += thread_schedule(::getpid(), tid).waited_ms;
    return total_ms * 1000;
  }

 private:
  void restore(std::size_t count) {
    const sched_param normal{};
    for (std::size_t i = 0; i < count; ++i) (void)::sched_setscheduler(tids_[i], SCHED_OTHER, &normal);
  }

  std::vector<pid_t> tids_;
  bool real_time_ = false;
  std::string refusal_;
};

Latency latency(const std::vector<double>& rtts_us) {
  return {percentile(rtts_us, 0.5) / 1000, percentile(rtts_us, 0.99) / 1000, percentile(rtts_us, 1) / 1000,
          rtts_us.size()};
}

// What one server (the coordinator or the echo) did under N agents.
struct Run {
  std::size_t agents = 0;
  std::vector<int> server_cpus;  // where the server ran, as the kernel has it
  std::size_t registered = 0;
  double registration_seconds = 0;
  double cpu_per_heartbeat_ms = NAN;  // median of the windows
  double cpu_percent = NAN;
  // The fake agents' and the bench's own share of the machine's cores in the same windows: near
  // the core count, the load generator starves, not only the server.
  double load_generator_cpu_percent = NAN;
  // The server's peak resident memory over its run (its connections, and the coordinator's queue).
  double peak_resident_mb = NAN;
  double heartbeats_per_second = 0;
  Latency heartbeat;
  Latency submit;
  Latency lease;
  Latency release;
  // What the timing client itself waited for a CPU during each timed submit and lease, and
  // whether it ran at real-time priority.
  Latency timing_client_waited;
  bool timing_client_real_time = false;
  // The coordinator run only: its own time for the same submits and leases, from its /metrics.
  OwnTime own_submit;
  OwnTime own_lease;
  // Meanwhile: its store's commits, and its loop thread's (the main thread's) share of the time on
  // a CPU and waiting for one.
  OwnTime store_commits;
  double loop_ran_percent = NAN;
  double loop_waited_percent = NAN;
  // The echo run only: the same round trips against the echo that fdatasyncs before it replies.
  Latency durable_submit;
  Latency durable_lease;
  std::size_t agent_processes = 1;
  std::uint64_t timeouts = 0;      // sessions the agents gave up on in steady state
  std::uint64_t connect_failures = 0;  // sockets the bench itself could not open
  std::size_t lost = 0;            // nodes the coordinator declared lost in steady state
  double submit_jobs_per_second = NAN;
  double cpu_per_submit_ms = NAN;
  std::size_t queued_at_burst = 0;
  std::size_t burst_accepted = 0;
  // Leases booked a day ahead with the queue at its fullest: each is answered with why it waits.
  Latency booked_lease;
  // After a SIGSTOP of twice the liveness timeout.
  bool stalled = false;
  std::size_t stall_hellos = 0;
  std::uint64_t stall_new_connections = 0;  // each a CURVE handshake
  std::size_t stall_largest_slot = 0;  // hellos in the busiest 100 ms
  std::uint64_t stall_agent_timeouts = 0;
  std::size_t stall_lost = 0;
  std::size_t registered_after_stall = 0;
  Latency stall_submit;  // one client's submits, one at a time, while the coordinator works off the stall
};

std::size_t count_lines(const fs::path& log, const std::string& marker) {
  std::ifstream in(log);
  std::size_t n = 0;
  for (std::string line; std::getline(in, line);) n += line.find(marker) != std::string::npos ? 1 : 0;
  return n;
}

constexpr const char* kLostMarker = " lost: silent for ";

// A fleet slice's settings and keys, for --fleet-slice.
nlohmann::json slice_json(const FleetOptions& options) {
  nlohmann::json keys = nlohmann::json::array();
  for (const KeyPair& k : options.keys) keys.push_back({k.public_key, k.secret_key});
  return {{"endpoint", options.endpoint},
          {"server_public_key", options.server_public_key},
          {"first_index", options.first_index},
          {"threads", options.threads},
          {"echo", options.echo},
          {"heartbeat_interval_ms", options.heartbeat_interval_ms},
          {"liveness_missed_beats", options.liveness_missed_beats},
          {"connects_per_second", options.connects_per_second},
          {"keys", keys}};
}

kiln::Result<FleetOptions> read_slice(const fs::path& path) {
  std::ifstream in(path);
  const auto json = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  const auto wrong = [&] {
    return tl::unexpected(kiln::Error{kiln::Errc::invalid_argument,
                                      fmt::format("{} is not a fleet slice written by kiln-bench-scale; --fleet-slice "
                                                  "is internal, leave it to the bench",
                                                  path.string())});
  };
  if (!json.is_object()) return wrong();
  FleetOptions options;
  try {
    options.endpoint = json.at("endpoint").get<std::string>();
    options.server_public_key = json.at("server_public_key").get<std::string>();
    options.first_index = json.at("first_index").get<std::size_t>();
    options.threads = json.at("threads").get<int>();
    options.echo = json.at("echo").get<bool>();
    options.heartbeat_interval_ms = json.at("heartbeat_interval_ms").get<std::uint32_t>();
    options.liveness_missed_beats = json.at("liveness_missed_beats").get<std::uint32_t>();
    options.connects_per_second = json.at("connects_per_second").get<std::uint32_t>();
    for (const auto& k : json.at("keys")) options.keys.push_back({k.at(0).get<std::string>(), k.at(1).get<std::string>()});
  } catch (const nlohmann::json::exception&) {
    return wrong();
  }
  return options;
}

// The fleet split over processes of this program (--fleet-slice), each under its own file limit.
class FleetProcesses : public Fleet {
 public:
  FleetProcesses(std::vector<int> fds, std::vector<pid_t> pids) : slices_(std::move(fds)), pids_(std::move(pids)) {}
  ~FleetProcesses() override {
    for (pid_t pid : pids_) stop_process(pid);
  }
  FleetProcesses(const FleetProcesses&) = delete;
  FleetProcesses& operator=(const FleetProcesses&) = delete;

  FleetCounts counts() override { return slices_.counts(); }
  std::vector<double> take_heartbeat_rtts_us() override { return slices_.take_heartbeat_rtts_us(); }
  std::vector<TimeMs> take_hello_times_ms() override { return slices_.take_hello_times_ms(); }
  const std::vector<pid_t>& pids() const { return pids_; }

 private:
  FleetSlices slices_;
  std::vector<pid_t> pids_;
};

class Bench {
 public:
  Bench(Settings settings, fs::path dir) : s_(std::move(settings)), dir_(std::move(dir)) {
    server_keys_ = *kiln::generate_keypair();
    client_keys_ = *kiln::generate_keypair();
    const std::size_t most = *std::max_element(s_.agents.begin(), s_.agents.end());
    for (std::size_t i = 0; i < most; ++i) agent_keys_.push_back(*kiln::generate_keypair());
    (void)kiln::write_keypair((dir_ / "coordinator").string(), server_keys_);
  }

  kiln::Result<Run> run(std::size_t n, bool echo, bool stall) {
    const std::vector<int> ports = kiln::transport::free_loopback_ports(4);
    const std::string agent_endpoint = fmt::format("tcp://127.0.0.1:{}", ports[0]);
    const std::string client_endpoint = fmt::format("tcp://127.0.0.1:{}", ports[1]);
    const std::string durable_client_endpoint = fmt::format("tcp://127.0.0.1:{}", ports[2]);
    const std::string metrics_address = fmt::format("127.0.0.1:{}", ports[3]);
    const std::string server = echo ? "echo" : "coordinator";
    const fs::path log = dir_ / fmt::format("{}-{}.log", server, n);
    pid_t pid = 0;
    if (echo) {
      // Beside the coordinator's store directories: the same filesystem, the same fsync.
      const fs::path durable_file = dir_ / fmt::format("durable-echo-{}.data", n);
      pid = spawn({self_, "--echo-server", agent_endpoint, client_endpoint, durable_client_endpoint,
                   (dir_ / "coordinator.key").string(), durable_file.string()},
                  log, -1, placement_.server);
    } else {
      const fs::path db_dir = dir_ / fmt::format("store-{}", n);
      fs::remove_all(db_dir);
      fs::create_directories(db_dir);
      write_config(db_dir / "coordinator.toml", n, agent_endpoint, client_endpoint, metrics_address);
      pid = spawn({s_.coordinator, "--config", (db_dir / "coordinator.toml").string()}, log, -1, placement_.server);
    }
    Run r;
    r.agents = n;
    FleetOptions options;
    options.endpoint = agent_endpoint;
    options.server_public_key = server_keys_.public_key;
    options.keys.assign(agent_keys_.begin(), agent_keys_.begin() + static_cast<std::ptrdiff_t>(n));
    options.threads = s_.threads;
    options.echo = echo;
    options.heartbeat_interval_ms = s_.heartbeat_interval_ms;
    options.liveness_missed_beats = s_.liveness_missed_beats;
    options.connects_per_second = s_.connects_per_second;
    const TimeMs started = steady_ms();
    r.agent_processes = s_.agent_processes > 0
                            ? s_.agent_processes
                            : (n + s_.agents_per_process - 1) / std::max<std::size_t>(1, s_.agents_per_process);
    std::vector<pid_t> generator_pids = {::getpid()};
    std::unique_ptr<Fleet> agents;
    if (r.agent_processes > 1) {
      auto processes = start_fleet_processes(options, r.agent_processes, server);
      generator_pids.insert(generator_pids.end(), processes->pids().begin(), processes->pids().end());
      agents = std::move(processes);
    } else {
      agents = std::make_unique<FakeFleet>(options);
    }
    Fleet& fleet = *agents;
    const auto generator_cpu_ms = [&] {
      double sum = 0;
      for (pid_t p : generator_pids) sum += cpu_ms(p);
      return sum;
    };
    const TimeMs patience_ms = 20000 + static_cast<TimeMs>(n) * 10;
    while (fleet.counts().registered < n && steady_ms() - started < patience_ms && running(pid)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    if (!running(pid)) return tl::unexpected(server_gone(server, log));
    r.registered = fleet.counts().registered;
    r.registration_seconds = static_cast<double>(steady_ms() - started) / 1000;
    progress("{} agents in {} process{}: {} registered with the {} in {:.1f} s", n, r.agent_processes,
             r.agent_processes > 1 ? "es" : "", r.registered, server, r.registration_seconds);
    // The hellos' aftermath (welcomes, first scheduling) settles before measuring.
    std::this_thread::sleep_for(std::chrono::milliseconds(std::min<int>(2000, s_.measure_seconds * 500)));
    (void)fleet.take_heartbeat_rtts_us();
    const std::size_t lost_before = echo ? 0 : count_lines(log, kLostMarker);
    const std::uint64_t timeouts_before = fleet.counts().timeouts;

    // Steady heartbeats only: three windows, the median of their CPU per heartbeat.
    std::vector<double> per_beat;
    std::vector<double> percent;
    std::vector<double> rates;
    std::vector<double> generator_percent;
    const int window_ms = std::max(300, s_.measure_seconds * 1000 / 3);
    for (int w = 0; w < 3; ++w) {
      const double cpu0 = server_cpu_ms(pid);
      const double generator_cpu0 = generator_cpu_ms();
      const auto beats0 = fleet.counts().heartbeats_answered;
      const TimeMs t0 = steady_ms();
      std::this_thread::sleep_for(std::chrono::milliseconds(window_ms));
      const double cpu = server_cpu_ms(pid) - cpu0;
      const auto beats = fleet.counts().heartbeats_answered - beats0;
      const double seconds = static_cast<double>(steady_ms() - t0) / 1000;
      if (beats > 0) per_beat.push_back(cpu / static_cast<double>(beats));
      percent.push_back(cpu / 10 / seconds);
      generator_percent.push_back((generator_cpu_ms() - generator_cpu0) / 10 / seconds);
      rates.push_back(static_cast<double>(beats) / seconds);
    }
    r.cpu_per_heartbeat_ms = median(per_beat);
    r.cpu_percent = median(percent);
    r.load_generator_cpu_percent = median(generator_percent);
    r.heartbeats_per_second = median(rates);
    r.heartbeat = latency(fleet.take_heartbeat_rtts_us());

    // Round trips of one client at a time, under the agents' load.
    Requester client(client_endpoint, client_keys_, server_keys_.public_key, echo);
    const std::string metrics_before = echo ? "" : kiln::http::get(metrics_address, "/metrics").body;
    const ThreadSchedule loop_before = thread_schedule(pid, pid);
    const double requests_from_us = steady_us();
    time_round_trips(client, echo, pid, r.submit, r.lease, r.release, &r);
    if (!running(pid)) return tl::unexpected(server_gone(server, log));
    if (const ThreadSchedule loop_after = thread_schedule(pid, pid); loop_after.ran_ms > 0) {
      const double elapsed_ms = (steady_us() - requests_from_us) / 1000;
      r.loop_ran_percent = 100 * (loop_after.ran_ms - loop_before.ran_ms) / elapsed_ms;
      r.loop_waited_percent = 100 * (loop_after.waited_ms - loop_before.waited_ms) / elapsed_ms;
    }
    if (!echo) {
      const std::string metrics_after = kiln::http::get(metrics_address, "/metrics").body;
      r.own_submit = own_time(metrics_before, metrics_after, "kiln_client_request_seconds", "submit_job");
      r.own_lease = own_time(metrics_before, metrics_after, "kiln_client_request_seconds", "request_lease");
      r.store_commits = own_time(metrics_before, metrics_after, "kiln_store_commit_seconds");
    }
    if (echo) {
      Requester durable_client(durable_client_endpoint, client_keys_, server_keys_.public_key, true);
      Latency durable_release;
      time_round_trips(durable_client, true, pid, r.durable_submit, r.durable_lease, durable_release);
    }

    // Throughput: the queue filled to `queued`, then `burst` more, pipelined, each acknowledged
    // only once stored.
    const std::size_t fill = s_.queued > static_cast<std::size_t>(s_.requests) ? s_.queued - s_.requests : 0;
    (void)client.pipeline(std::vector<kiln::protocol::Body>(fill, submit_body()), 64, 20000);
    r.queued_at_burst = fill + static_cast<std::size_t>(s_.requests);
    const double cpu0 = server_cpu_ms(pid);
    const double t0 = steady_us();
    auto accepted = client.pipeline(std::vector<kiln::protocol::Body>(s_.burst, submit_body()), 64, 20000);
    const double seconds = (steady_us() - t0) / 1e6;
    r.burst_accepted = static_cast<std::size_t>(std::count_if(accepted.begin(), accepted.end(), [&](const auto& a) {
      return echo || std::holds_alternative<kiln::protocol::JobAccepted>(a.body);
    }));
    r.submit_jobs_per_second = static_cast<double>(r.burst_accepted) / seconds;
    if (r.burst_accepted > 0) r.cpu_per_submit_ms = (server_cpu_ms(pid) - cpu0) / static_cast<double>(r.burst_accepted);
    time_booked_leases(client, echo, pid, r.booked_lease);

    if (!running(pid)) return tl::unexpected(server_gone(server, log));
    r.timeouts = fleet.counts().timeouts - timeouts_before;
    r.connect_failures = fleet.counts().connect_failures;
    r.lost = echo ? 0 : count_lines(log, kLostMarker) - lost_before;
    progress("{} agents on the {}: {:.3f} ms CPU per heartbeat, {:.0f}% CPU (the agents: {:.0f}%), heartbeat p99 "
             "{:.1f} ms, {:.0f} jobs/s",
             n, server, r.cpu_per_heartbeat_ms, r.cpu_percent, r.load_generator_cpu_percent, r.heartbeat.p99_ms,
             r.submit_jobs_per_second);

    r.server_cpus = allowed_cpus(pid);
    r.peak_resident_mb = peak_resident_mb(pid);
    if (stall) stall_and_resume(r, fleet, client, pid, log);
    stop_process(pid);
    return r;
  }

 private:
  template <class... A>
  void progress(fmt::format_string<A...> format, A&&... args) {
    std::cerr << fmt::format(format, std::forward<A>(args)...) << "\n";
  }

  // One request at a time: `requests` submits, then as many leases, each released. Only what
  // was done is timed (the echo does nothing, so everything it answers): a refusal is not a
  // round trip of the request's work, and the first one is reported. Stops if the server exits.
  // `timing`, when given, receives what the timing client waited for a CPU meanwhile.
  void time_round_trips(Requester& client, bool echo, pid_t server, Latency& submit, Latency& lease,
                        Latency& release, Run* timing = nullptr) {
    const TimingClient timer(s_.timing_priority);
    tell_timing_refusal(timer);
    std::vector<double> submit_us;
    std::vector<double> lease_us;
    std::vector<double> release_us;
    std::vector<double> waited_us;
    double call_waited_us = 0;  // by the timing client, during the last timed call
    const auto timed_call = [&](kiln::protocol::Body body) {
      const double waited_before_us = timer.waited_us();
      auto reply = client.call(std::move(body), 10000);
      call_waited_us = timer.waited_us() - waited_before_us;
      return reply;
    };
    std::size_t refused = 0;
    const auto done = [&](const auto& reply, auto... accepted) {
      if (echo || (std::holds_alternative<decltype(accepted)>(reply->body) || ...)) return true;
      if (refused++ == 0) {
        const auto* error = std::get_if<kiln::protocol::ErrorReply>(&reply->body);
        progress("a timed request was refused: {}", error != nullptr ? error->message : "an unexpected reply");
      }
      return false;
    };
    for (int i = 0; i < s_.requests && running(server); ++i) {
      auto reply = timed_call(submit_body());
      if (reply && done(reply, kiln::protocol::JobAccepted{})) {
        submit_us.push_back(reply->rtt_us);
        waited_us.push_back(call_waited_us);
      }
    }
    for (int i = 0; i < s_.requests && running(server); ++i) {
      kiln::protocol::RequestLease ask;
      ask.chips = 1;
      ask.duration_ms = 60000;
      auto reply = timed_call(ask);
      if (!reply || !done(reply, kiln::protocol::LeaseGranted{}, kiln::protocol::LeasePending{})) continue;
      lease_us.push_back(reply->rtt_us);
      waited_us.push_back(call_waited_us);
      std::uint64_t lease_id = 1;
      if (const auto* granted = std::get_if<kiln::protocol::LeaseGranted>(&reply->body)) lease_id = granted->lease.lease_id;
      if (const auto* pending = std::get_if<kiln::protocol::LeasePending>(&reply->body)) lease_id = pending->lease.lease_id;
      auto released = client.call(kiln::protocol::ReleaseLease{lease_id}, 10000);
      if (released && done(released, kiln::protocol::Ok{})) release_us.push_back(released->rtt_us);
    }
    if (refused > 0) progress("{} timed requests were refused and are not among the round trips", refused);
    submit = latency(submit_us);
    lease = latency(lease_us);
    release = latency(release_us);
    if (timing != nullptr) {
      timing->timing_client_waited = latency(waited_us);
      timing->timing_client_real_time = timer.real_time();
    }
  }

  // Where the timing client could not be raised to real-time priority (unless
  // --no-timing-priority asked for none), says so once.
  void tell_timing_refusal(const TimingClient& timer) {
    if (s_.timing_priority && !timer.real_time() && !told_timing_refusal_) {
      told_timing_refusal_ = true;
      progress("the timing client could not run at real-time priority ({}): its round trips include its own waits "
               "for a CPU beside the fake agents; run the benchmark as root or with CAP_SYS_NICE",
               timer.refusal());
    }
  }

  // A tenth as many leases as `requests`, one at a time, each booked a day ahead and released: a
  // lease that cannot start is answered with why it waits and when it should start, which the
  // scheduler works out among every job queued.
  void time_booked_leases(Requester& client, bool echo, pid_t server, Latency& booked) {
    const TimingClient timer(s_.timing_priority);
    tell_timing_refusal(timer);
    std::vector<double> booked_us;
    std::size_t refused = 0;
    for (int i = 0; i < std::max(1, s_.requests / 10) && running(server); ++i) {
      kiln::protocol::RequestLease ask;
      ask.chips = 1;
      ask.duration_ms = 60000;
      const auto day_ahead = std::chrono::system_clock::now() + std::chrono::hours(24);
      ask.start_at_ms = static_cast<std::uint64_t>(
          std::chrono::duration_cast<std::chrono::milliseconds>(day_ahead.time_since_epoch()).count());
      auto reply = client.call(ask, 10000);
      if (!reply) continue;
      const auto* pending = std::get_if<kiln::protocol::LeasePending>(&reply->body);
      if (!echo && pending == nullptr) {
        if (refused++ == 0) {
          const auto* error = std::get_if<kiln::protocol::ErrorReply>(&reply->body);
          progress("a lease booked a day ahead was not left waiting: {}",
                   error != nullptr ? error->message : "an unexpected reply");
        }
        continue;
      }
      booked_us.push_back(reply->rtt_us);
      (void)client.call(kiln::protocol::ReleaseLease{pending != nullptr ? pending->lease.lease_id : 1}, 10000);
    }
    if (refused > 0) progress("{} leases booked ahead were not left waiting and are not timed", refused);
    booked = latency(booked_us);
  }

  // The agents in `processes` slices of about equal size, each a process of this program
  // (--fleet-slice) reading its settings and keys from a file and answering on a socket pair.
  std::unique_ptr<FleetProcesses> start_fleet_processes(const FleetOptions& options, std::size_t processes,
                                               const std::string& server) {
    const std::size_t n = options.keys.size();
    std::vector<int> fds;
    std::vector<pid_t> pids;
    for (std::size_t p = 0; p < processes; ++p) {
      const std::size_t first = n * p / processes;
      const std::size_t last = n * (p + 1) / processes;
      FleetOptions slice = options;
      slice.keys.assign(options.keys.begin() + static_cast<std::ptrdiff_t>(first),
                        options.keys.begin() + static_cast<std::ptrdiff_t>(last));
      slice.first_index = first;
      const std::string name = fmt::format("agents-{}-{}-{}", server, n, p + 1);
      const fs::path file = dir_ / (name + ".json");
      {
        // The agents' secret keys: for this run only, and private to its user.
        std::ofstream out(file);
        fs::permissions(file, fs::perms::owner_read | fs::perms::owner_write);
        out << slice_json(slice).dump();
      }
      int pair[2];
      if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0) {
        progress("cannot make a socket pair for agent process {}: {}; running {} of {} processes", p + 1,
                 std::strerror(errno), p, processes);
        break;
      }
      pids.push_back(spawn({self_, "--fleet-slice", file.string()}, dir_ / (name + ".log"), pair[1]));
      ::close(pair[1]);
      fds.push_back(pair[0]);
    }
    return std::make_unique<FleetProcesses>(std::move(fds), std::move(pids));
  }

  static kiln::protocol::Body submit_body() {
    kiln::protocol::SubmitJob job;
    job.workload = "bench";
    job.chips = 8;
    // All on one node: one runs, the rest stay queued, so the queue grows as it would behind a busy fleet.
    job.node_id = node_id(0);
    job.timeout_ms = 3600000;
    return job;
  }

  // SIGSTOP for twice the liveness timeout, then: the hellos of the agents that timed the
  // coordinator out, per 100 ms, the nodes it declared lost, and the round trips of a client's
  // submits, one at a time from the moment it resumes, while it works through the backlog.
  void stall_and_resume(Run& r, Fleet& fleet, Requester& client, pid_t pid, const fs::path& log) {
    const TimeMs liveness_ms = static_cast<TimeMs>(s_.heartbeat_interval_ms) * s_.liveness_missed_beats;
    const std::size_t lost_before = count_lines(log, kLostMarker);
    const std::uint64_t timeouts_before = fleet.counts().timeouts;
    const std::uint64_t connections_before = fleet.counts().connections_opened;
    (void)fleet.take_hello_times_ms();
    const TimeMs stopped = steady_ms();
    ::kill(pid, SIGSTOP);
    std::this_thread::sleep_for(std::chrono::milliseconds(2 * liveness_ms));
    ::kill(pid, SIGCONT);
    const std::size_t n = r.agents;
    const TimeMs patience_ms = 4 * liveness_ms + static_cast<TimeMs>(n) * 5;
    const TimeMs resumed = steady_ms();
    std::vector<double> submit_us;
    while (steady_ms() - resumed < 2 * liveness_ms) {
      auto reply = client.call(submit_body(), 10000);
      if (reply && std::holds_alternative<kiln::protocol::JobAccepted>(reply->body)) submit_us.push_back(reply->rtt_us);
    }
    r.stall_submit = latency(submit_us);
    while (fleet.counts().registered < n && steady_ms() - resumed < patience_ms) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    const auto hellos = fleet.take_hello_times_ms();
    std::map<TimeMs, std::size_t> slots;
    for (TimeMs t : hellos) ++slots[(t - stopped) / 100];
    r.stalled = true;
    r.stall_hellos = hellos.size();
    r.stall_new_connections = fleet.counts().connections_opened - connections_before;
    for (const auto& [slot, count] : slots) r.stall_largest_slot = std::max(r.stall_largest_slot, count);
    r.stall_agent_timeouts = fleet.counts().timeouts - timeouts_before;
    r.stall_lost = count_lines(log, kLostMarker) - lost_before;
    r.registered_after_stall = fleet.counts().registered;
    progress("{} agents after a {} ms stall: {} hellos ({} on new connections), at most {} in 100 ms, {} lost", n,
             2 * liveness_ms, r.stall_hellos, r.stall_new_connections, r.stall_largest_slot, r.stall_lost);
  }

  void write_config(const fs::path& path, std::size_t n, const std::string& agent_endpoint,
                    const std::string& client_endpoint, const std::string& metrics_address) {
    std::ofstream out(path);
    out << fmt::format(
        "[coordinator]\nagent_endpoint = \"{}\"\nclient_endpoint = \"{}\"\nsecret_key_file = \"{}\"\n"
        "database = \"kiln.db\"\nlog_level = \"info\"\n\n"
        "[knobs]\nheartbeat_interval_ms = {}\nliveness_missed_beats = {}\nmax_queued_jobs = {}\n"
        "max_active_leases = {}\n\n[scheduler]\nmax_pending_requests = {}\nmax_nodes = {}\n",
        agent_endpoint, client_endpoint, (dir_ / "coordinator.key").string(), s_.heartbeat_interval_ms,
        s_.liveness_missed_beats, s_.queued + s_.burst + s_.requests + 1000, s_.requests + 100,
        s_.queued + s_.burst + s_.requests + 1100, n + 100);
    out << fmt::format("\n[http]\nlisten = \"{}\"\n", metrics_address);
    out << fmt::format("\n[[keys]]\nname = \"bench-developer\"\nrole = \"developer\"\npublic_key = \"{}\"\n",
                       client_keys_.public_key);
    for (std::size_t i = 0; i < n; ++i) {
      out << fmt::format("\n[[keys]]\nname = \"{}\"\nrole = \"agent\"\npublic_key = \"{}\"\n", node_id(i),
                         agent_keys_[i].public_key);
    }
  }

 public:
  std::string self_;
  Placement placement_;

 private:
  Settings s_;
  bool told_timing_refusal_ = false;
  fs::path dir_;
  KeyPair server_keys_;
  KeyPair client_keys_;
  std::vector<KeyPair> agent_keys_;
};

double ratio(double a, double b) { return b > 0 ? a / b : NAN; }

nlohmann::json latency_json(const Latency& l) {
  return {{"p50_ms", l.p50_ms}, {"p99_ms", l.p99_ms}, {"max_ms", l.max_ms}, {"samples", l.samples}};
}

nlohmann::json number(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); }

nlohmann::json own_time_json(const OwnTime& own) {
  return {{"p50_at_most_ms", number(own.p50_at_most_ms)},
          {"p99_at_most_ms", number(own.p99_at_most_ms)},
          {"requests", own.requests}};
}

nlohmann::json row_json(const Run& c, const Run& e) {
  nlohmann::json row = {
      {"agents", c.agents},
      {"registered", c.registered},
      {"echo_registered", e.registered},
      // Not every agent registered even with the echo: the machine could not run this many fake
      // agents, and the row measures the load generator as much as the server.
      {"load_generator_saturated", e.registered < e.agents},
      {"agent_processes", c.agent_processes},
      {"server_cpus", c.server_cpus},
      {"echo_cpus", e.server_cpus},
      {"registration_seconds", c.registration_seconds},
      {"heartbeats_per_second", c.heartbeats_per_second},
      {"cpu_per_heartbeat_ms", number(c.cpu_per_heartbeat_ms)},
      {"echo_cpu_per_heartbeat_ms", number(e.cpu_per_heartbeat_ms)},
      {"cpu_per_heartbeat_vs_echo", number(ratio(c.cpu_per_heartbeat_ms, e.cpu_per_heartbeat_ms))},
      {"cpu_percent", number(c.cpu_percent)},
      {"load_generator_cpu_percent", number(c.load_generator_cpu_percent)},
      {"echo_load_generator_cpu_percent", number(e.load_generator_cpu_percent)},
      {"echo_cpu_percent", number(e.cpu_percent)},
      {"peak_resident_mb", number(c.peak_resident_mb)},
      {"echo_peak_resident_mb", number(e.peak_resident_mb)},
      {"heartbeat", latency_json(c.heartbeat)},
      {"echo_heartbeat", latency_json(e.heartbeat)},
      {"heartbeat_p99_vs_echo", number(ratio(c.heartbeat.p99_ms, e.heartbeat.p99_ms))},
      {"submit", latency_json(c.submit)},
      {"echo_submit", latency_json(e.submit)},
      {"submit_p99_vs_echo", number(ratio(c.submit.p99_ms, e.submit.p99_ms))},
      {"durable_echo_submit", latency_json(e.durable_submit)},
      {"submit_p99_vs_durable_echo", number(ratio(c.submit.p99_ms, e.durable_submit.p99_ms))},
      {"coordinator_own_submit", own_time_json(c.own_submit)},
      {"lease", latency_json(c.lease)},
      {"coordinator_own_lease", own_time_json(c.own_lease)},
      {"coordinator_store_commits", own_time_json(c.store_commits)},
      {"coordinator_loop_ran_percent", number(c.loop_ran_percent)},
      {"coordinator_loop_waited_for_cpu_percent", number(c.loop_waited_percent)},
      {"echo_loop_ran_percent", number(e.loop_ran_percent)},
      {"echo_loop_waited_for_cpu_percent", number(e.loop_waited_percent)},
      {"release", latency_json(c.release)},
      {"timing_client_real_time", c.timing_client_real_time},
      {"timing_client_waited", latency_json(c.timing_client_waited)},
      {"echo_timing_client_real_time", e.timing_client_real_time},
      {"echo_timing_client_waited", latency_json(e.timing_client_waited)},
      {"echo_lease", latency_json(e.lease)},
      {"lease_p99_vs_echo", number(ratio(c.lease.p99_ms, e.lease.p99_ms))},
      {"durable_echo_lease", latency_json(e.durable_lease)},
      {"lease_p99_vs_durable_echo", number(ratio(c.lease.p99_ms, e.durable_lease.p99_ms))},
      {"agent_timeouts", c.timeouts},
      {"bench_connect_failures", c.connect_failures},
      {"lost", c.lost},
      {"queued_at_burst", c.queued_at_burst},
      {"burst_accepted", c.burst_accepted},
      {"submit_jobs_per_second", number(c.submit_jobs_per_second)},
      {"cpu_per_submit_ms", number(c.cpu_per_submit_ms)},
      {"booked_lease", latency_json(c.booked_lease)},
      {"echo_booked_lease", latency_json(e.booked_lease)},
      {"booked_lease_p99_vs_echo", number(ratio(c.booked_lease.p99_ms, e.booked_lease.p99_ms))},
  };
  if (c.stalled) {
    row["stall"] = {{"hellos", c.stall_hellos},
                    {"new_connections", c.stall_new_connections},
                    {"largest_100ms_slot", c.stall_largest_slot},
                    {"agent_timeouts", c.stall_agent_timeouts},
                    {"lost", c.stall_lost},
                    {"registered_after", c.registered_after_stall},
                    {"submit_while_recovering", latency_json(c.stall_submit)}};
  }
  return row;
}

// Medians over the repeats of one fleet size. Each ratio is taken within its own pair (the echo
// and the coordinator measured minutes apart on the same machine) before the median.
nlohmann::json medians_json(const std::vector<std::pair<Run, Run>>& pairs) {
  using Figure = double (*)(const Run&, const Run&);
  const auto med = [&](Figure figure) {
    std::vector<double> values;
    for (const auto& [c, e] : pairs) {
      if (const double v = figure(c, e); std::isfinite(v)) values.push_back(v);
    }
    return number(values.empty() ? NAN : median(std::move(values)));
  };
  return {
      {"agents", pairs.front().first.agents},
      {"repeats", pairs.size()},
      {"cpu_percent", med([](const Run& c, const Run&) { return c.cpu_percent; })},
      {"echo_cpu_percent", med([](const Run&, const Run& e) { return e.cpu_percent; })},
      {"cpu_per_heartbeat_vs_echo",
       med([](const Run& c, const Run& e) { return ratio(c.cpu_per_heartbeat_ms, e.cpu_per_heartbeat_ms); })},
      {"heartbeat_p99_vs_echo",
       med([](const Run& c, const Run& e) { return ratio(c.heartbeat.p99_ms, e.heartbeat.p99_ms); })},
      {"submit_p50_ms", med([](const Run& c, const Run&) { return c.submit.p50_ms; })},
      {"submit_p99_vs_echo", med([](const Run& c, const Run& e) { return ratio(c.submit.p99_ms, e.submit.p99_ms); })},
      {"submit_p99_vs_durable_echo",
       med([](const Run& c, const Run& e) { return ratio(c.submit.p99_ms, e.durable_submit.p99_ms); })},
      {"lease_p50_ms", med([](const Run& c, const Run&) { return c.lease.p50_ms; })},
      {"lease_p99_vs_echo", med([](const Run& c, const Run& e) { return ratio(c.lease.p99_ms, e.lease.p99_ms); })},
      {"lease_p99_vs_durable_echo",
       med([](const Run& c, const Run& e) { return ratio(c.lease.p99_ms, e.durable_lease.p99_ms); })},
      {"submit_jobs_per_second", med([](const Run& c, const Run&) { return c.submit_jobs_per_second; })},
      {"booked_lease_p99_ms", med([](const Run& c, const Run&) { return c.booked_lease.p99_ms; })},
      {"booked_lease_p99_vs_echo",
       med([](const Run& c, const Run& e) { return ratio(c.booked_lease.p99_ms, e.booked_lease.p99_ms); })},
  };
}

std::string ms(double v) { return std::isfinite(v) ? fmt::format("{:.3f}", v) : "-"; }
std::string x(double v) { return std::isfinite(v) ? fmt::format("{:.1f}x", v) : "-"; }

void print_text(const std::vector<std::pair<Run, Run>>& rows, const nlohmann::json& medians,
                const nlohmann::json& extrapolation, const Placement& placement) {
  fmt::print("{:>7} {:>10} {:>12} {:>7} {:>7} {:>17} {:>7} {:>17} {:>7} {:>17} {:>7} {:>6} {:>9}\n", "agents",
             "registered", "cpu/beat ms", "vs echo", "cpu %", "beat p50/p99 ms", "vs echo", "submit p50/p99",
             "vs echo", "lease p50/p99", "vs echo", "lost", "jobs/s");
  for (const auto& [c, e] : rows) {
    fmt::print("{:>7} {:>10} {:>12} {:>7} {:>7.1f} {:>17} {:>7} {:>17} {:>7} {:>17} {:>7} {:>6} {:>9.0f}\n", c.agents,
               c.registered, ms(c.cpu_per_heartbeat_ms), x(ratio(c.cpu_per_heartbeat_ms, e.cpu_per_heartbeat_ms)),
               c.cpu_percent, fmt::format("{}/{}", ms(c.heartbeat.p50_ms), ms(c.heartbeat.p99_ms)),
               x(ratio(c.heartbeat.p99_ms, e.heartbeat.p99_ms)),
               fmt::format("{}/{}", ms(c.submit.p50_ms), ms(c.submit.p99_ms)),
               x(ratio(c.submit.p99_ms, e.submit.p99_ms)), fmt::format("{}/{}", ms(c.lease.p50_ms), ms(c.lease.p99_ms)),
               x(ratio(c.lease.p99_ms, e.lease.p99_ms)), c.lost, c.submit_jobs_per_second);
    fmt::print("{:>7} {:>10} {:>12} {:>7} {:>7.1f} {:>17} {:>7} {:>17} {:>7} {:>17}{}\n", "echo", e.registered,
               ms(e.cpu_per_heartbeat_ms), "", e.cpu_percent,
               fmt::format("{}/{}", ms(e.heartbeat.p50_ms), ms(e.heartbeat.p99_ms)), "",
               fmt::format("{}/{}", ms(e.submit.p50_ms), ms(e.submit.p99_ms)), "",
               fmt::format("{}/{}", ms(e.lease.p50_ms), ms(e.lease.p99_ms)),
               e.registered < e.agents ? "   (not all registered even with the echo: the load generator saturated)" : "");
    fmt::print("{:>7} {:>10} {:>12} {:>7} {:>7} {:>17} {:>7} {:>17} {:>7} {:>17} {:>7}\n", "durable", "", "", "", "",
               "", "", fmt::format("{}/{}", ms(e.durable_submit.p50_ms), ms(e.durable_submit.p99_ms)),
               x(ratio(c.submit.p99_ms, e.durable_submit.p99_ms)),
               fmt::format("{}/{}", ms(e.durable_lease.p50_ms), ms(e.durable_lease.p99_ms)),
               x(ratio(c.lease.p99_ms, e.durable_lease.p99_ms)));
  }
  fmt::print("durable: the echo that writes each turn's requests to a file and calls fdatasync before it replies, as "
             "the coordinator's group commit does; its \"vs echo\" is the coordinator's p99 over it\n");
  for (const auto& [c, e] : rows) {
    fmt::print("{} agents: the fake agents ran in {} process{} and took {:.0f}% of a core beside the coordinator, "
               "{:.0f}% beside the echo ({} cores here)\n",
               c.agents, c.agent_processes, c.agent_processes > 1 ? "es" : "", c.load_generator_cpu_percent,
               e.load_generator_cpu_percent, std::thread::hardware_concurrency());
  }
  for (const auto& [c, e] : rows) {
    fmt::print("{} agents: the coordinator's peak resident memory {:.0f} MB, the echo's {:.0f} MB (VmHWM, with {} jobs "
               "queued in the coordinator at its fullest)\n",
               c.agents, c.peak_resident_mb, e.peak_resident_mb, c.queued_at_burst + c.burst_accepted);
  }
  fmt::print("{}\n", placement.text());
  const auto at_most = [](double v) { return std::isfinite(v) ? fmt::format("<= {:g} ms", v) : std::string("-"); };
  for (const auto& [c, e] : rows) {
    fmt::print("{} agents: of those round trips, the coordinator's own time (its kiln_client_request_seconds, the "
               "bucket each quantile falls in): submit p50 {}, p99 {} ({} timed); lease p50 {}, p99 {} ({} timed)\n",
               c.agents, at_most(c.own_submit.p50_at_most_ms), at_most(c.own_submit.p99_at_most_ms),
               c.own_submit.requests, at_most(c.own_lease.p50_at_most_ms), at_most(c.own_lease.p99_at_most_ms),
               c.own_lease.requests);
    fmt::print("{} agents: the timing client ran {} and itself waited for a CPU p99 {} ms per timed submit or "
               "lease beside the coordinator, {} ms beside the echo\n",
               c.agents, c.timing_client_real_time ? "at real-time priority" : "at normal priority",
               ms(c.timing_client_waited.p99_ms), ms(e.timing_client_waited.p99_ms));
    fmt::print("{} agents: meanwhile, the coordinator's store commits (kiln_store_commit_seconds): p50 {}, p99 {} ({} "
               "commits); its loop thread ran {:.0f}% of that time and waited {:.0f}% for a CPU (the echo's: {:.0f}% "
               "and {:.0f}%; the kernel's schedstat)\n",
               c.agents, at_most(c.store_commits.p50_at_most_ms), at_most(c.store_commits.p99_at_most_ms),
               c.store_commits.requests, c.loop_ran_percent, c.loop_waited_percent, e.loop_ran_percent,
               e.loop_waited_percent);
  }
  for (const auto& [c, e] : rows) {
    if (c.stalled) {
      fmt::print("after a SIGSTOP of twice the liveness timeout at {} agents: {} hellos ({} on new connections, "
                 "the rest on open ones), at most {} in one 100 ms slot; {} agents timed the coordinator out; {} "
                 "declared lost; {} registered after; {} submits while it caught up: p50 {} ms, p99 {} ms, the "
                 "longest {} ms\n",
                 c.agents, c.stall_hellos, c.stall_new_connections, c.stall_largest_slot, c.stall_agent_timeouts,
                 c.stall_lost, c.registered_after_stall, c.stall_submit.samples, ms(c.stall_submit.p50_ms),
                 ms(c.stall_submit.p99_ms), ms(c.stall_submit.max_ms));
    }
  }
  const auto figure = [](const nlohmann::json& v, const char* format) {
    return v.is_number() ? fmt::format(fmt::runtime(format), v.get<double>()) : std::string("-");
  };
  for (const auto& m : medians) {
    fmt::print("medians over {} repeats at {} agents: the coordinator took {}% of a core (the echo {}%), {} the echo's "
               "CPU per heartbeat; heartbeat p99 {} the echo's; submit p50 {} ms, p99 {} the echo's ({} the durable "
               "echo's); lease p50 {} ms, p99 {} the echo's ({} the durable echo's); {} jobs/s\n",
               m["repeats"].get<int>(), m["agents"].get<std::size_t>(), figure(m["cpu_percent"], "{:.1f}"),
               figure(m["echo_cpu_percent"], "{:.1f}"), figure(m["cpu_per_heartbeat_vs_echo"], "{:.2f}x"),
               figure(m["heartbeat_p99_vs_echo"], "{:.1f}x"), figure(m["submit_p50_ms"], "{:.3f}"),
               figure(m["submit_p99_vs_echo"], "{:.1f}x"), figure(m["submit_p99_vs_durable_echo"], "{:.1f}x"),
               figure(m["lease_p50_ms"], "{:.3f}"), figure(m["lease_p99_vs_echo"], "{:.1f}x"),
               figure(m["lease_p99_vs_durable_echo"], "{:.1f}x"), figure(m["submit_jobs_per_second"], "{:.0f}"));
  }
  fmt::print("job submission with {} queued: {:.0f} jobs/s ({} accepted, {} ms coordinator CPU per job)\n",
             rows.back().first.queued_at_burst, rows.back().first.submit_jobs_per_second,
             rows.back().first.burst_accepted, ms(rows.back().first.cpu_per_submit_ms));
  const auto& [booked, echo_booked] = rows.back();
  fmt::print("leases booked a day ahead with {} queued, each answered with why it waits: p50 {} ms, p99 {} ms, {} the "
             "echo's ({} timed)\n",
             booked.queued_at_burst + booked.burst_accepted, ms(booked.booked_lease.p50_ms),
             ms(booked.booked_lease.p99_ms), x(ratio(booked.booked_lease.p99_ms, echo_booked.booked_lease.p99_ms)),
             booked.booked_lease.samples);
  if (!extrapolation.is_null()) fmt::print("{}\n", extrapolation["text"].get<std::string>());
}

}  // namespace

int main(int argc, char** argv) {
  Settings s;
  bool quick = false;
  std::vector<std::string> echo_server;
  std::string fleet_slice;
  CLI::App app{"kiln-coordinator under N fake agents at 1 Hz and request/reply clients, against a raw ZeroMQ CURVE "
               "echo server under the same load (docs/performance.md, \"Scale\")"};
  app.set_version_flag("--version", kiln::version_text("kiln-bench-scale"));
  app.add_option("--agents", s.agents, "fleet sizes, comma-separated")->delimiter(',')->check(CLI::Range(1, 60000));
  app.add_flag("--quick", quick, "a small run of a few seconds: 20 and 50 agents (unless --agents), a short liveness timeout");
  app.add_flag("--json", s.json, "print the figures as JSON");
  app.add_option("--threads", s.threads, "threads running the fake agents")->check(CLI::Range(1, 16));
  app.add_option("--measure-seconds", s.measure_seconds, "length of the steady heartbeat window")
      ->check(CLI::Range(1, 600));
  app.add_option("--requests", s.requests, "sequential submits and leases timed per fleet size (and a tenth as many "
                 "leases booked a day ahead, with the queue at its fullest)")
      ->check(CLI::Range(1, 100000));
  app.add_option("--queued", s.queued, "jobs queued before the throughput burst")->check(CLI::Range(0, 1000000));
  app.add_option("--burst", s.burst, "jobs submitted, pipelined, for the throughput")->check(CLI::Range(1, 1000000));
  app.add_option("--connects-per-second", s.connects_per_second, "how fast the agents first connect")
      ->check(CLI::Range(1, 100000));
  app.add_option("--repeats", s.repeats,
                 "echo and coordinator runs per fleet size, alternating; with more than 1, the medians are printed "
                 "too (the stall follows the last)")
      ->check(CLI::Range(1, 20));
  app.add_flag("!--no-stall", s.stall, "skip the SIGSTOP of the coordinator at the largest fleet size");
  app.add_flag("!--no-pin", s.pin,
               "let the server under test share every CPU with the load (by default, with 2 CPUs or more, it has "
               "one to itself)");
  app.add_flag("!--no-timing-priority", s.timing_priority,
               "time round trips from a client at normal priority, which then waits for the CPU beside the fake "
               "agents (by default it runs at real-time priority where the bench may raise it)");
  app.add_option("--coordinator", s.coordinator, "the kiln-coordinator to run (default: beside this program)");
  app.add_flag("--keep", s.keep, "keep the temporary directory (configs, logs, stores)");
  app.add_option("--echo-server", echo_server,
                 "internal: run the echo server (AGENT_ENDPOINT CLIENT_ENDPOINT DURABLE_CLIENT_ENDPOINT KEY "
                 "DURABLE_FILE)")
      ->expected(5)
      ->group("");
  app.add_option("--fleet-slice", fleet_slice, "internal: run the agents of FILE, answering on standard input")
      ->group("");
  app.add_option("--agent-processes", s.agent_processes,
                 "internal: run the fake agents in this many processes (default: as many as the file limit needs)")
      ->check(CLI::Range(1, 64))
      ->group("");
  CLI11_PARSE(app, argc, argv);

  const fs::path self = fs::read_symlink("/proc/self/exe");
  if (!echo_server.empty()) {
    std::signal(SIGTERM, [](int) { g_stop = true; });
    auto keys = kiln::load_secret_key_file(echo_server[3]);
    if (!keys) {
      std::cerr << keys.error().message << "\n";
      return 1;
    }
    return run_echo_server(echo_server[0], echo_server[1], echo_server[2], echo_server[4], *keys, g_stop);
  }
  if (!fleet_slice.empty()) {
    auto options = read_slice(fleet_slice);
    if (!options) {
      std::cerr << options.error().message << "\n";
      return 1;
    }
    FakeFleet fleet(std::move(*options));
    serve_fleet_slice(fleet, 0);
    return 0;
  }
  if (quick) {
    if (app.count("--agents") == 0) s.agents = {20, 50};
    s.measure_seconds = 1;
    s.requests = 10;
    s.queued = 50;
    s.burst = 50;
    s.heartbeat_interval_ms = 250;
  }
  if (s.coordinator.empty()) s.coordinator = (self.parent_path() / "kiln-coordinator").string();
  if (!fs::exists(s.coordinator)) {
    std::cerr << fmt::format("no kiln-coordinator at {}; build it (scripts/build --target kiln-coordinator) or name "
                             "it with --coordinator\n",
                             s.coordinator);
    return 2;
  }
  std::sort(s.agents.begin(), s.agents.end());
  // Every agent is a socket and a connection here (two files) and a connection in the server:
  // raise the file limit as far as allowed (beyond the hard limit where the user may), for this
  // process, the agents' processes and the servers it starts.
  rlimit files{};
  ::getrlimit(RLIMIT_NOFILE, &files);
  rlimit wanted{std::max<rlim_t>(files.rlim_max, kFilesWanted), std::max<rlim_t>(files.rlim_max, kFilesWanted)};
  if (::setrlimit(RLIMIT_NOFILE, &wanted) != 0) {
    files.rlim_cur = files.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &files);
  }
  ::getrlimit(RLIMIT_NOFILE, &files);
  // A fleet larger than one process holds runs in several; the servers, one file per agent, are
  // what bounds the fleet.
  const std::size_t spare_files = 500;
  s.agents_per_process = files.rlim_cur > spare_files ? (files.rlim_cur - spare_files) / 2 : 0;
  const std::size_t server_room = files.rlim_cur > spare_files ? files.rlim_cur - spare_files : 0;
  std::vector<std::size_t> sizes;
  for (std::size_t n : s.agents) {
    if (n <= server_room && s.agents_per_process > 0) {
      sizes.push_back(n);
    } else {
      std::cerr << fmt::format("skipping {} agents: the file limit ({}) lets a server hold about {}\n", n,
                               files.rlim_cur, server_room);
    }
  }
  if (sizes.empty()) {
    std::cerr << "no fleet size fits the file limit; raise it (ulimit -n) or ask for fewer agents\n";
    return 2;
  }
  s.agents = sizes;
  const fs::path dir = fs::temp_directory_path() / fmt::format("kiln-bench-scale-{}", ::getpid());
  fs::create_directories(dir);
  Placement placement;
  if (const std::vector<int> cpus = allowed_cpus(); s.pin && cpus.size() >= 2) {
    placement.server = {cpus.front()};
    placement.load.assign(cpus.begin() + 1, cpus.end());
    // This process (the clients) and the agents' processes it starts run on the load's CPUs.
    if (!run_on(0, placement.load)) placement = {};
  }
  std::vector<std::pair<Run, Run>> rows;
  nlohmann::json medians = nlohmann::json::array();
  {
    Bench bench(s, dir);
    bench.self_ = self.string();
    bench.placement_ = placement;
    for (std::size_t n : s.agents) {
      std::vector<std::pair<Run, Run>> pairs;
      for (int r = 1; r <= s.repeats; ++r) {
        auto echo = bench.run(n, true, false);
        auto coordinator = echo ? bench.run(n, false, s.stall && n == s.agents.back() && r == s.repeats) : echo;
        if (!coordinator) {
          std::cerr << coordinator.error().message << "\nthe bench's files are kept in " << dir.string() << "\n";
          return 1;
        }
        pairs.emplace_back(*coordinator, *echo);
        rows.push_back(pairs.back());
      }
      if (s.repeats > 1) medians.push_back(medians_json(pairs));
    }
  }
  // Extrapolation to 10,000 agents from the per-heartbeat cost measured at the largest size this
  // machine ran whole: every agent registered with the echo and with the coordinator. Beyond it the
  // load generator, not the server, is what the figures show.
  nlohmann::json extrapolation;
  const Run* whole = nullptr;
  for (const auto& [c, e] : rows) {
    if (c.registered == c.agents && e.registered == e.agents) whole = &c;
  }
  const Run& largest = whole != nullptr ? *whole : rows.back().first;
  if (rows.back().first.agents < 10000 && std::isfinite(largest.cpu_per_heartbeat_ms)) {
    const double beats_per_second = 10000.0 * 1000.0 / s.heartbeat_interval_ms;
    const double percent = largest.cpu_per_heartbeat_ms * beats_per_second / 10;
    extrapolation = {{"agents", 10000},
                     {"from_agents", largest.agents},
                     {"cpu_percent", percent},
                     {"text", fmt::format("extrapolated, not measured: 10000 agents at {:.3f} ms per heartbeat (as "
                                          "measured at {}) would take {:.0f}% of a core",
                                          largest.cpu_per_heartbeat_ms, largest.agents, percent)}};
  }
  if (s.json) {
    nlohmann::json out = {{"heartbeat_interval_ms", s.heartbeat_interval_ms},
                          {"liveness_missed_beats", s.liveness_missed_beats},
                          {"server_cpus", placement.server},
                          {"load_cpus", placement.load},
                          {"rows", nlohmann::json::array()},
                          {"medians", medians},
                          {"extrapolation", extrapolation}};
    for (const auto& [c, e] : rows) out["rows"].push_back(row_json(c, e));
    std::cout << out.dump(2) << "\n";
  } else {
    print_text(rows, medians, extrapolation, placement);
  }
  if (!s.keep) fs::remove_all(dir);
  return 0;
}

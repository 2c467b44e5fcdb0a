#include <fcntl.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
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

#include <fmt/format.h>
#include <nlohmann/json.hpp>


#include "common/error.h"
#include "common/transport/loopback_ports.h"
#include "common/http/client.h"
#include "common/keys.h"
#include "tools/bench/bench_process.h"
#include "tools/bench/bench_scale_bench.h"
#include "tools/bench/bench_scale_measures.h"
#include "tools/bench/bench_scale_slices.h"
#include "tools/bench/fake_fleet.h"

namespace kiln::bench {

namespace fs = std::filesystem;
using kiln::KeyPair;
using kiln::TimeMs;

class Bench::Impl {
 public:
  Impl(Settings settings, fs::path dir) : s_(std::move(settings)), dir_(std::move(dir)) {
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

Bench::Bench(Settings settings, std::filesystem::path dir, std::string self, Placement placement)
    : impl_(std::make_unique<Impl>(std::move(settings), std::move(dir))) {
  impl_->self_ = std::move(self);
  impl_->placement_ = std::move(placement);
}

Bench::~Bench() = default;

kiln::Result<Run> Bench::run(std::size_t n, bool echo, bool stall) { return impl_->run(n, echo, stall); }

}  // namespace kiln::bench

// What kiln-bench-scale is asked to do (Settings), where it runs the server and its load
// (Placement), and what one server did under N agents (Run). See docs/performance.md, "Scale".
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace kiln::bench {

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

}  // namespace kiln::bench

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


#include "common/keys.h"
#include "common/version.h"
#include "tools/bench/bench_process.h"
#include "tools/bench/bench_scale_bench.h"
#include "tools/bench/bench_scale_report.h"
#include "tools/bench/bench_scale_run.h"
#include "tools/bench/bench_scale_slices.h"
#include "tools/bench/fake_fleet.h"

namespace fs = std::filesystem;
using namespace kiln::bench;

namespace {

std::atomic<bool> g_stop{false};

constexpr rlim_t kFilesWanted = 65536;

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
    Bench bench(s, dir, self.string(), placement);
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

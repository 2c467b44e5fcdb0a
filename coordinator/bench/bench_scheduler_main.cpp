// kiln-bench-scheduler: what one lease costs the scheduler core as the fleet grows. Per fleet
// size, a scheduler with N nodes of 8 chips (a share of them filled by whole-node leases), then
// one-chip leases requested and released one at a time; each request's submit, planning pass and
// release is timed. The same run with every shortcut off (SchedulerKnobs::exhaustive_passes: every
// pass reads every node) is the reference the ratio is taken against (docs/performance.md, "Scale").
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <variant>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "common/version.h"
#include "coordinator/scheduler/scheduler.h"

namespace {

using kiln::scheduler::LeaseGranted;
using kiln::scheduler::NodeInfo;
using kiln::scheduler::Request;
using kiln::scheduler::RequestClass;
using kiln::scheduler::RequestId;
using kiln::scheduler::Scheduler;
using kiln::scheduler::SchedulerKnobs;

struct Timing {
  double p50_us = 0;
  double p99_us = 0;
};

// `whole_nodes`: each lease asks for that many whole nodes; 0: for one chip.
Timing time_leases(int nodes, int busy_percent, int leases, int whole_nodes, bool exhaustive) {
  SchedulerKnobs knobs;
  knobs.max_nodes = static_cast<std::size_t>(nodes);
  knobs.max_pending_requests = static_cast<std::size_t>(nodes) + 100;
  knobs.exhaustive_passes = exhaustive;
  Scheduler scheduler(knobs);
  kiln::TimeMs now = 1000;
  for (int n = 0; n < nodes; ++n) {
    NodeInfo node{fmt::format("n{:05}", n), "a", {}};
    for (int c = 0; c < 8; ++c) node.chips.push_back({c, c / 4, c / 4});
    (void)scheduler.upsert_node(node, now);
  }
  RequestId next_id = 1;
  for (int n = 0; n < nodes * busy_percent / 100; ++n) {
    Request busy;
    busy.id = next_id++;
    busy.cls = RequestClass::presubmit;
    busy.chips = 8;
    busy.expected_duration_ms = 3'600'000;
    (void)scheduler.submit(busy, now);
  }
  while (scheduler.poll_action()) {
  }
  std::vector<double> us;
  for (int i = 0; i < leases; ++i) {
    ++now;
    Request lease;
    lease.id = next_id++;
    lease.chips = 1;
    lease.nodes = whole_nodes;
    lease.expected_duration_ms = 60'000;
    const auto start = std::chrono::steady_clock::now();
    (void)scheduler.submit(lease, now);
    kiln::scheduler::LeaseId granted = 0;
    while (auto action = scheduler.poll_action()) {
      if (const auto* g = std::get_if<LeaseGranted>(&*action)) granted = g->lease;
    }
    (void)scheduler.release(granted, now);
    while (scheduler.poll_action()) {
    }
    us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(us.begin(), us.end());
  return {us[us.size() / 2], us[std::min(us.size() - 1, us.size() * 99 / 100)]};
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> fleet_sizes{100, 1000, 5000, 10000};
  std::vector<int> busy_percents{0, 50};
  int leases = 1000;
  int whole_nodes = 0;
  CLI::App app{"what one lease (submit, planning pass, release) costs the scheduler core as the fleet grows, "
               "against passes that read every node (docs/performance.md, \"Scale\")"};
  app.set_version_flag("--version", kiln::version_text("kiln-bench-scheduler"));
  app.add_option("--nodes", fleet_sizes, "fleet sizes, comma-separated")->delimiter(',')->check(CLI::Range(1, 100000));
  app.add_option("--busy-percent", busy_percents, "shares of the nodes filled by whole-node leases, comma-separated")
      ->delimiter(',')
      ->check(CLI::Range(0, 99));
  app.add_option("--leases", leases, "leases timed per row")->check(CLI::Range(1, 1'000'000));
  app.add_option("--whole-nodes", whole_nodes, "each lease asks for this many whole nodes (default: one chip)")
      ->check(CLI::Range(0, 64));
  CLI11_PARSE(app, argc, argv);

  if (whole_nodes > 0) std::printf("each lease: %d whole nodes\n", whole_nodes);
  std::printf("%7s %6s %22s %22s %9s\n", "nodes", "busy", "lease p50/p99 us", "every node p50/p99", "p50 ratio");
  for (const int nodes : fleet_sizes) {
    for (const int busy : busy_percents) {
      const Timing fast = time_leases(nodes, busy, leases, whole_nodes, false);
      const Timing full = time_leases(nodes, busy, leases, whole_nodes, true);
      std::printf("%7d %5d%% %22s %22s %8.1fx\n", nodes, busy,
                  fmt::format("{:.1f}/{:.1f}", fast.p50_us, fast.p99_us).c_str(),
                  fmt::format("{:.1f}/{:.1f}", full.p50_us, full.p99_us).c_str(), full.p50_us / fast.p50_us);
    }
  }
  return 0;
}

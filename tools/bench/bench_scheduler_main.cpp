// kiln-bench-scheduler: what one lease costs the scheduler core as the fleet grows. Per fleet
// size, a scheduler with N nodes of 8 chips (a share of them filled by whole-node leases), then
// one-chip leases requested and released one at a time; each request's submit, planning pass and
// release is timed. In a fleet filled wholly the lease cannot start: its pass reserves the
// earliest chips to come free, and it is cancelled. The same run with every shortcut off
// (SchedulerKnobs::exhaustive_passes: every pass reads every node) is the reference the ratio is
// taken against (docs/performance.md, "Scale").
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>
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

// A fleet of `nodes` nodes of 8 chips, `busy_percent` of them held by whole-node leases, of which
// `experiment_percent` are experiments that checkpoint every 30 minutes (preemptible).
struct Fleet {
  explicit Fleet(SchedulerKnobs knobs) : scheduler(std::move(knobs)) {}
  Scheduler scheduler;
  kiln::TimeMs now = 1000;
  RequestId next_id = 1;
  std::vector<kiln::scheduler::LeaseId> busy;

  // A whole node's work, ending at one of `spread` seconds: a reservation has an earliest to find,
  // as among a day's leases.
  Request whole_node_job(int spread, RequestClass cls = RequestClass::presubmit) {
    Request job;
    job.id = next_id++;
    job.cls = cls;
    job.chips = 8;
    job.expected_duration_ms = 3'600'000 + static_cast<kiln::DurationMs>((job.id * 7919) % spread) * 1000;
    if (cls == RequestClass::experiment) job.checkpoint_interval_ms = 30 * kiln::kMinuteMs;
    return job;
  }

  // Every action so far; the leases granted are kept.
  void drain() {
    while (auto action = scheduler.poll_action()) {
      if (const auto* g = std::get_if<LeaseGranted>(&*action)) busy.push_back(g->lease);
    }
  }
};

Fleet make_fleet(int nodes, int busy_percent, int experiment_percent, bool exhaustive) {
  SchedulerKnobs knobs;
  knobs.max_nodes = static_cast<std::size_t>(nodes);
  knobs.max_pending_requests = 2 * static_cast<std::size_t>(nodes) + 100;
  knobs.exhaustive_passes = exhaustive;
  Fleet fleet(knobs);
  for (int n = 0; n < nodes; ++n) {
    NodeInfo node{fmt::format("n{:05}", n), "a", {}};
    for (int c = 0; c < 8; ++c) node.chips.push_back({c, c / 4, c / 4});
    (void)fleet.scheduler.upsert_node(node, fleet.now);
  }
  const int busy = nodes * busy_percent / 100;
  for (int n = 0; n < busy; ++n) {
    // Experiments spread evenly among the busy nodes.
    const bool experiment = (n + 1) * experiment_percent / 100 != n * experiment_percent / 100;
    (void)fleet.scheduler.submit(
        fleet.whole_node_job(nodes, experiment ? RequestClass::experiment : RequestClass::presubmit), fleet.now);
  }
  fleet.drain();
  return fleet;
}

// "p50/p99", and the reference's over this run's p50; "-" where the reference was not run.
std::string row(const Timing& fast, const std::optional<Timing>& full) {
  const std::string measured = fmt::format("{:.1f}/{:.1f}", fast.p50_us, fast.p99_us);
  if (!full) return fmt::format("{:>22} {:>22} {:>9}", measured, "-", "-");
  return fmt::format("{:>22} {:>22} {:8.1f}x", measured, fmt::format("{:.1f}/{:.1f}", full->p50_us, full->p99_us),
                     full->p50_us / fast.p50_us);
}

Timing percentiles(std::vector<double> us) {
  std::sort(us.begin(), us.end());
  return {us[us.size() / 2], us[std::min(us.size() - 1, us.size() * 99 / 100)]};
}

// `whole_nodes`: each lease asks for that many whole nodes; 0: for `chips` chips on one node.
// `booked`: that many one-chip release windows are booked a day ahead, which every pass reserves for.
Timing time_leases(int nodes, int busy_percent, int leases, int chips, int whole_nodes, int booked, bool exhaustive) {
  Fleet fleet = make_fleet(nodes, busy_percent, 0, exhaustive);
  for (int i = 0; i < booked; ++i) {
    Request window;
    window.id = fleet.next_id++;
    window.cls = RequestClass::release;
    window.chips = 1;
    window.expected_duration_ms = kiln::kHourMs;
    window.not_before_ms = fleet.now + 24 * kiln::kHourMs;
    (void)fleet.scheduler.submit(window, fleet.now);
  }
  fleet.drain();
  Scheduler& scheduler = fleet.scheduler;
  kiln::TimeMs& now = fleet.now;
  RequestId& next_id = fleet.next_id;
  std::vector<double> us;
  for (int i = 0; i < leases; ++i) {
    ++now;
    Request lease;
    lease.id = next_id++;
    lease.chips = chips;
    lease.nodes = whole_nodes;
    lease.expected_duration_ms = 60'000;
    const auto start = std::chrono::steady_clock::now();
    (void)scheduler.submit(lease, now);
    kiln::scheduler::LeaseId granted = 0;
    while (auto action = scheduler.poll_action()) {
      if (const auto* g = std::get_if<LeaseGranted>(&*action)) granted = g->lease;
    }
    if (granted != 0) {
      (void)scheduler.release(granted, now);
    } else {
      (void)scheduler.cancel(lease.id, now);
    }
    while (scheduler.poll_action()) {
    }
    us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count());
  }
  return percentiles(std::move(us));
}

// A fleet filled wholly (`experiment_percent` of it experiments) with `queued` whole-node jobs of
// class `cls` waiting, `waited_minutes` after they were submitted.
Fleet full_fleet_with_queue(int nodes, int queued, RequestClass cls, int experiment_percent, int waited_minutes,
                            bool exhaustive) {
  Fleet fleet = make_fleet(nodes, 100, experiment_percent, exhaustive);
  for (int i = 0; i < queued; ++i) {
    (void)fleet.scheduler.submit(fleet.whole_node_job(nodes, cls), fleet.now);
  }
  fleet.now += waited_minutes * kiln::kMinuteMs;
  fleet.scheduler.on_tick(fleet.now);
  fleet.drain();
  return fleet;
}

// A job's result in a full fleet with `queued` whole-node jobs of class `cls` waiting: its lease
// ends, the pass gives the node to the queue's head and reserves for the next ones
// (max_reservations), and another job is queued. Each of `ends` such steps is timed. A class with a
// start target (presubmit) also looks for experiments to preempt while it waits, and preempts
// them once it has waited `waited_minutes` past its target.
Timing time_lease_ends(int nodes, int queued, RequestClass cls, int experiment_percent, int waited_minutes, int ends,
                       bool exhaustive) {
  Fleet fleet = full_fleet_with_queue(nodes, queued, cls, experiment_percent, waited_minutes, exhaustive);
  std::vector<double> us;
  for (int i = 0; i < ends; ++i) {
    ++fleet.now;
    const auto ending = fleet.busy.begin() + static_cast<std::ptrdiff_t>((i * 7919) % fleet.busy.size());
    const kiln::scheduler::LeaseId lease = *ending;
    fleet.busy.erase(ending);
    const Request next = fleet.whole_node_job(nodes, cls);
    const auto start = std::chrono::steady_clock::now();
    (void)fleet.scheduler.release(lease, fleet.now);
    fleet.drain();
    (void)fleet.scheduler.submit(next, fleet.now);
    fleet.drain();
    us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count());
  }
  return percentiles(std::move(us));
}

struct ExplanationTimings {
  Timing one;   // why the newest job waits
  Timing page;  // the queue's first 201: a page of `kiln queue`, and whether more follow
  Timing all;   // every waiting job
};

// The first page of `kiln queue` (its default limit, 200, and one more).
constexpr std::size_t kQueuePage = 201;

// In the same fleet and queue: why the newest job waits (what a lease that must wait is answered,
// and `kiln queue --why`), timed `repeats` times, and a page of the queue's explanations and the
// whole queue's, timed a few times.
ExplanationTimings time_explanations(int nodes, int queued, RequestClass cls, int experiment_percent,
                                     int waited_minutes, int repeats, bool exhaustive) {
  Fleet fleet = full_fleet_with_queue(nodes, queued, cls, experiment_percent, waited_minutes, exhaustive);
  const RequestId newest = fleet.next_id - 1;
  const auto timed = [](int times, const auto& what) {
    std::vector<double> us;
    for (int i = 0; i < times; ++i) {
      const auto start = std::chrono::steady_clock::now();
      what();
      us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count());
    }
    return percentiles(std::move(us));
  };
  const Timing one = timed(repeats, [&] { (void)fleet.scheduler.explain(newest, fleet.now); });
  const Timing page = timed(5, [&] { (void)fleet.scheduler.explain_queue(fleet.now, kQueuePage); });
  const Timing all = timed(5, [&] { (void)fleet.scheduler.explain_queue(fleet.now); });
  return {one, page, all};
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> fleet_sizes{100, 1000, 5000, 10000};
  std::vector<int> busy_percents{0, 50};
  int leases = 1000;
  int chips = 1;
  int whole_nodes = 0;
  int queued = 0;
  int booked = 0;
  std::string queued_class = "nightly";
  int experiment_percent = 0;
  int waited_minutes = 0;
  bool with_reference = true;
  CLI::App app{"what one lease (submit, planning pass, release) costs the scheduler core as the fleet grows, "
               "against passes that read every node (docs/performance.md, \"Scale\")"};
  app.set_version_flag("--version", kiln::version_text("kiln-bench-scheduler"));
  app.add_option("--nodes", fleet_sizes, "fleet sizes, comma-separated")->delimiter(',')->check(CLI::Range(1, 100000));
  app.add_option("--busy-percent", busy_percents, "shares of the nodes filled by whole-node leases, comma-separated")
      ->delimiter(',')
      ->check(CLI::Range(0, 100));
  app.add_option("--leases", leases, "leases timed per row")->check(CLI::Range(1, 1'000'000));
  app.add_option("--chips", chips, "each lease asks for this many chips of one node (default 1; a node has 8, in two "
                 "NUMA nodes of 4)")
      ->check(CLI::Range(1, 8));
  app.add_option("--whole-nodes", whole_nodes, "each lease asks for this many whole nodes (default: one chip)")
      ->check(CLI::Range(0, 64));
  app.add_option("--booked", booked, "one-chip release windows booked a day ahead while the leases are timed "
                 "(default 0)")
      ->check(CLI::Range(0, 10'000));
  app.add_option("--queued", queued, "also time a job's result in a fleet filled wholly, with this many "
                 "whole-node jobs waiting, and the explanations of why one and why each waits (default 0: not "
                 "timed)")
      ->check(CLI::Range(0, 1'000'000));
  app.add_option("--queued-class", queued_class, "the class of the jobs waiting (--queued): nightly, or presubmit, "
                 "which looks for experiments to preempt")
      ->check(CLI::IsMember({"nightly", "presubmit", "bisect"}));
  app.add_option("--experiment-percent", experiment_percent, "with --queued: the share of the full fleet's leases "
                 "that are experiments, preemptible")
      ->check(CLI::Range(0, 100));
  app.add_option("--waited-minutes", waited_minutes, "with --queued: how long the jobs have waited when the timing "
                 "starts (a presubmit past 10 minutes is due to preempt)")
      ->check(CLI::Range(0, 50));
  app.add_flag("!--no-reference", with_reference, "skip the runs that read every node (to profile this build alone)");
  CLI11_PARSE(app, argc, argv);
  const RequestClass cls = *kiln::scheduler::parse_request_class(queued_class);

  if (whole_nodes > 0) {
    std::printf("each lease: %d whole nodes\n", whole_nodes);
  } else if (chips > 1) {
    std::printf("each lease: %d chips of one node\n", chips);
  }
  if (booked > 0) std::printf("%d release windows booked a day ahead\n", booked);
  std::printf("%7s %6s %22s %22s %9s\n", "nodes", "busy", "lease p50/p99 us", "every node p50/p99", "p50 ratio");
  for (const int nodes : fleet_sizes) {
    for (const int busy : busy_percents) {
      const Timing fast = time_leases(nodes, busy, leases, chips, whole_nodes, booked, false);
      const auto full = with_reference ? std::optional(time_leases(nodes, busy, leases, chips, whole_nodes, booked, true))
                                       : std::nullopt;
      std::printf("%7d %5d%% %s\n", nodes, busy, row(fast, full).c_str());
    }
  }
  if (queued > 0) {
    std::printf("\na job's result in a full fleet (%d%% experiments), %d whole-node %s jobs waiting for %d minutes: its "
                "lease ends, the node goes to the queue's head, the next %zu hold reservations\n",
                experiment_percent, queued, queued_class.c_str(), waited_minutes, SchedulerKnobs{}.max_reservations);
    std::printf("%7s %22s %22s %9s\n", "nodes", "result p50/p99 us", "every node p50/p99", "p50 ratio");
    for (const int nodes : fleet_sizes) {
      const Timing fast = time_lease_ends(nodes, queued, cls, experiment_percent, waited_minutes, leases, false);
      const auto full =
          with_reference
              ? std::optional(time_lease_ends(nodes, queued, cls, experiment_percent, waited_minutes, leases, true))
              : std::nullopt;
      std::printf("%7d %s\n", nodes, row(fast, full).c_str());
    }
    std::printf("\nin the same queue, why its newest job waits (what a lease that must wait is answered; `kiln queue "
                "--why`), %d times; the first %zu waiting jobs' explanations (a page of `kiln queue`), and every "
                "waiting job's, 5 times each\n",
                std::min(leases, 100), kQueuePage);
    std::printf("%7s %22s %22s %22s\n", "nodes", "one job p50/p99 us", "a page p50/p99 us", "the queue p50/p99 us");
    for (const int nodes : fleet_sizes) {
      const auto [one, page, all] =
          time_explanations(nodes, queued, cls, experiment_percent, waited_minutes, std::min(leases, 100), false);
      std::printf("%7d %22s %22s %22s\n", nodes, fmt::format("{:.1f}/{:.1f}", one.p50_us, one.p99_us).c_str(),
                  fmt::format("{:.1f}/{:.1f}", page.p50_us, page.p99_us).c_str(),
                  fmt::format("{:.1f}/{:.1f}", all.p50_us, all.p99_us).c_str());
    }
  }
  return 0;
}

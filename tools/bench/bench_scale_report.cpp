#include "tools/bench/bench_scale_report.h"

#include <cmath>
#include <iostream>
#include <string>

#include <fmt/format.h>

#include "tools/bench/bench_scale_measures.h"

namespace kiln::bench {

namespace {

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

}  // namespace

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

namespace {

std::string ms(double v) { return std::isfinite(v) ? fmt::format("{:.3f}", v) : "-"; }
std::string x(double v) { return std::isfinite(v) ? fmt::format("{:.1f}x", v) : "-"; }

}  // namespace

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

}  // namespace kiln::bench

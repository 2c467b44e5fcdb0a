// What a fleet simulation prints: its policies side by side as a table, a sweep over seeds, or
// JSON (fleet_sim.h).
#include <algorithm>
#include <cmath>
#include <map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "sim/fleet/fleet_sim.h"

namespace kiln::fleet {

namespace {

std::string opt_minutes(const std::optional<double>& v) {
  return v ? fmt::format("{:.1f}", *v) : std::string("never");
}

}  // namespace

std::string format_table(const Scenario& scenario, const std::vector<PolicyReport>& reports,
                         std::uint64_t seed) {
  std::string out = fmt::format("kiln fleet simulation, seed {} (rerun with --seed={})\n\n", seed, seed);
  auto row = [&](std::string_view label, auto value_of) {
    out += fmt::format("{:<52}", label);
    for (const PolicyReport& r : reports) out += fmt::format("{:>18}", value_of(r));
    out += "\n";
  };
  row("policy", [](const PolicyReport& r) { return r.policy; });
  row("unit tier: changes / CPU hours", [](const PolicyReport& r) {
    return fmt::format("{} / {:.0f}", r.unit_tier_changes, r.unit_cpu_hours);
  });
  row("unit tier: rejected before a chip / chip-h saved", [](const PolicyReport& r) {
    return fmt::format("{} / {:.1f}", r.unit_rejected_changes, r.unit_chip_hours_saved);
  });
  row("presubmit changes (hardware path)", [](const PolicyReport& r) { return fmt::format("{}", r.presubmit_changes); });
  row("presubmit signal p50 (min)", [](const PolicyReport& r) { return fmt::format("{:.1f}", r.presubmit_signal.p50_minutes); });
  row(fmt::format("presubmit signal p90 (min; goal 20, target {})", scenario.presubmit_target_p90_ms / kMinuteMs),
      [](const PolicyReport& r) { return fmt::format("{:.1f}", r.presubmit_signal.p90_minutes); });
  row("presubmit signal p99 (min)", [](const PolicyReport& r) { return fmt::format("{:.1f}", r.presubmit_signal.p99_minutes); });
  for (std::size_t i = 0; i < scenario.revisions.size(); ++i) {
    const std::string& name = scenario.revisions[i].name;
    row(fmt::format("nightly makespan rev {} (min, deadline {})", name,
                    sch::format_clock(scenario.nightly_deadline_ms)),
        [i](const PolicyReport& r) {
          const RevisionReport& rr = r.revisions[i];
          return fmt::format("{}{}", opt_minutes(rr.nightly_makespan_minutes),
                             rr.nightly_met_deadline ? "" : " LATE");
        });
  }
  row("nightly done by deadline (all revisions)", [](const PolicyReport& r) { return r.nightly_met_deadline ? "yes" : "NO"; });
  for (std::size_t i = 0; i < scenario.revisions.size(); ++i) {
    row(fmt::format("release start delay rev {} (min)", scenario.revisions[i].name),
        [i](const PolicyReport& r) { return opt_minutes(r.revisions[i].release_start_delay_minutes); });
  }
  row("bisection (min from nightly result)", [](const PolicyReport& r) {
    return fmt::format("{} (rev {})", opt_minutes(r.bisect_minutes), r.bisect_revision);
  });
  row("experiments submitted / started", [](const PolicyReport& r) {
    return fmt::format("{} / {}", r.experiments, r.experiments_started);
  });
  row("experiment wait p50 (min)", [](const PolicyReport& r) { return fmt::format("{:.1f}", r.experiment_wait.p50_minutes); });
  row("experiment wait p90 (min)", [](const PolicyReport& r) { return fmt::format("{:.1f}", r.experiment_wait.p90_minutes); });
  row("experiment chip-hours granted", [](const PolicyReport& r) { return fmt::format("{:.1f}", r.experiment_chip_hours_granted); });
  row("chip-hours lost to preemption", [](const PolicyReport& r) { return fmt::format("{:.1f}", r.experiment_chip_hours_lost_preemption); });
  row("  share of experiment chip-hours (goal < 2%)", [](const PolicyReport& r) { return fmt::format("{:.2f}%", 100 * r.experiment_lost_share); });
  row("preemption notices (let go at checkpoint)", [](const PolicyReport& r) {
    return fmt::format("{} ({})", r.preemption_notices, r.preemptions_released_at_checkpoint);
  });
  for (std::size_t i = 0; i < scenario.revisions.size(); ++i) {
    row(fmt::format("utilization rev {} (00:00-24:00)", scenario.revisions[i].name),
        [i](const PolicyReport& r) { return fmt::format("{:.1f}%", 100 * r.revisions[i].utilization); });
  }
  row("node failures in the day / chip-hours lost", [](const PolicyReport& r) {
    return fmt::format("{} / {:.1f}", r.node_failures, r.chip_hours_lost_failures);
  });
  row("leases expired", [](const PolicyReport& r) { return fmt::format("{}", r.leases_expired); });
  row("unfinished at end / simulated hours", [](const PolicyReport& r) {
    return fmt::format("{} / {:.1f}", r.unfinished_requests, r.simulated_hours);
  });
  return out;
}

std::string format_sweep(const std::vector<std::vector<PolicyReport>>& runs,
                         std::uint64_t first_seed) {
  if (runs.empty()) return "no runs\n";
  std::string out = fmt::format("kiln fleet simulation, {} seeds from {} (--seed={} --sweep={})\n\n",
                                runs.size(), first_seed, first_seed, runs.size());
  const std::size_t policies = runs.front().size();
  out += fmt::format("{:<44}", "policy");
  for (std::size_t p = 0; p < policies; ++p) out += fmt::format("{:>22}", runs.front()[p].policy);
  out += "\n";
  // One row: the median and the worst over the seeds ("median / worst").
  auto row = [&](std::string_view label, bool higher_is_worse, auto value_of) {
    out += fmt::format("{:<44}", label);
    for (std::size_t p = 0; p < policies; ++p) {
      std::vector<double> values;
      for (const auto& run : runs) values.push_back(value_of(run[p]));
      std::sort(values.begin(), values.end());
      double median = values[values.size() / 2];
      double worst = higher_is_worse ? values.back() : values.front();
      out += fmt::format("{:>22}", fmt::format("{:.1f} / {:.1f}", median, worst));
    }
    out += "\n";
  };
  row("presubmit p90 (min), median / worst", true,
      [](const PolicyReport& r) { return r.presubmit_signal.p90_minutes; });
  row("presubmit p99 (min), median / worst", true,
      [](const PolicyReport& r) { return r.presubmit_signal.p99_minutes; });
  row("nightly done by deadline (%), median / worst", false, [&](const PolicyReport& r) {
    return r.nightly_met_deadline ? 100.0 : 0.0;
  });
  row("nightly makespan, slowest rev (min)", true, [](const PolicyReport& r) {
    double worst = 0;
    for (const RevisionReport& rev : r.revisions) {
      worst = std::max(worst, rev.nightly_makespan_minutes.value_or(1e9));
    }
    return worst;
  });
  row("release start delay, worst rev (min)", true, [](const PolicyReport& r) {
    double worst = 0;
    for (const RevisionReport& rev : r.revisions) {
      worst = std::max(worst, rev.release_start_delay_minutes.value_or(1e9));
    }
    return worst;
  });
  row("experiment wait p50 (min)", true,
      [](const PolicyReport& r) { return r.experiment_wait.p50_minutes; });
  row("experiment wait p90 (min)", true,
      [](const PolicyReport& r) { return r.experiment_wait.p90_minutes; });
  row("experiment chip-hours granted", false,
      [](const PolicyReport& r) { return r.experiment_chip_hours_granted; });
  row("experiment chip-hours lost to preemption (%)", true,
      [](const PolicyReport& r) { return 100 * r.experiment_lost_share; });
  std::size_t misses = 0;
  for (const auto& run : runs) {
    const PolicyReport& k = run.front();
    if (k.presubmit_signal.p90_minutes > 20.0 || !k.nightly_met_deadline ||
        k.experiment_lost_share >= 0.02) {
      ++misses;
    }
  }
  out += fmt::format("\nseeds where {} misses a goal (p90 <= 20 min, nightly on time, < 2% lost): {}\n",
                     runs.front().front().policy, misses);
  return out;
}

std::string format_json(const std::vector<PolicyReport>& reports, std::uint64_t seed,
                        const std::string& scenario_path) {
  nlohmann::json out;
  out["seed"] = seed;
  out["scenario"] = scenario_path;
  auto latency = [](const LatencySummary& s) {
    return nlohmann::json{{"count", s.count}, {"p50_minutes", s.p50_minutes},
                          {"p90_minutes", s.p90_minutes}, {"p99_minutes", s.p99_minutes}};
  };
  auto optional = [](const std::optional<double>& v) {
    return v ? nlohmann::json(*v) : nlohmann::json(nullptr);
  };
  for (const PolicyReport& r : reports) {
    nlohmann::json p;
    p["presubmit_changes"] = r.presubmit_changes;
    p["unit_tier"] = {{"changes", r.unit_tier_changes},
                      {"rejected_changes", r.unit_rejected_changes},
                      {"cpu_hours", r.unit_cpu_hours},
                      {"chip_hours_saved", r.unit_chip_hours_saved}};
    p["presubmit_signal"] = latency(r.presubmit_signal);
    p["nightly_met_deadline"] = r.nightly_met_deadline;
    nlohmann::json revs = nlohmann::json::object();
    for (const RevisionReport& rr : r.revisions) {
      revs[rr.revision] = {{"nightly_makespan_minutes", optional(rr.nightly_makespan_minutes)},
                           {"nightly_met_deadline", rr.nightly_met_deadline},
                           {"release_start_delay_minutes", optional(rr.release_start_delay_minutes)},
                           {"utilization", rr.utilization}};
    }
    p["revisions"] = revs;
    p["bisect"] = {{"revision", r.bisect_revision}, {"minutes", optional(r.bisect_minutes)}};
    p["experiments"] = {{"submitted", r.experiments},
                        {"started", r.experiments_started},
                        {"wait", latency(r.experiment_wait)},
                        {"chip_hours_granted", r.experiment_chip_hours_granted},
                        {"chip_hours_lost_preemption", r.experiment_chip_hours_lost_preemption},
                        {"lost_share", r.experiment_lost_share},
                        {"preemption_notices", r.preemption_notices},
                        {"released_at_checkpoint", r.preemptions_released_at_checkpoint}};
    p["node_failures"] = r.node_failures;
    p["chip_hours_lost_failures"] = r.chip_hours_lost_failures;
    p["leases_expired"] = r.leases_expired;
    p["unfinished_requests"] = r.unfinished_requests;
    p["simulated_hours"] = r.simulated_hours;
    out["policies"][r.policy] = p;
  }
  return out.dump(2);
}

}  // namespace kiln::fleet

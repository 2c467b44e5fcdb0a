// The fleet simulator: replays a scenario's working day through the real scheduler core in
// simulated time. One seed drives the workload (changes, experiments, node failures, the
// bisected revision); the same workload is replayed under each policy so they compare fairly.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/time.h"
#include "coordinator/scheduler/knobs.h"
#include "sim/fleet/scenario.h"

namespace kiln::fleet {

struct FleetOptions {
  std::uint64_t seed = 1;
  DurationMs day_ms = 24 * kHourMs;          // arrivals happen in [0, day_ms)
  DurationMs drain_limit_ms = 3 * 24 * kHourMs;  // the run stops here even with work pending
  bool check_invariants = true;              // after every step
};

struct LatencySummary {
  std::size_t count = 0;
  double p50_minutes = 0;
  double p90_minutes = 0;
  double p99_minutes = 0;
};

struct RevisionReport {
  std::string revision;
  std::optional<double> nightly_makespan_minutes;  // nullopt: not finished within the run
  bool nightly_met_deadline = false;
  std::optional<double> release_start_delay_minutes;
  double utilization = 0;  // leased chip-time / (chips x day)
};

struct PolicyReport {
  std::string policy;
  LatencySummary presubmit_signal;  // from the change's arrival: its unit tier, then its smoke
  std::size_t presubmit_changes = 0;  // hardware-path changes that reached the smoke
  std::size_t unit_tier_changes = 0;  // every change of the day
  std::size_t unit_rejected_changes = 0;  // hardware-path changes the unit tier stopped
  double unit_cpu_hours = 0;              // the unit tier's CPU time, on every backend
  double unit_chip_hours_saved = 0;       // the smoke chip time the rejected changes did not take
  std::vector<RevisionReport> revisions;
  bool nightly_met_deadline = false;  // on every revision
  std::optional<double> bisect_minutes;  // from its first step's submission to its last result
  std::string bisect_revision;
  std::size_t experiments = 0;
  std::size_t experiments_started = 0;
  LatencySummary experiment_wait;
  double experiment_chip_hours_granted = 0;
  double experiment_chip_hours_lost_preemption = 0;
  double experiment_lost_share = 0;  // lost to preemption / granted
  std::size_t preemption_notices = 0;
  std::size_t preemptions_released_at_checkpoint = 0;
  double chip_hours_lost_failures = 0;
  std::size_t node_failures = 0;
  std::size_t leases_expired = 0;
  std::size_t unfinished_requests = 0;  // still pending or running at the drain limit
  double simulated_hours = 0;
};

// Runs the scenario once under `knobs` (its policy included).
Result<PolicyReport> run_fleet(const Scenario& scenario, const scheduler::SchedulerKnobs& knobs,
                               const FleetOptions& options);

// The scenario's grace period replaces the knobs' (the scenario describes the workloads).
scheduler::SchedulerKnobs knobs_for(const Scenario& scenario, scheduler::SchedulerKnobs knobs);

std::string format_table(const Scenario& scenario, const std::vector<PolicyReport>& reports,
                         std::uint64_t seed);
// Worst and median figures over runs of consecutive seeds (each run: one report per policy).
std::string format_sweep(const std::vector<std::vector<PolicyReport>>& runs,
                         std::uint64_t first_seed);
std::string format_json(const std::vector<PolicyReport>& reports, std::uint64_t seed,
                        const std::string& scenario_path);

}  // namespace kiln::fleet

// A working day of model CI on the accelerator pool, as a scenario file describes it
// (shared/scenarios/ci-day.toml). Parsed once into plain data; toml++ stays in scenario.cpp.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "common/time.h"

namespace kiln::fleet {

struct RevisionSpec {
  std::string name;
  int nodes = 0;
  int chips_per_node = 0;
};

struct JobTier {
  std::string name;  // "small"
  int count = 0;
  int chips = 0;     // more than a node's chips: that many whole nodes' worth
  DurationMs duration_ms = 0;
};

struct ChipShare {
  int chips = 0;
  double share = 0;
};

struct Scenario {
  std::vector<RevisionSpec> revisions;
  double node_mtbf_hours = 0;
  DurationMs node_repair_ms = 0;

  int changes_per_day = 0;
  int hardware_path_changes = 0;
  double workday_share = 0;
  TimeMs workday_start_ms = 8 * kHourMs;  // the scenario's comment: 08:00 to 20:00
  TimeMs workday_end_ms = 20 * kHourMs;

  // The unit tier (optional [unit] table): every change's kernel and compiler tests on CPUs and
  // simulators, before a hardware-path change's smoke. CPU time, not chips: it delays the smoke
  // by its duration, and the share it rejects never reaches a chip.
  DurationMs unit_duration_ms = 2 * kMinuteMs;
  double unit_reject_share = 0.05;
  int unit_backends = 2;  // each test runs on the simulated chip and the CPU reference

  int presubmit_models = 0;
  int presubmit_chips_per_model = 0;
  DurationMs presubmit_duration_ms = 0;
  DurationMs presubmit_target_p90_ms = 0;

  TimeMs nightly_start_ms = 0;
  TimeMs nightly_deadline_ms = 0;
  std::vector<JobTier> nightly_tiers;

  TimeMs release_start_ms = 0;
  int release_nodes_per_revision = 0;
  DurationMs release_duration_ms = 0;

  TimeMs experiment_window_start_ms = 0;
  TimeMs experiment_window_end_ms = 0;
  double experiment_arrivals_per_hour = 0;
  std::vector<ChipShare> experiment_sizes;
  double experiment_median_minutes = 0;
  double experiment_sigma = 0;
  DurationMs experiment_checkpoint_ms = 0;
  DurationMs experiment_grace_ms = 0;

  int bisect_candidate_changes = 0;
  int bisect_chips_per_step = 0;
  DurationMs bisect_step_ms = 0;
};

Result<Scenario> parse_scenario_toml(std::string_view text, std::string_view source_name);
Result<Scenario> load_scenario(const std::string& path);

// "HH:MM" -> milliseconds after midnight.
Result<TimeMs> parse_clock(std::string_view text);

}  // namespace kiln::fleet

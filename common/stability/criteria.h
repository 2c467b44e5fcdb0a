// What a stability run watches for and how it is timed: stability.toml (docs/stability.md).
// The criteria travel to each rank of the run as JSON (criteria_to_json), so the workload and the
// report judge by the same numbers the person configured.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

#include "common/error.h"

namespace kiln::stability {

struct StabilityCriteria {
  // [run]
  // Simulated seconds per wall-clock second: 1 on silicon; the simulated chip runs faster than
  // real time, so 3600 runs a simulated hour in a wall second.
  double time_scale = 1.0;
  double confidence = 0.95;  // of the failure-rate intervals
  // [loss_spike]: the loss, averaged over the last smoothing_steps steps (as training logs it),
  // above (1 + band_relative) x the median of that average over the window_steps before.
  double loss_spike_band_relative = 3.0;
  std::uint32_t loss_spike_window_steps = 50;
  std::uint32_t loss_spike_smoothing_steps = 5;
  // [hang]: no new step for this many (simulated) minutes.
  double hang_minutes = 30.0;
  // [throughput_decay]: the median throughput of the latest window below the first window's by
  // more than max_drop (a fraction).
  double decay_window_minutes = 10.0;
  double decay_max_drop = 0.10;
  // [device_errors]: more uncorrected ECC errors than this on a chip during the run; a chip's
  // link going down (the collectives fail).
  std::uint64_t ecc_uncorrected_max = 0;
  bool link_down_fails = true;
};

// Every value in range; the error names the key and the range.
Status validate(const StabilityCriteria& criteria);

// stability.toml's text; `source` names it in errors ("file:line:column: ..."). Keys left out
// keep their defaults; unknown keys are errors with the nearest known one.
Result<StabilityCriteria> parse_criteria_toml(std::string_view text, std::string_view source);
Result<StabilityCriteria> read_criteria_file(const std::string& path);

nlohmann::json criteria_to_json(const StabilityCriteria& criteria);
// Checked like the TOML: the workload refuses criteria it was not meant to get.
Result<StabilityCriteria> criteria_from_json(const nlohmann::json& json);

}  // namespace kiln::stability

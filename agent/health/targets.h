// Per-revision health targets: the figures a healthy chip reaches and the limits it stays
// under. Defaults are the nominal figures of docs/driver-abi.md; a TOML file may override them
// (docs/health.md, "Targets file").
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include "common/error.h"

namespace kiln::agent::health {

struct RevisionTargets {
  // What a healthy chip of this revision measures in its self-tests.
  double memory_bandwidth_gb_per_s = 0;
  double interconnect_bandwidth_gb_per_s = 0;
  double compute_tflop_per_s = 0;
  // Temperature at or above which the thermal check warns, and fails.
  double warn_temperature_c = 0;
  double fail_temperature_c = 0;
  // Power draw above which the power check warns.
  double max_power_w = 0;
  // Corrected ECC errors since the last reset at or above which the ecc check warns.
  std::uint64_t warn_ecc_corrected = 0;
  // Uncorrected ECC errors at or above which it fails (1: any).
  std::uint64_t fail_ecc_uncorrected = 1;
};

struct HealthTargets {
  // Chips the driver must report; 0 turns the chip_count check into a skip.
  std::uint32_t expected_chip_count = 8;
  // A self-test figure below warn_below_fraction of its target warns, below
  // fail_below_fraction fails.
  double warn_below_fraction = 0.95;
  double fail_below_fraction = 0.85;
  std::map<std::string, RevisionTargets> revisions;  // "a", "b"

  // nullptr when the revision has no targets.
  const RevisionTargets* find(std::string_view revision) const;
};

// Revisions a and b with the sim's nominal figures (docs/driver-abi.md).
HealthTargets default_health_targets();

// Starts from the defaults and applies the file: top-level keys, and [revision.X] tables that
// override single figures of a known revision or give every figure of a new one. Unknown keys,
// wrong types and inconsistent limits are refused, each problem on its own line.
Result<HealthTargets> parse_health_targets(std::string_view toml_text, std::string_view origin);
Result<HealthTargets> load_health_targets(const std::string& path);

}  // namespace kiln::agent::health

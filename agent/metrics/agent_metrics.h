// What the agent's /metrics says (docs/metrics.md): per chip, as dcgm-exporter does per GPU,
// every series labelled node, chip, serial and hw_revision; then the node's install state and its
// session with the coordinator. Pure: the shell gathers what it knows (the latest telemetry
// readings, the last probe's checks) and renders it here.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/protocol/messages.h"
#include "common/time.h"

namespace kiln::agent {

// One reading of a chip through the driver.
struct ChipSample {
  TimeMs at_wall_ms = 0;
  double temperature_c = 0;
  double power_w = 0;
  double clock_mhz = 0;
  std::uint64_t ecc_corrected = 0;    // since the chip's last reset
  std::uint64_t ecc_uncorrected = 0;
  bool throttled = false;             // telemetry's flag: clocks reduced, for whatever reason
  // From the driver's chip_activity; absent when the driver does not implement it.
  std::optional<double> utilization;
  std::optional<bool> thermal_throttle;
  std::optional<bool> power_throttle;
};

// The install state of the node: none (no install since the agent started), installing, the
// outcome of the last install (docs/health.md, "Installs"), or failed when it gave no report.
inline constexpr std::string_view kInstallStates[] = {"none",          "installing", "installed",
                                                      "already_installed", "refused", "not_installed",
                                                      "rolled_back",   "quarantined", "failed"};

struct AgentMetricsInput {
  std::string node_id;
  std::string hardware_revision;
  std::vector<protocol::ChipInfo> chips;     // index and serial of every chip
  std::map<std::uint32_t, ChipSample> samples;  // the latest reading of each chip read
  TimeMs now_wall_ms = 0;
  // A reading older than this is not shown: the chip stopped answering (a hang), and a gauge
  // frozen at its last value would hide it.
  DurationMs max_sample_age_ms = 0;
  // The last health probe's per-chip checks, and when that probe began (0: none yet).
  std::vector<protocol::HealthCheck> probe_checks;
  TimeMs probe_at_wall_ms = 0;
  std::string install_state = "none";  // one of kInstallStates
  bool coordinator_connected = false;  // registered with the coordinator
};

std::string render_agent_metrics(const AgentMetricsInput& input);

// The install state an ended kiln.install job leaves: its report's outcome, or failed.
std::string install_state_after(std::string_view result_document);

}  // namespace kiln::agent

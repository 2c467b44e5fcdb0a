// Probes and leveled diagnostics over every chip of the node. Each check runs in its own
// process (`kiln-agent-check`) under a hard deadline through ProcessRunner, so a wedged chip
// turns into a check_timed_out result instead of hanging the caller. The calls block until
// every check ended: the agent runs them from a child process.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "agent/health/check_reading.h"
#include "agent/health/targets.h"
#include "agent/host/agent_config.h"
#include "common/health/diag_report.h"
#include "common/error.h"
#include "common/time.h"

namespace kiln::agent::health {

inline constexpr int kMinDiagLevel = 1;
inline constexpr int kMaxDiagLevel = 3;

// Where diagnostics are, for a person waiting on them: the checks of the current stage (the
// driver's, then the chips') done and planned, and those running now.
struct DiagProgress {
  std::size_t checks_done = 0;
  std::size_t checks_planned = 0;
  std::vector<std::string> running;  // "memory self-test on chip 3"
  DurationMs longest_deadline_ms = 0;  // of the running ones: how long the slowest may still take
};

struct DiagOptions {
  HealthTargets targets = default_health_targets();
  // The helper executable; empty means kiln-agent-check beside the running executable.
  std::string check_program;
  // Where the helpers' output files go (removed after reading); empty means
  // <work_dir>/health, or a folder under the system's temp dir when work_dir is empty.
  std::string work_dir;
  // Deadline of the driver, chip_firmware and telemetry checks.
  DurationMs quick_check_timeout_ms = 30 * kSecondMs;
  // Deadline of a self-test at levels 1, 2, 3 (about 5 s, 1 min and 15 min on hardware).
  std::array<DurationMs, 3> self_test_timeout_ms = {30 * kSecondMs, 3 * kMinuteMs,
                                                    30 * kMinuteMs};
  DurationMs kill_grace_ms = 2 * kSecondMs;
  // Checks running at once; never two on the same chip.
  std::size_t max_parallel_checks = 8;
  // Chips the agent reported unhealthy because they did not answer at start-up: the probes
  // leave them alone (each probe would only wait out its deadline on them again).
  std::set<std::uint32_t> unprobed_chips;
  // Told whenever a check starts or ends; unset: nobody is waiting to be told.
  std::function<void(const DiagProgress&)> progress;
};

// Targets from `health-targets.toml` beside agent.toml when that file exists (else the
// defaults), quick deadlines from knobs.probe_timeout_ms, helper output under work_dir.
Result<DiagOptions> default_diag_options(const AgentConfig& config);

// One planned helper run.
struct PlannedCheck {
  CheckKind kind = CheckKind::driver;
  std::optional<std::uint32_t> chip;
  std::uint32_t self_test_level = 1;
  DurationMs timeout_ms = 0;
};

// The per-chip checks of a level, in the order they run on each chip: chip_firmware and
// telemetry at every level; memory and interconnect self-tests (level 2) from level 2;
// the compute stress (level 3) at level 3. level 0 plans the probes only (telemetry).
std::vector<PlannedCheck> plan_chip_checks(int level, std::uint32_t chip_count,
                                           const DiagOptions& options);

// Level 1: driver, chip_count, workloads, per chip chip_firmware and the telemetry probes,
// then firmware and revision consistency. Level 2 adds memory and interconnect self-tests,
// level 3 the compute stress. Errors only when diagnostics cannot run at all (bad level,
// helper missing, process runner failure); everything found on the node is a result.
Result<DiagReport> run_diagnostics(const AgentConfig& config, int level,
                                   const DiagOptions& options);

// What the node says about itself at start-up: the driver's version and chip count, then each
// chip's identity and firmware, every read in its own helper process under
// quick_check_timeout_ms, so a wedged chip costs one deadline instead of the caller.
struct NodeIdentityReading {
  DriverInfo driver;
  // One per chip index below the chip count: its chip_firmware reading, or why it gave none
  // (timeout: it did not answer; device: the driver refused or the helper crashed).
  std::vector<Result<CheckReading>> chips;
};

// Errors when the driver itself cannot be read (missing, wrong ABI, hung).
Result<NodeIdentityReading> read_node_identity(const AgentConfig& config,
                                               const DiagOptions& options);

// The cheap periodic probe: driver load plus ecc, thermal, link and power on every chip but
// the unprobed_chips (a skip result each).
Result<std::vector<CheckResult>> run_probes(const AgentConfig& config,
                                            const DiagOptions& options);

// `kiln-agent diag --level N [--json]`. Exit code: 0 pass or warn (warnings printed),
// 1 fail, 2 diagnostics could not run (message on err) or every check was skipped.
// `progress` is told where they are while they run.
int run_diag_command(const AgentConfig& config, int level, bool json, std::ostream& out,
                     std::ostream& err, const std::function<void(const DiagProgress&)>& progress = {});

}  // namespace kiln::agent::health

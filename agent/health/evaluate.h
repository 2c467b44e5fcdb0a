// Pure evaluation: turns driver readings into CheckResults against the targets. No I/O, no
// clocks; every figure and limit comes in as an argument.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "agent/health/check_reading.h"
#include "common/health/check_result.h"
#include "agent/health/targets.h"
#include "common/time.h"
#include "drivers/cpu/host_readings.h"
#include "drivers/loader.h"

namespace kiln::agent::health {

// Actions shared by several checks; docs/health.md lists them all.
inline constexpr const char* kActionWedgedChip =
    "reset the chip; if it stays wedged, drain the node for the lab";
inline constexpr const char* kActionUncorrectedEcc = "drain and run level 3 diagnostics";

// driver: loaded (ABI checked by the loader) or not, and why.
CheckResult evaluate_driver(const CheckReading& reading);

// chip_count: what the driver reports against what the node should have (0: not checked).
CheckResult evaluate_chip_count(std::uint32_t found, std::uint32_t expected);

// chip_firmware: the chip answers and its active slot holds a valid image.
CheckResult evaluate_chip_firmware(std::uint32_t chip, const drivers::ChipIdentity& identity,
                                   const drivers::FirmwareSlots& slots);

// firmware_consistency: every chip that answered runs the same firmware version.
// revision_consistency: every chip reports the same hardware revision.
// Both read the attributes of passed chip_firmware results.
// A node whose every chip was reported unhealthy at start-up can take no work: a fail (so the
// coordinator quarantines it instead of showing it up with chips it cannot use); nullopt while
// one chip of `chip_count` is healthy.
std::optional<CheckResult> evaluate_no_healthy_chip(std::uint32_t chip_count,
                                                    const std::set<std::uint32_t>& unhealthy_chips);

// The host of a CPU node (drivers/cpu/host_readings.h): cores_online (warns when fewer are online
// than present) and memory_available (warns below 10% of the memory, fails below 2%). A reading
// the host lacks is a skip, not a failure.
std::vector<CheckResult> evaluate_host(const drivers::cpu::HostReadings& host);

// chip_firmware of a chip whose backend declares no firmware slots (the CPU's): a pass.
CheckResult evaluate_firmware_less_chip(std::uint32_t chip, const drivers::ChipIdentity& identity);
CheckResult evaluate_firmware_consistency(const std::vector<CheckResult>& results);
CheckResult evaluate_revision_consistency(const std::vector<CheckResult>& results);

// ecc, thermal, link and power from one telemetry reading. With no targets (unknown
// revision), the checks that need a limit are skipped; link still runs. A figure the driver
// does not declare it reads (`declared`) is skipped as unknown.
std::vector<CheckResult> evaluate_telemetry(std::uint32_t chip,
                                            const drivers::ChipTelemetry& telemetry,
                                            const RevisionTargets* targets,
                                            const drivers::DriverCapabilities& declared = {});

// memory, interconnect or compute: functional errors fail; the measured figure is compared
// with the revision's target (below warn_below_fraction warns, below fail_below_fraction
// fails). With no targets only the functional result counts.
CheckResult evaluate_self_test(std::uint32_t chip, const drivers::SelfTestResult& result,
                               const RevisionTargets* targets, const HealthTargets& limits);

struct WorkloadProgram {
  std::string name;
  std::string path;
  bool exists = false;      // a regular file
  bool executable = false;  // by the agent's user
};
// workloads: at least one is configured and every configured program can be run.
CheckResult evaluate_workloads(const std::vector<WorkloadProgram>& workloads);

// The results of one helper reading: errors become fail (or skip for a busy chip), and the
// reading is judged against the targets of revision_override or the chip's own revision.
std::vector<CheckResult> evaluate_reading(const CheckReading& reading,
                                          const HealthTargets& targets,
                                          const std::optional<std::string>& revision_override);

// A check whose process overran its deadline: fail, reason check_timed_out.
CheckResult timed_out_result(CheckKind kind, std::optional<std::uint32_t> chip,
                             DurationMs deadline_ms);
// A check whose process ended without a reading (crashed, killed, garbled output).
CheckResult crashed_result(CheckKind kind, std::optional<std::uint32_t> chip,
                           const std::string& detail);
// A check not run, and why.
CheckResult skipped_result(CheckKind kind, std::optional<std::uint32_t> chip,
                           std::string reason_code, std::string message);

}  // namespace kiln::agent::health

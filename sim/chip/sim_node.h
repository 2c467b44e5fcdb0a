// A simulated node of chips: the shell around the pure model that reads the clock, checks
// whether bound processes live, and keeps state in the state directory. The sim driver
// library (libkiln_sim_driver.so), the kiln-sim-chip tool and simulated workloads all use it,
// so every process on the host sees the same chips.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "common/time.h"
#include "sim/chip/model.h"
#include "sim/chip/sim_files.h"

namespace kiln::sim {

// What the shell takes from the world; tests replace it to control time and processes.
struct SimEnvironment {
  std::function<TimeMs()> now_ms;                 // wall clock, milliseconds since the epoch
  std::function<bool(std::int64_t)> pid_alive;    // zombies count as dead
  std::function<void(std::uint32_t)> hang_forever;  // what a call touching a hung chip does
};

SimEnvironment system_environment();

class SimNode {
 public:
  // Parses the options (see parse_sim_options), creates the state directory on first use,
  // refuses a state directory that holds a different node, and applies the fault file when
  // it changed since it was last applied.
  static Result<SimNode> open(std::string_view options, SimEnvironment env = system_environment());
  // Uses an existing node's state directory with default knobs: for kiln-sim-chip and for
  // simulated workloads that know only the folder.
  static Result<SimNode> attach(const std::filesystem::path& state_dir,
                                SimEnvironment env = system_environment());

  const SimOptions& options() const { return options_; }
  std::uint32_t chip_count() const { return options_.identity.chip_count; }
  Revision revision() const { return options_.identity.revision; }

  // The driver operations. Each one touching a chip with the hang fault never returns.
  Result<ChipIdentity> identity(std::uint32_t chip);
  Result<Telemetry> telemetry(std::uint32_t chip);
  Status reset(std::uint32_t chip);
  Result<ChipState> firmware(std::uint32_t chip);
  Status flash_standby(std::uint32_t chip, const std::filesystem::path& image,
                       const std::string& version);
  Status activate_standby(std::uint32_t chip);
  Status rollback_firmware(std::uint32_t chip);
  Status bind(std::int64_t pid, const std::vector<std::uint32_t>& chips);
  Status unbind(std::int64_t pid);
  Result<std::int64_t> binding(std::uint32_t chip);  // 0 when none
  Result<std::string> driver_version() const;
  // What a driver installer does on the sim: the driver reports this version from now on.
  Status set_driver_version(const std::string& version);
  Result<SelfTest> self_test(std::uint32_t chip, SelfTestKind kind, std::uint32_t level);

  // Run-time faults and the workload query API. These never block, even on a hung chip.
  Status inject_fault(std::uint32_t chip, FaultKind kind, double factor = 0.0,
                      FlashFailMode mode = FlashFailMode::flash);
  // Clears one chip's faults, or every chip's when chip is nullopt. Faults from the fault
  // file stay cleared until the file's content changes.
  Status clear_faults(std::optional<std::uint32_t> chip);
  Result<ChipConditions> conditions(std::uint32_t chip) const;
  Result<NodeState> snapshot() const;

 private:
  SimNode(SimOptions options, SimEnvironment env)
      : options_(std::move(options)), env_(std::move(env)) {}

  Status check_chip(std::uint32_t chip) const;
  // Reads the state, blocks forever if the chip hangs, and records a load change when a bound
  // process started or stopped living since the last look.
  Result<NodeState> touch(std::uint32_t chip);
  // Locked read-modify-write of the state; `change` may fail, then nothing is written.
  Status modify(const std::function<Status(NodeState&)>& change);
  // Brings each chip's load flag in line with whether its bound process lives.
  bool refresh_load(NodeState& node, TimeMs now) const;

  SimOptions options_;
  SimEnvironment env_;
};

}  // namespace kiln::sim

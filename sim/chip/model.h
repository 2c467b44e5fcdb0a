// The simulated chip's pure model: per-revision figures, node and chip state (firmware slots,
// bindings, faults, thermal history), and the functions that turn state plus `now` into
// telemetry, self-test figures and state transitions. No files, clocks or randomness here:
// time comes in as an argument and noise is a hash of the node seed, so one seed and one
// sequence of calls reproduce every figure.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/enum_names.h"
#include "common/error.h"
#include "common/time.h"

namespace kiln::sim {

enum class Revision { a, b };
std::string_view to_string(Revision revision);
Result<Revision> parse_revision(std::string_view text);

// Nominal figures of one hardware revision; real chips scatter around them.
struct RevisionProfile {
  double idle_temperature_c;
  double loaded_temperature_c;
  double idle_power_w;
  double loaded_power_w;
  double clock_mhz;
  std::uint64_t memory_bytes;
  double memory_bandwidth_gb_per_s;
  double interconnect_bandwidth_gb_per_s;
  double compute_tflop_per_s;
};
const RevisionProfile& profile(Revision revision);

// Temperature above which a chip reports itself hot; the thermal_throttle fault holds a chip
// just above it.
inline constexpr double kThrottleTemperatureC = 90.0;
// Clock fraction a throttled chip keeps.
inline constexpr double kThrottledClockFraction = 0.6;
// Memory the firmware keeps for itself on an idle chip.
inline constexpr std::uint64_t kIdleMemoryUsedBytes = 512ull << 20;
// Fraction of memory a bound workload occupies.
inline constexpr double kLoadedMemoryFraction = 0.75;

// nan_loss, loss_spike and throughput_decay are what a training run on the chip sees (a stability
// run's failure kinds, docs/stability.md); the chip itself reports nothing for them.
enum class FaultKind {
  ecc_storm, thermal_throttle, hang, link_down, slow, sdc, flash_fail, nan_loss, loss_spike, throughput_decay
};
constexpr EnumTable<FaultKind, 10> enum_names(FaultKind) {
  return {{
      {FaultKind::ecc_storm, "ecc_storm"},
      {FaultKind::thermal_throttle, "thermal_throttle"},
      {FaultKind::hang, "hang"},
      {FaultKind::link_down, "link_down"},
      {FaultKind::slow, "slow"},
      {FaultKind::sdc, "sdc"},
      {FaultKind::flash_fail, "flash_fail"},
      {FaultKind::nan_loss, "nan_loss"},
      {FaultKind::loss_spike, "loss_spike"},
      {FaultKind::throughput_decay, "throughput_decay"},
  }};
}
inline std::string_view to_string(FaultKind value) { return enum_name(value); }
Result<FaultKind> parse_fault_kind(std::string_view text);

// flash: writing the standby slot fails and leaves it invalid.
// activate: the flash succeeds but the image is bad: once active, the chip's links stay down
// and every self-test fails, so a post-install health check must roll back.
enum class FlashFailMode { flash, activate };
std::string_view to_string(FlashFailMode mode);
Result<FlashFailMode> parse_flash_fail_mode(std::string_view text);

struct Fault {
  FaultKind kind = FaultKind::ecc_storm;
  // slow: the chip's speed relative to a healthy peer, in (0, 1]; default 0.5.
  // sdc: the fraction of outputs a workload corrupts, in (0, 1]; default 0.01.
  // loss_spike: how many times the true loss a spike starts at, in (1, 1000]; default 10.
  // throughput_decay: the fraction of throughput lost per hour of a run's clock, in (0, 1];
  // default 0.5.
  // Ignored by the other kinds.
  double factor = 1.0;
  FlashFailMode flash_mode = FlashFailMode::flash;
  TimeMs since_ms = 0;
  bool from_fault_file = false;
};

// Fills in the kind's default factor when factor is 0 and checks the range.
Result<Fault> make_fault(FaultKind kind, double factor, FlashFailMode mode, TimeMs since_ms,
                         bool from_fault_file);

enum class Slot { a, b };
std::string_view to_string(Slot slot);
inline Slot other(Slot slot) { return slot == Slot::a ? Slot::b : Slot::a; }

struct FirmwareSlotState {
  std::string version;
  bool valid = true;   // holds a complete image
  bool faulty = false; // the image was written under flash_fail(activate): fails once active
};

// Load follows a first-order thermal response: the load fraction moves exponentially toward
// 1 while a live workload is bound and toward 0 otherwise.
struct LoadHistory {
  bool loaded = false;
  TimeMs changed_at_ms = 0;
  double fraction_at_change = 0.0;
};

struct ChipState {
  std::uint32_t index = 0;
  Slot active = Slot::a;
  std::optional<Slot> previous;
  std::array<FirmwareSlotState, 2> slots;
  std::int64_t bound_pid = 0;  // 0 when unbound
  LoadHistory load;
  std::uint64_t ecc_corrected_base = 0;  // corrected errors seen since the last reset, before faults
  TimeMs ecc_reset_at_ms = 0;
  std::uint64_t self_test_runs = 0;  // keys each self-test's noise, so repeats differ
  std::vector<Fault> faults;

  const Fault* fault(FaultKind kind) const;
  FirmwareSlotState& slot(Slot s) { return slots[s == Slot::a ? 0 : 1]; }
  const FirmwareSlotState& slot(Slot s) const { return slots[s == Slot::a ? 0 : 1]; }
};

// What a simulated node is, fixed when its state directory is created.
struct NodeIdentity {
  std::string node_id;
  Revision revision = Revision::a;
  std::uint32_t chip_count = 8;
  std::uint64_t seed = 1;
};

// What the sim driver reports as its version until a driver install records another.
inline constexpr std::string_view kDefaultDriverVersion = "kiln-sim 0.1.0";

struct NodeState {
  NodeIdentity identity;
  std::string fault_file_digest;  // digest of the fault file last applied, "" for none
  // The installed driver's version: a driver installer for the sim records it with
  // kiln-sim-chip set-driver-version, and the driver reports it from then on.
  std::string driver_version{kDefaultDriverVersion};
  std::vector<ChipState> chips;
};

NodeState initial_node_state(const NodeIdentity& identity, const std::string& firmware_version,
                             TimeMs now);

struct ChipIdentity {
  std::uint32_t index = 0;
  std::string serial;
  Revision revision = Revision::a;
  std::string pci_bus_id;
  std::int32_t numa_node = 0;
  std::uint64_t memory_bytes = 0;
};
ChipIdentity chip_identity(const NodeState& node, std::uint32_t chip);

struct Telemetry {
  double temperature_c = 0;
  double power_w = 0;
  double clock_mhz = 0;
  std::uint64_t memory_used_bytes = 0;
  std::uint64_t ecc_corrected = 0;
  std::uint64_t ecc_uncorrected = 0;
  bool link_up = true;
  bool throttled = false;  // by heat: the thermal_throttle fault
  double utilization = 0;  // 1 while a live workload is bound, else 0: the sim has no finer notion
};

double load_fraction(const LoadHistory& load, TimeMs now, DurationMs thermal_time_constant_ms);
// Records a change of load at `now`, continuing the thermal curve from where it is.
void record_load(ChipState& chip, bool loaded, TimeMs now, DurationMs thermal_time_constant_ms);

Telemetry chip_telemetry(const NodeState& node, std::uint32_t chip, TimeMs now,
                         DurationMs thermal_time_constant_ms);

// Firmware transitions. They check only firmware state; the shell refuses busy chips first.
Status flash_standby(ChipState& chip, const std::string& version);
Status activate_standby(ChipState& chip, TimeMs now);
Status rollback_firmware(ChipState& chip, TimeMs now);
void reset_chip(ChipState& chip, TimeMs now);

enum class SelfTestKind { memory = 1, interconnect = 2, compute = 3 };
constexpr EnumTable<SelfTestKind, 3> enum_names(SelfTestKind) {
  return {{
      {SelfTestKind::memory, "memory"},
      {SelfTestKind::interconnect, "interconnect"},
      {SelfTestKind::compute, "compute"},
  }};
}
inline std::string_view to_string(SelfTestKind value) { return enum_name(value); }

struct SelfTest {
  SelfTestKind kind = SelfTestKind::memory;
  std::uint32_t level = 1;
  bool passed = true;
  std::uint64_t errors_found = 0;
  double duration_s = 0;
  double memory_bandwidth_gb_per_s = 0;
  double interconnect_bandwidth_gb_per_s = 0;
  double compute_tflop_per_s = 0;
  std::string detail;
};

// Runs self-test number chip.self_test_runs; the caller increments the counter afterwards.
SelfTest run_self_test(const NodeState& node, std::uint32_t chip, SelfTestKind kind,
                       std::uint32_t level);

// What a simulated workload needs to know about a chip to behave like it.
struct ChipConditions {
  std::uint32_t chip = 0;
  Revision revision = Revision::a;
  std::string firmware_version;
  bool firmware_healthy = true;  // false when the active image was flashed under flash_fail
  std::uint64_t node_seed = 0;
  std::uint64_t chip_seed = 0;  // derived from the node seed and the chip's index
  // Throughput relative to the revision's nominal figures: silicon variation times the slow
  // fault's factor times the throttled clock fraction. Multiply nominal throughput by it.
  double speed_factor = 1.0;
  double silicon_factor = 1.0;  // this chip's fixed device-to-device variation (about +-2%)
  double slow_factor = 1.0;     // 1 unless the slow fault is active
  bool throttled = false;
  bool sdc_active = false;
  double sdc_rate = 0.0;  // fraction of outputs to corrupt when sdc_active
  bool link_up = true;
  bool hung = false;  // a workload touching a hung chip should block forever
  // What a training step on the chip sees (a stability run's failure kinds):
  bool nan_loss = false;          // the loss read back is NaN from now on
  double loss_spike_factor = 0;   // > 0: the loss spikes this many times higher (loss_spike_multiplier)
  double decay_per_hour = 0;      // > 0: throughput falls by this fraction per hour of the run's clock
};

// A chip with the loss_spike fault starts a spike every this many training steps.
inline constexpr std::uint64_t kLossSpikeEverySteps = 200;
// What a training step's loss is multiplied by under the loss_spike fault: like a real spike,
// it jumps by `factor` at the first step of each period and falls back over the next ten or so.
double loss_spike_multiplier(double factor, std::uint64_t step);
ChipConditions chip_conditions(const NodeState& node, std::uint32_t chip);

// Deterministic noise: a hash of the seed and keys mapped to [0, 1).
std::uint64_t mix_seed(std::uint64_t seed, std::uint64_t a, std::uint64_t b = 0,
                       std::uint64_t c = 0, std::uint64_t d = 0);
double unit_uniform(std::uint64_t hash);
// Roughly normal with mean 0 and standard deviation 1, bounded by +-3.5.
double unit_normal(std::uint64_t hash);

}  // namespace kiln::sim

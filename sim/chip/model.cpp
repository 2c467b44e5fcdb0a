#include "sim/chip/model.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace kiln::sim {
namespace {

// Keys that separate the noise streams of different quantities.
enum NoiseKey : std::uint64_t {
  kSerialKey = 1,
  kSiliconKey,
  kTemperatureKey,
  kPowerKey,
  kClockKey,
  kCorrectedKey,
  kSelfTestKey,
  kChipSeedKey,
  kErrorsKey,
};

constexpr std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

constexpr std::uint64_t kGiB = 1ull << 30;

const RevisionProfile kRevisionA{41.0, 76.0, 65.0, 380.0, 1500.0, 64 * kGiB, 1600.0, 300.0, 190.0};
const RevisionProfile kRevisionB{38.0, 71.0, 70.0, 470.0, 1850.0, 96 * kGiB, 2400.0, 450.0, 310.0};

double silicon_factor(std::uint64_t seed, std::uint32_t chip) {
  return 1.0 + 0.02 * (2.0 * unit_uniform(mix_seed(seed, kSiliconKey, chip)) - 1.0);
}

std::string format_figure(double value) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.1f", value);
  return buffer;
}

// Reported durations of each self-test level; the sim does not sleep them unless asked.
double level_duration_s(std::uint32_t level) {
  switch (level) {
    case 1: return 5.0;
    case 2: return 60.0;
    default: return 900.0;
  }
}

}  // namespace

std::string_view to_string(Revision revision) { return revision == Revision::a ? "a" : "b"; }

Result<Revision> parse_revision(std::string_view text) {
  if (text == "a") return Revision::a;
  if (text == "b") return Revision::b;
  return fail(Errc::config,
              "hardware revision '" + std::string(text) + "' is unknown; use \"a\" or \"b\"");
}

const RevisionProfile& profile(Revision revision) {
  return revision == Revision::a ? kRevisionA : kRevisionB;
}

Result<FaultKind> parse_fault_kind(std::string_view text) {
  if (auto kind = enum_from_name<FaultKind>(text)) return *kind;
  std::string known;
  for (const auto& [kind, name] : enum_names(FaultKind{})) known += (known.empty() ? "" : ", ") + std::string(name);
  return fail(Errc::invalid_argument, "fault kind '" + std::string(text) + "' is unknown; use one of " + known);
}

std::string_view to_string(FlashFailMode mode) {
  return mode == FlashFailMode::flash ? "flash" : "activate";
}

Result<FlashFailMode> parse_flash_fail_mode(std::string_view text) {
  if (text.empty() || text == "flash") return FlashFailMode::flash;
  if (text == "activate") return FlashFailMode::activate;
  return fail(Errc::invalid_argument, "flash_fail mode '" + std::string(text) +
                                          "' is unknown; use \"flash\" or \"activate\"");
}

Result<Fault> make_fault(FaultKind kind, double factor, FlashFailMode mode, TimeMs since_ms,
                         bool from_fault_file) {
  Fault fault{kind, 1.0, mode, since_ms, from_fault_file};
  if (kind == FaultKind::slow || kind == FaultKind::sdc) {
    fault.factor = factor == 0.0 ? (kind == FaultKind::slow ? 0.5 : 0.01) : factor;
    if (!(fault.factor > 0.0 && fault.factor <= 1.0)) {
      return fail(Errc::invalid_argument,
                  "factor " + std::to_string(factor) + " for fault " +
                      std::string(to_string(kind)) + " is out of range; give a value in (0, 1]");
    }
  }
  if (kind == FaultKind::throughput_decay) {
    fault.factor = factor == 0.0 ? 0.5 : factor;
    if (!(fault.factor > 0.0 && fault.factor <= 1.0)) {
      return fail(Errc::invalid_argument, "factor " + std::to_string(factor) +
                                              " for fault throughput_decay (the fraction lost per hour) is out of "
                                              "range; give a value in (0, 1]");
    }
  }
  if (kind == FaultKind::loss_spike) {
    fault.factor = factor == 0.0 ? 10.0 : factor;
    if (!(fault.factor > 1.0 && fault.factor <= 1000.0)) {
      return fail(Errc::invalid_argument, "factor " + std::to_string(factor) +
                                              " for fault loss_spike (how many times the true loss) is out of "
                                              "range; give a value in (1, 1000]");
    }
  }
  return fault;
}

std::string_view to_string(Slot slot) { return slot == Slot::a ? "a" : "b"; }

const Fault* ChipState::fault(FaultKind kind) const {
  for (const auto& f : faults) {
    if (f.kind == kind) return &f;
  }
  return nullptr;
}

double loss_spike_multiplier(double factor, std::uint64_t step) {
  const std::uint64_t since_spike = step % kLossSpikeEverySteps;
  return 1.0 + (factor - 1.0) * std::exp(-static_cast<double>(since_spike) / 4.0);
}

std::uint64_t mix_seed(std::uint64_t seed, std::uint64_t a, std::uint64_t b, std::uint64_t c,
                       std::uint64_t d) {
  std::uint64_t h = splitmix64(seed);
  for (std::uint64_t key : {a, b, c, d}) h = splitmix64(h ^ splitmix64(key));
  return h;
}

double unit_uniform(std::uint64_t hash) {
  return static_cast<double>(hash >> 11) * (1.0 / 9007199254740992.0);
}

double unit_normal(std::uint64_t hash) {
  double sum = 0.0;
  for (std::uint64_t i = 0; i < 4; ++i) sum += unit_uniform(splitmix64(hash + i));
  return (sum - 2.0) * std::sqrt(3.0);
}

NodeState initial_node_state(const NodeIdentity& identity, const std::string& firmware_version,
                             TimeMs now) {
  NodeState node;
  node.identity = identity;
  node.chips.resize(identity.chip_count);
  for (std::uint32_t i = 0; i < identity.chip_count; ++i) {
    ChipState& chip = node.chips[i];
    chip.index = i;
    chip.slots[0] = FirmwareSlotState{firmware_version, true, false};
    chip.slots[1] = FirmwareSlotState{firmware_version, true, false};
    chip.load = LoadHistory{false, now, 0.0};
    // A few corrected errors are normal on healthy memory.
    chip.ecc_corrected_base = mix_seed(identity.seed, kCorrectedKey, i) % 4;
    chip.ecc_reset_at_ms = now;
  }
  return node;
}

ChipIdentity chip_identity(const NodeState& node, std::uint32_t chip) {
  KILN_ASSERT(chip < node.chips.size(), "chip index checked by the caller");
  const auto& id = node.identity;
  std::uint64_t node_hash = 0xCBF29CE484222325ull;  // FNV-1a of the node id
  for (unsigned char c : id.node_id) node_hash = (node_hash ^ c) * 0x100000001B3ull;
  char serial[64];
  std::snprintf(serial, sizeof serial, "KC%s-%010llX", id.revision == Revision::a ? "A" : "B",
                static_cast<unsigned long long>(mix_seed(id.seed, kSerialKey, node_hash, chip) &
                                                0xFFFFFFFFFFull));
  char bus[32];
  std::snprintf(bus, sizeof bus, "0000:%02x:00.0", 0x10 + chip * 2);
  ChipIdentity out;
  out.index = chip;
  out.serial = serial;
  out.revision = id.revision;
  out.pci_bus_id = bus;
  out.numa_node = chip < (id.chip_count + 1) / 2 ? 0 : 1;
  out.memory_bytes = profile(id.revision).memory_bytes;
  return out;
}

double load_fraction(const LoadHistory& load, TimeMs now, DurationMs thermal_time_constant_ms) {
  const double target = load.loaded ? 1.0 : 0.0;
  const double elapsed_ms = static_cast<double>(std::max<TimeMs>(0, now - load.changed_at_ms));
  const double tau_ms = static_cast<double>(std::max<DurationMs>(1, thermal_time_constant_ms));
  return target + (load.fraction_at_change - target) * std::exp(-elapsed_ms / tau_ms);
}

void record_load(ChipState& chip, bool loaded, TimeMs now, DurationMs thermal_time_constant_ms) {
  if (chip.load.loaded == loaded) return;
  chip.load = LoadHistory{loaded, now, load_fraction(chip.load, now, thermal_time_constant_ms)};
}

Telemetry chip_telemetry(const NodeState& node, std::uint32_t chip_index, TimeMs now,
                         DurationMs thermal_time_constant_ms) {
  KILN_ASSERT(chip_index < node.chips.size(), "chip index checked by the caller");
  const ChipState& chip = node.chips[chip_index];
  const RevisionProfile& p = profile(node.identity.revision);
  const std::uint64_t seed = node.identity.seed;
  // Noise changes once a second, so two reads within a second agree.
  const auto second = static_cast<std::uint64_t>(now / 1000);
  const double frac = load_fraction(chip.load, now, thermal_time_constant_ms);
  const bool hot = chip.fault(FaultKind::thermal_throttle) != nullptr;

  Telemetry t;
  t.temperature_c = hot ? kThrottleTemperatureC + 2.0 + 5.0 * frac
                        : p.idle_temperature_c + (p.loaded_temperature_c - p.idle_temperature_c) * frac;
  t.temperature_c += 0.25 * unit_normal(mix_seed(seed, kTemperatureKey, chip_index, second));
  // A throttled chip is held to a lower power limit.
  const double loaded_power_w = hot ? 0.7 * p.loaded_power_w : p.loaded_power_w;
  t.power_w = (p.idle_power_w + (loaded_power_w - p.idle_power_w) * frac) *
              (1.0 + 0.01 * unit_normal(mix_seed(seed, kPowerKey, chip_index, second)));
  t.throttled = hot;
  t.clock_mhz = p.clock_mhz * (hot ? kThrottledClockFraction : 1.0) +
                3.0 * unit_normal(mix_seed(seed, kClockKey, chip_index, second));
  t.memory_used_bytes =
      chip.load.loaded
          ? static_cast<std::uint64_t>(kLoadedMemoryFraction * static_cast<double>(p.memory_bytes))
          : kIdleMemoryUsedBytes;

  t.ecc_corrected = chip.ecc_corrected_base;
  if (const Fault* storm = chip.fault(FaultKind::ecc_storm)) {
    const TimeMs start = std::max(storm->since_ms, chip.ecc_reset_at_ms);
    const double seconds = static_cast<double>(std::max<TimeMs>(0, now - start)) / 1000.0;
    t.ecc_corrected += static_cast<std::uint64_t>(1000.0 + 400.0 * seconds);
    t.ecc_uncorrected = static_cast<std::uint64_t>(1.0 + 2.0 * seconds);
  }
  t.link_up = chip.fault(FaultKind::link_down) == nullptr && !chip.slot(chip.active).faulty;
  t.utilization = chip.load.loaded ? 1.0 : 0.0;
  return t;
}

Status flash_standby(ChipState& chip, const std::string& version) {
  const Slot standby = other(chip.active);
  // Writing the standby slot destroys whatever was there, including a rollback target.
  if (chip.previous == standby) chip.previous.reset();
  FirmwareSlotState& slot = chip.slot(standby);
  slot.version = version;
  slot.faulty = false;
  const Fault* flash_fail = chip.fault(FaultKind::flash_fail);
  if (flash_fail != nullptr && flash_fail->flash_mode == FlashFailMode::flash) {
    slot.valid = false;
    return fail(Errc::integrity,
                "writing firmware " + version + " to standby slot " +
                    std::string(to_string(standby)) + " of chip " + std::to_string(chip.index) +
                    " failed verification; the slot is now invalid. Flash it again; if it keeps "
                    "failing, take the chip out of service");
  }
  slot.valid = true;
  slot.faulty = flash_fail != nullptr;
  return {};
}

void reset_chip(ChipState& chip, TimeMs now) {
  chip.ecc_corrected_base = 0;
  chip.ecc_reset_at_ms = now;
}

Status activate_standby(ChipState& chip, TimeMs now) {
  const Slot standby = other(chip.active);
  if (!chip.slot(standby).valid) {
    return fail(Errc::conflict, "standby slot " + std::string(to_string(standby)) + " of chip " +
                                    std::to_string(chip.index) +
                                    " holds no valid image (its last flash failed); flash it "
                                    "again before activating");
  }
  chip.previous = chip.active;
  chip.active = standby;
  reset_chip(chip, now);
  return {};
}

Status rollback_firmware(ChipState& chip, TimeMs now) {
  if (!chip.previous) {
    return fail(Errc::conflict, "chip " + std::to_string(chip.index) +
                                    " has no previous firmware slot to roll back to (nothing was "
                                    "activated since the last rollback or flash); flash a known "
                                    "good image and activate it instead");
  }
  chip.active = *chip.previous;
  chip.previous.reset();
  reset_chip(chip, now);
  return {};
}

ChipConditions chip_conditions(const NodeState& node, std::uint32_t chip_index) {
  KILN_ASSERT(chip_index < node.chips.size(), "chip index checked by the caller");
  const ChipState& chip = node.chips[chip_index];
  const std::uint64_t seed = node.identity.seed;
  ChipConditions c;
  c.chip = chip_index;
  c.revision = node.identity.revision;
  c.firmware_version = chip.slot(chip.active).version;
  c.firmware_healthy = !chip.slot(chip.active).faulty;
  c.node_seed = seed;
  c.chip_seed = mix_seed(seed, kChipSeedKey, chip_index);
  c.silicon_factor = silicon_factor(seed, chip_index);
  if (const Fault* slow = chip.fault(FaultKind::slow)) c.slow_factor = slow->factor;
  c.throttled = chip.fault(FaultKind::thermal_throttle) != nullptr;
  c.speed_factor =
      c.silicon_factor * c.slow_factor * (c.throttled ? kThrottledClockFraction : 1.0);
  if (const Fault* sdc = chip.fault(FaultKind::sdc)) {
    c.sdc_active = true;
    c.sdc_rate = sdc->factor;
  }
  c.link_up = chip.fault(FaultKind::link_down) == nullptr && c.firmware_healthy;
  c.hung = chip.fault(FaultKind::hang) != nullptr;
  c.nan_loss = chip.fault(FaultKind::nan_loss) != nullptr;
  if (const Fault* spike = chip.fault(FaultKind::loss_spike)) c.loss_spike_factor = spike->factor;
  if (const Fault* decay = chip.fault(FaultKind::throughput_decay)) c.decay_per_hour = decay->factor;
  return c;
}

SelfTest run_self_test(const NodeState& node, std::uint32_t chip_index, SelfTestKind kind,
                       std::uint32_t level) {
  KILN_ASSERT(chip_index < node.chips.size(), "chip index checked by the caller");
  KILN_ASSERT(level >= 1 && level <= 3, "level checked by the caller");
  const ChipState& chip = node.chips[chip_index];
  const RevisionProfile& p = profile(node.identity.revision);
  const ChipConditions c = chip_conditions(node, chip_index);
  const std::uint64_t key = mix_seed(node.identity.seed, kSelfTestKey, chip_index,
                                     static_cast<std::uint64_t>(kind) * 8 + level,
                                     chip.self_test_runs);
  const double noise = 1.0 + 0.01 * unit_normal(key);

  SelfTest t;
  t.kind = kind;
  t.level = level;
  t.duration_s = level_duration_s(level);
  if (!c.firmware_healthy) {
    t.passed = false;
    t.errors_found = 1;
    t.detail = "chip does not answer correctly: active firmware " + c.firmware_version +
               " in slot " + std::string(to_string(chip.active)) +
               " failed its self-check; roll back or reflash the firmware";
    return t;
  }
  switch (kind) {
    case SelfTestKind::memory: {
      t.memory_bandwidth_gb_per_s = p.memory_bandwidth_gb_per_s * c.silicon_factor *
                                    c.slow_factor * noise;
      if (chip.fault(FaultKind::ecc_storm) != nullptr) {
        t.passed = false;
        t.errors_found = 8 * level + mix_seed(key, kErrorsKey) % 8;
        t.detail = std::to_string(t.errors_found) +
                   " uncorrectable memory errors found by the pattern test; replace or "
                   "quarantine the chip";
      } else {
        t.detail = "memory pattern test clean at " + format_figure(t.memory_bandwidth_gb_per_s) +
                   " GB/s";
      }
      break;
    }
    case SelfTestKind::interconnect: {
      if (!c.link_up) {
        t.passed = false;
        t.errors_found = 1;
        t.detail = "chip-to-chip link is down; no bandwidth measured. Check the cabling, reset "
                   "the chip, or quarantine it";
      } else {
        t.interconnect_bandwidth_gb_per_s = p.interconnect_bandwidth_gb_per_s * noise;
        t.detail = "links up at " + format_figure(t.interconnect_bandwidth_gb_per_s) + " GB/s";
      }
      break;
    }
    case SelfTestKind::compute: {
      t.compute_tflop_per_s = p.compute_tflop_per_s * c.speed_factor * noise;
      // Only the long stress compares enough known answers to catch silent corruption.
      if (c.sdc_active && level >= 3) {
        t.passed = false;
        t.errors_found = 1 + static_cast<std::uint64_t>(c.sdc_rate * 1000.0);
        t.detail = std::to_string(t.errors_found) +
                   " compute results differ from their known answers (silent data "
                   "corruption); quarantine the chip";
      } else {
        t.detail = "compute stress matched known answers at " +
                   format_figure(t.compute_tflop_per_s) + " TFLOP/s" +
                   (c.throttled ? " while throttled" : "");
      }
      break;
    }
  }
  return t;
}

}  // namespace kiln::sim

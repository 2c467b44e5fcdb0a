#include "agent/health/evaluate.h"

#include <fmt/format.h>

#include <cstdio>
#include <map>
#include <set>

namespace kiln::agent::health {
namespace {

std::string figure(double value, int decimals = 1) {
  char text[64];
  std::snprintf(text, sizeof text, "%.*f", decimals, value);
  return text;
}

std::string chip_name(std::uint32_t chip) { return "chip " + std::to_string(chip); }

CheckResult make(std::string check, std::optional<std::uint32_t> chip, CheckStatus status,
                 std::string reason_code, std::string category, std::string message,
                 std::string action = "") {
  CheckResult result;
  result.check = std::move(check);
  result.chip = chip;
  result.status = status;
  result.reason_code = std::move(reason_code);
  result.category = std::move(category);
  result.message = std::move(message);
  result.recommended_action = std::move(action);
  return result;
}

CheckResult passed(std::string check, std::optional<std::uint32_t> chip, std::string category,
                   std::string message) {
  return make(std::move(check), chip, CheckStatus::pass, "ok", std::move(category),
              std::move(message));
}

// How each self-test names its figure, its failures and what to do about them.
struct SelfTestTraits {
  const char* check;
  const char* category;
  const char* figure_key;
  const char* unit;
  const char* errors_reason;
  const char* errors_action;
  const char* low_reason;
  const char* low_action;
};

const SelfTestTraits& traits(drivers::SelfTestKind kind) {
  static const SelfTestTraits memory{
      "memory",
      category::memory,
      "memory_bandwidth_gb_per_s",
      "GB/s",
      "memory_errors",
      "drain the node and quarantine the chip; ask the lab to replace it",
      "memory_bandwidth_low",
      "drain the node and run level 3 diagnostics; a chip slower than its peers skews every "
      "benchmark on the node"};
  static const SelfTestTraits interconnect{
      "interconnect",
      category::interconnect,
      "interconnect_bandwidth_gb_per_s",
      "GB/s",
      "interconnect_failed",
      "reset the chip and check its interconnect cabling; if the test still fails, drain the "
      "node for the lab",
      "interconnect_bandwidth_low",
      "check the interconnect cabling and link width, then rerun level 2 diagnostics; drain "
      "the node if it stays low"};
  static const SelfTestTraits compute{
      "compute",
      category::compute,
      "compute_tflop_per_s",
      "TFLOP/s",
      "compute_errors",
      "quarantine the chip now: it returns wrong results (silent data corruption); rerun the "
      "jobs it ran since its last clean level 3 diagnostics elsewhere",
      "compute_below_target",
      "check cooling and clocks, compare with the chip's peers, and drain the node for the lab "
      "if it stays below target"};
  switch (kind) {
    case drivers::SelfTestKind::memory: return memory;
    case drivers::SelfTestKind::interconnect: return interconnect;
    case drivers::SelfTestKind::compute: return compute;
  }
  return memory;
}

double target_of(drivers::SelfTestKind kind, const RevisionTargets& targets) {
  switch (kind) {
    case drivers::SelfTestKind::memory: return targets.memory_bandwidth_gb_per_s;
    case drivers::SelfTestKind::interconnect: return targets.interconnect_bandwidth_gb_per_s;
    case drivers::SelfTestKind::compute: return targets.compute_tflop_per_s;
  }
  return 0;
}

double measured_of(const drivers::SelfTestResult& result) {
  switch (result.kind) {
    case drivers::SelfTestKind::memory: return result.memory_bandwidth_gb_per_s;
    case drivers::SelfTestKind::interconnect: return result.interconnect_bandwidth_gb_per_s;
    case drivers::SelfTestKind::compute: return result.compute_tflop_per_s;
  }
  return 0;
}

CheckResult no_targets(std::string check, std::uint32_t chip, std::string category) {
  return make(std::move(check), chip, CheckStatus::skip, "no_targets_for_revision",
              std::move(category),
              "no health targets for this chip's hardware revision, so its figures cannot be "
              "judged",
              "add a [revision.X] table for the revision to the health targets file");
}

// A figure the driver declares it does not read (drivers/kiln_driver.h telemetry_kinds): unknown,
// not a failure.
CheckResult not_read(std::string check, std::uint32_t chip, std::string category, const std::string& what) {
  return make(std::move(check), chip, CheckStatus::skip, "not_reported_by_backend", std::move(category),
              "the driver does not read " + what + " on this backend, so it is unknown",
              "nothing to do: a backend without it (the CPU's) has nothing to report");
}

// Per chip, the value of one attribute among passed chip_firmware results.
std::map<std::uint32_t, std::string> chip_attribute(const std::vector<CheckResult>& results,
                                                    const std::string& key) {
  std::map<std::uint32_t, std::string> out;
  for (const auto& result : results) {
    if (result.check != "chip_firmware" || !result.chip || result.status == CheckStatus::skip) {
      continue;
    }
    auto it = result.attributes.find(key);
    if (it != result.attributes.end()) out[*result.chip] = it->second;
  }
  return out;
}

// "1.0.0 on chips 0, 1, 2; 1.1.0 on chip 3"
std::string describe_groups(const std::map<std::uint32_t, std::string>& by_chip) {
  std::map<std::string, std::vector<std::uint32_t>> groups;
  for (const auto& [chip, value] : by_chip) groups[value].push_back(chip);
  std::string out;
  for (const auto& [value, chips] : groups) {
    if (!out.empty()) out += "; ";
    out += value + (chips.size() == 1 ? " on chip " : " on chips ");
    for (std::size_t i = 0; i < chips.size(); ++i) {
      out += (i == 0 ? "" : ", ") + std::to_string(chips[i]);
    }
  }
  return out;
}

}  // namespace

CheckResult evaluate_driver(const CheckReading& reading) {
  KILN_ASSERT(reading.kind == CheckKind::driver, "evaluate_driver takes a driver reading");
  if (reading.error) {
    const Error& error = *reading.error;
    std::string reason = "driver_load_failed";
    if (error.code == Errc::not_found) reason = "driver_missing";
    if (error.code == Errc::unsupported_version) reason = "driver_abi_mismatch";
    return make("driver", std::nullopt, CheckStatus::fail, reason, category::software,
                "the chip driver did not load: " + error.describe(),
                reason == "driver_abi_mismatch"
                    ? "install a driver built for kiln driver ABI version 1 (kiln-agent install "
                      "--kind driver), or an agent that speaks the driver's version"
                    : "check driver_library_path and driver_options in agent.toml and that the "
                      "driver package is installed; reinstall it with kiln-agent install --kind "
                      "driver");
  }
  KILN_ASSERT(reading.driver.has_value(), "a driver reading without error has driver info");
  auto result = passed("driver", std::nullopt, category::software,
                       reading.driver->version + " loaded (driver ABI 1), " +
                           std::to_string(reading.driver->chip_count) + " chips");
  result.measured["chip_count"] = reading.driver->chip_count;
  result.attributes["driver_version"] = reading.driver->version;
  if (!reading.driver->backend.empty()) result.attributes["backend"] = reading.driver->backend;
  return result;
}

CheckResult evaluate_chip_count(std::uint32_t found, std::uint32_t expected) {
  CheckResult result;
  if (expected == 0) {
    result = make("chip_count", std::nullopt, CheckStatus::skip, "expected_chip_count_unset",
                  category::config,
                  "the driver reports " + std::to_string(found) +
                      " chips; no expected count is configured",
                  "set expected_chip_count in the health targets file");
  } else if (found != expected) {
    result = make("chip_count", std::nullopt, CheckStatus::fail, "chip_count_mismatch",
                  category::config,
                  "the driver reports " + std::to_string(found) + " chips, the node should have " +
                      std::to_string(expected),
                  "check that every chip is seated and visible on the PCI bus and that the "
                  "driver matches the hardware; if a chip is missing, drain the node for the lab");
  } else {
    result = passed("chip_count", std::nullopt, category::config,
                    std::to_string(found) + " chips, as expected");
  }
  result.measured["chip_count"] = found;
  result.measured["expected_chip_count"] = expected;
  return result;
}

CheckResult evaluate_chip_firmware(std::uint32_t chip, const drivers::ChipIdentity& identity,
                                   const drivers::FirmwareSlots& slots) {
  CheckResult result;
  const std::string active(drivers::to_string(slots.active));
  if (!slots.valid(slots.active)) {
    result = make("chip_firmware", chip, CheckStatus::fail, "firmware_active_invalid",
                  category::firmware,
                  chip_name(chip) + " runs from slot " + active +
                      ", which holds no valid image",
                  "reflash a known-good firmware with kiln-agent install --kind firmware, then "
                  "rerun level 1 diagnostics");
  } else {
    result = passed("chip_firmware", chip, category::firmware,
                    chip_name(chip) + " (" + identity.serial + ", revision " +
                        identity.hardware_revision + ") runs firmware " +
                        slots.active_version() + " from slot " + active);
  }
  result.attributes["serial"] = identity.serial;
  result.attributes["hardware_revision"] = identity.hardware_revision;
  result.attributes["firmware_version"] = slots.active_version();
  result.attributes["active_slot"] = active;
  result.attributes["previous_slot"] =
      slots.previous ? std::string(drivers::to_string(*slots.previous)) : "none";
  return result;
}

std::optional<CheckResult> evaluate_no_healthy_chip(std::uint32_t chip_count,
                                                    const std::set<std::uint32_t>& unhealthy_chips) {
  for (std::uint32_t chip = 0; chip < chip_count; ++chip) {
    if (unhealthy_chips.count(chip) == 0) return std::nullopt;
  }
  if (chip_count == 0) return std::nullopt;  // chip_count's own check says so
  return make("chips_healthy", std::nullopt, CheckStatus::fail, "no_healthy_chip", category::config,
              "no chip of the node is healthy: all " + std::to_string(chip_count) +
                  " did not answer the driver at start-up, so the node can take no work",
              "read the agent's log for why each chip did not answer (kiln-agent check-config shows it too), "
              "fix the driver or its options, and restart the agent");
}

std::vector<CheckResult> evaluate_host(const drivers::cpu::HostReadings& host) {
  constexpr double kWarnAvailableFraction = 0.10;
  constexpr double kFailAvailableFraction = 0.02;
  std::vector<CheckResult> out;
  if (!host.cores_online) {
    out.push_back(make("cores_online", std::nullopt, CheckStatus::skip, "not_reported_by_host", category::compute,
                       "the host has no readable /sys/devices/system/cpu/online, so its online cores are unknown"));
  } else if (host.cores_present && *host.cores_online < *host.cores_present) {
    out.push_back(make("cores_online", std::nullopt, CheckStatus::warn, "cores_offline", category::compute,
                       fmt::format("{} of the host's {} cores are online", *host.cores_online, *host.cores_present),
                       "bring the offline cores back (echo 1 > /sys/devices/system/cpu/cpuN/online) or find why "
                       "the kernel took them offline; benchmarks on this node measure fewer cores meanwhile"));
  } else {
    out.push_back(passed("cores_online", std::nullopt, category::compute,
                         fmt::format("{} cores online", *host.cores_online)));
  }
  if (host.cores_online) out.back().measured["cores_online"] = *host.cores_online;

  if (!host.memory_total_bytes || !host.memory_available_bytes || *host.memory_total_bytes == 0) {
    out.push_back(make("memory_available", std::nullopt, CheckStatus::skip, "not_reported_by_host", category::memory,
                       "the host's /proc/meminfo has no MemTotal and MemAvailable, so its free memory is unknown"));
    return out;
  }
  const double fraction =
      static_cast<double>(*host.memory_available_bytes) / static_cast<double>(*host.memory_total_bytes);
  const std::string figures = fmt::format("{:.1f} GiB of {:.1f} GiB available ({:.0f}%)",
                                          static_cast<double>(*host.memory_available_bytes) / (1ull << 30),
                                          static_cast<double>(*host.memory_total_bytes) / (1ull << 30), fraction * 100);
  const std::string action = "find what holds the memory (a leftover job, a leak) and stop it; jobs on this node may "
                             "be killed by the kernel's OOM killer meanwhile";
  if (fraction < kFailAvailableFraction) {
    out.push_back(make("memory_available", std::nullopt, CheckStatus::fail, "memory_exhausted", category::memory,
                       figures, action));
  } else if (fraction < kWarnAvailableFraction) {
    out.push_back(make("memory_available", std::nullopt, CheckStatus::warn, "memory_low", category::memory, figures,
                       action));
  } else {
    out.push_back(passed("memory_available", std::nullopt, category::memory, figures));
  }
  out.back().measured["memory_available_bytes"] = static_cast<double>(*host.memory_available_bytes);
  out.back().measured["memory_total_bytes"] = static_cast<double>(*host.memory_total_bytes);
  return out;
}

CheckResult evaluate_firmware_less_chip(std::uint32_t chip, const drivers::ChipIdentity& identity) {
  CheckResult result = passed("chip_firmware", chip, category::firmware,
                              chip_name(chip) + " (" + identity.serial + ", revision " + identity.hardware_revision +
                                  ") has no firmware: its backend declares none");
  result.attributes["serial"] = identity.serial;
  result.attributes["hardware_revision"] = identity.hardware_revision;
  result.attributes["firmware_version"] = "";
  return result;
}

CheckResult evaluate_firmware_consistency(const std::vector<CheckResult>& results) {
  const auto versions = chip_attribute(results, "firmware_version");
  if (versions.empty()) {
    return make("firmware_consistency", std::nullopt, CheckStatus::skip, "no_chip_answered",
                category::firmware, "no chip reported its firmware version",
                "see the chip_firmware results");
  }
  std::set<std::string> distinct;
  for (const auto& [chip, version] : versions) distinct.insert(version);
  if (distinct.size() > 1) {
    return make("firmware_consistency", std::nullopt, CheckStatus::fail, "firmware_mismatch",
                category::firmware,
                "chips run different firmware: " + describe_groups(versions),
                "install one firmware version on every chip with kiln-agent install --kind "
                "firmware");
  }
  auto result = passed("firmware_consistency", std::nullopt, category::firmware,
                       distinct.begin()->empty()
                           ? "no chip has firmware: the backend declares none"
                           : std::to_string(versions.size()) + " chips run firmware " + *distinct.begin());
  result.attributes["firmware_version"] = *distinct.begin();
  return result;
}

CheckResult evaluate_revision_consistency(const std::vector<CheckResult>& results) {
  const auto revisions = chip_attribute(results, "hardware_revision");
  if (revisions.empty()) {
    return make("revision_consistency", std::nullopt, CheckStatus::skip, "no_chip_answered",
                category::config, "no chip reported its hardware revision",
                "see the chip_firmware results");
  }
  std::set<std::string> distinct;
  for (const auto& [chip, revision] : revisions) distinct.insert(revision);
  if (distinct.size() > 1) {
    return make("revision_consistency", std::nullopt, CheckStatus::fail, "revision_mismatch",
                category::config,
                "chips of different hardware revisions in one node: " +
                    describe_groups(revisions),
                "a node must hold one revision: drain it for the lab to fix its inventory");
  }
  auto result = passed("revision_consistency", std::nullopt, category::config,
                       "every chip is revision " + *distinct.begin());
  result.attributes["hardware_revision"] = *distinct.begin();
  return result;
}

std::vector<CheckResult> evaluate_telemetry(std::uint32_t chip,
                                            const drivers::ChipTelemetry& t,
                                            const RevisionTargets* targets,
                                            const drivers::DriverCapabilities& declared) {
  std::vector<CheckResult> out;
  const std::string name = chip_name(chip);

  if (!declared.ecc) {
    out.push_back(not_read("ecc", chip, category::memory, "ECC counters"));
  } else if (targets == nullptr) {
    out.push_back(no_targets("ecc", chip, category::memory));
  } else if (t.ecc_uncorrected >= targets->fail_ecc_uncorrected) {
    out.push_back(make("ecc", chip, CheckStatus::fail, "ecc_uncorrected", category::memory,
                       name + " has " + std::to_string(t.ecc_uncorrected) +
                           " uncorrected and " + std::to_string(t.ecc_corrected) +
                           " corrected ECC errors since its last reset",
                       kActionUncorrectedEcc));
  } else if (t.ecc_corrected >= targets->warn_ecc_corrected) {
    out.push_back(make("ecc", chip, CheckStatus::warn, "ecc_corrected_high", category::memory,
                       name + " has " + std::to_string(t.ecc_corrected) +
                           " corrected ECC errors since its last reset (warning at " +
                           std::to_string(targets->warn_ecc_corrected) + ")",
                       "watch the count; if it keeps climbing, drain the node and run level 2 "
                       "diagnostics"));
  } else {
    out.push_back(passed("ecc", chip, category::memory,
                         name + ": " + std::to_string(t.ecc_corrected) +
                             " corrected, 0 uncorrected ECC errors"));
  }
  if (declared.ecc) {
    out.back().measured["ecc_corrected"] = static_cast<double>(t.ecc_corrected);
    out.back().measured["ecc_uncorrected"] = static_cast<double>(t.ecc_uncorrected);
  }

  const std::string temperature = declared.temperature ? figure(t.temperature_c) + " C" : "an unknown temperature";
  const bool throttled = declared.throttle && t.throttled;
  if (!declared.temperature && !declared.throttle) {
    out.push_back(not_read("thermal", chip, category::thermal, "temperature or throttling"));
  } else if (targets == nullptr) {
    out.push_back(no_targets("thermal", chip, category::thermal));
  } else if (throttled || (declared.temperature && t.temperature_c >= targets->fail_temperature_c)) {
    out.push_back(make(
        "thermal", chip, CheckStatus::fail, throttled ? "thermal_throttling" : "temperature_critical",
        category::thermal,
        name + (throttled ? " is throttling its clocks at " : " is at ") + temperature +
            " (limit " + figure(targets->fail_temperature_c) + " C, clock " +
            figure(t.clock_mhz, 0) + " MHz); its results are not representative",
        "drain the node and check the chip's cooling (fans, airflow, heatsink seating); return "
        "it to work once it runs below " +
            figure(targets->warn_temperature_c, 0) + " C unthrottled"));
  } else if (declared.temperature && t.temperature_c >= targets->warn_temperature_c) {
    out.push_back(make("thermal", chip, CheckStatus::warn, "temperature_high", category::thermal,
                       name + " is at " + temperature + " (warning at " +
                           figure(targets->warn_temperature_c) + " C, failing at " +
                           figure(targets->fail_temperature_c) + " C)",
                       "check the node's cooling and airflow before the chip starts throttling"));
  } else {
    out.push_back(passed("thermal", chip, category::thermal, name + " at " + temperature));
  }
  if (declared.temperature) out.back().measured["temperature_c"] = t.temperature_c;
  if (declared.clock) out.back().measured["clock_mhz"] = t.clock_mhz;
  if (declared.throttle) out.back().measured["throttled"] = t.throttled ? 1 : 0;

  if (!declared.link) {
    out.push_back(not_read("link", chip, category::interconnect, "chip-to-chip links"));
  } else if (!t.link_up) {
    out.push_back(make("link", chip, CheckStatus::fail, "link_down", category::interconnect,
                       name + "'s chip-to-chip link is down",
                       "reset the chip and check its interconnect cabling; if the link stays "
                       "down (or came down after a firmware install), roll back the firmware or "
                       "drain the node for the lab"));
  } else {
    out.push_back(passed("link", chip, category::interconnect, name + "'s link is up"));
  }
  if (declared.link) out.back().measured["link_up"] = t.link_up ? 1 : 0;

  if (!declared.power) {
    out.push_back(not_read("power", chip, category::power, "power draw"));
  } else if (targets == nullptr) {
    out.push_back(no_targets("power", chip, category::power));
  } else if (t.power_w > targets->max_power_w) {
    out.push_back(make("power", chip, CheckStatus::warn, "power_above_limit", category::power,
                       name + " draws " + figure(t.power_w) + " W, above its limit of " +
                           figure(targets->max_power_w, 0) + " W",
                       "check the chip's power cap and the node's power supply; drain the node "
                       "if it keeps drawing more than its limit"));
  } else {
    out.push_back(passed("power", chip, category::power, name + " draws " + figure(t.power_w) + " W"));
  }
  if (declared.power) out.back().measured["power_w"] = t.power_w;
  if (declared.memory) out.back().measured["memory_used_bytes"] = static_cast<double>(t.memory_used_bytes);
  return out;
}

CheckResult evaluate_self_test(std::uint32_t chip, const drivers::SelfTestResult& r,
                               const RevisionTargets* targets, const HealthTargets& limits) {
  const SelfTestTraits& k = traits(r.kind);
  const std::string name = chip_name(chip);
  const std::string level = " level " + std::to_string(r.level);
  const double measured = measured_of(r);
  CheckResult result;
  if (!r.passed) {
    result = make(k.check, chip, CheckStatus::fail, k.errors_reason, k.category,
                  name + "'s" + level + " " + k.check + " self-test failed with " +
                      std::to_string(r.errors_found) + " errors: " + r.detail,
                  k.errors_action);
  } else if (targets == nullptr) {
    result = no_targets(k.check, chip, k.category);
    result.message = name + "'s" + level + " " + k.check + " self-test found no errors, at " +
                     figure(measured) + " " + k.unit + "; no target for its revision to compare";
  } else {
    const double target = target_of(r.kind, *targets);
    const double ratio = target > 0 ? measured / target : 1.0;
    const std::string compared = figure(measured) + " " + k.unit + ", " + figure(100 * ratio) +
                                 "% of the revision's target of " + figure(target, 0) + " " + k.unit;
    if (ratio < limits.fail_below_fraction) {
      result = make(k.check, chip, CheckStatus::fail, k.low_reason, k.category,
                    name + "'s" + level + " " + k.check + " self-test measured " + compared +
                        " (fails below " + figure(100 * limits.fail_below_fraction, 0) + "%)",
                    k.low_action);
    } else if (ratio < limits.warn_below_fraction) {
      result = make(k.check, chip, CheckStatus::warn, k.low_reason, k.category,
                    name + "'s" + level + " " + k.check + " self-test measured " + compared +
                        " (warns below " + figure(100 * limits.warn_below_fraction, 0) + "%)",
                    k.low_action);
    } else {
      result = passed(k.check, chip, k.category,
                      name + "'s" + level + " " + k.check + " self-test is clean at " + compared);
    }
    result.measured["target"] = target;
    result.measured["fraction_of_target"] = ratio;
  }
  result.measured[k.figure_key] = measured;
  result.measured["errors_found"] = static_cast<double>(r.errors_found);
  result.measured["self_test_level"] = r.level;
  result.measured["self_test_duration_s"] = r.duration_s;
  return result;
}

CheckResult evaluate_workloads(const std::vector<WorkloadProgram>& workloads) {
  if (workloads.empty()) {
    return make("workloads", std::nullopt, CheckStatus::warn, "no_workloads_configured",
                category::config, "agent.toml configures no workload, so the node can run no "
                "benchmark or smoke run",
                "add the workload programs to the [workloads] table of agent.toml");
  }
  std::string problems;
  for (const auto& w : workloads) {
    if (!w.exists) {
      problems += (problems.empty() ? "" : "; ") + w.name + ": " + w.path + " does not exist";
    } else if (!w.executable) {
      problems += (problems.empty() ? "" : "; ") + w.name + ": " + w.path + " is not executable";
    }
  }
  CheckResult result =
      problems.empty()
          ? passed("workloads", std::nullopt, category::config,
                   std::to_string(workloads.size()) + " workload programs present")
          : make("workloads", std::nullopt, CheckStatus::fail, "workload_missing",
                 category::config, "configured workloads cannot run: " + problems,
                 "install the workload programs or fix their paths in the [workloads] table of "
                 "agent.toml, then run kiln-agent check-config");
  result.measured["workload_count"] = static_cast<double>(workloads.size());
  return result;
}

std::vector<CheckResult> evaluate_reading(const CheckReading& reading,
                                          const HealthTargets& targets,
                                          const std::optional<std::string>& revision_override) {
  if (reading.kind == CheckKind::driver) return {evaluate_driver(reading)};
  KILN_ASSERT(reading.chip.has_value(), "chip readings name their chip");
  const std::uint32_t chip = *reading.chip;
  const std::string check(to_string(reading.kind));
  if (reading.error) {
    const Error& error = *reading.error;
    if (error.code == Errc::unavailable) {
      return {make(check, chip, CheckStatus::skip, "chip_busy", category_of(reading.kind),
                   chip_name(chip) + " is bound to a workload: " + error.message,
                   "drain the node (or wait for its job to end) and rerun the diagnostics")};
    }
    if (reading.kind == CheckKind::telemetry || reading.kind == CheckKind::chip_firmware) {
      return {make(check, chip, CheckStatus::fail, "chip_unreadable", category_of(reading.kind),
                   chip_name(chip) + " did not answer: " + error.describe(), kActionWedgedChip)};
    }
    return {make(check, chip, CheckStatus::fail, "self_test_error", category_of(reading.kind),
                 chip_name(chip) + "'s " + check + " self-test could not run: " + error.describe(),
                 kActionWedgedChip)};
  }
  KILN_ASSERT(reading.identity.has_value(), "a chip reading without error has the identity");
  const std::string revision = revision_override.value_or(reading.identity->hardware_revision);
  const RevisionTargets* revision_targets = targets.find(revision);
  std::vector<CheckResult> out;
  switch (reading.kind) {
    case CheckKind::chip_firmware:
      if (!reading.firmware) {
        KILN_ASSERT(reading.capabilities && !reading.capabilities->firmware_slots,
                    "chip_firmware readings carry the slots of a backend that has them");
        out.push_back(evaluate_firmware_less_chip(chip, *reading.identity));
        break;
      }
      out.push_back(evaluate_chip_firmware(chip, *reading.identity, *reading.firmware));
      break;
    case CheckKind::telemetry:
      KILN_ASSERT(reading.telemetry.has_value(), "telemetry readings carry the telemetry");
      out = evaluate_telemetry(chip, *reading.telemetry, revision_targets,
                               reading.capabilities.value_or(drivers::DriverCapabilities{}));
      break;
    case CheckKind::memory:
    case CheckKind::interconnect:
    case CheckKind::compute:
      KILN_ASSERT(reading.self_test.has_value(), "self-test readings carry the result");
      out.push_back(evaluate_self_test(chip, *reading.self_test, revision_targets, targets));
      break;
    case CheckKind::driver: break;
  }
  for (auto& result : out) result.attributes.emplace("serial", reading.identity->serial);
  return out;
}

CheckResult timed_out_result(CheckKind kind, std::optional<std::uint32_t> chip,
                             DurationMs deadline_ms) {
  const std::string subject = chip ? chip_name(*chip) : std::string("the driver");
  auto result = make(std::string(to_string(kind)), chip, CheckStatus::fail, "check_timed_out",
                     category_of(kind),
                     "the " + std::string(to_string(kind)) + " check on " + subject +
                         " did not finish within its deadline of " +
                         figure(static_cast<double>(deadline_ms) / 1000.0) +
                         " s and was killed; the chip may be wedged",
                     kActionWedgedChip);
  result.measured["deadline_s"] = static_cast<double>(deadline_ms) / 1000.0;
  result.duration_s = static_cast<double>(deadline_ms) / 1000.0;
  return result;
}

CheckResult crashed_result(CheckKind kind, std::optional<std::uint32_t> chip,
                           const std::string& detail) {
  return make(std::string(to_string(kind)), chip, CheckStatus::fail, "check_crashed",
              category_of(kind),
              "the " + std::string(to_string(kind)) + " check" +
                  (chip ? " on " + chip_name(*chip) : std::string()) +
                  " ended without a result: " + detail,
              "rerun the diagnostics; if it repeats, reset the chip and report the output to the "
              "kiln maintainers");
}

CheckResult skipped_result(CheckKind kind, std::optional<std::uint32_t> chip,
                           std::string reason_code, std::string message) {
  return make(std::string(to_string(kind)), chip, CheckStatus::skip, std::move(reason_code),
              category_of(kind), std::move(message));
}

}  // namespace kiln::agent::health

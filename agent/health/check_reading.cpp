#include "agent/health/check_reading.h"

#include <nlohmann/json.hpp>

#include "common/health/check_result.h"

namespace kiln::agent::health {
namespace {

using nlohmann::json;

constexpr CheckKind kAllKinds[] = {CheckKind::driver,    CheckKind::chip_firmware,
                                   CheckKind::telemetry, CheckKind::memory,
                                   CheckKind::interconnect, CheckKind::compute};

json identity_json(const drivers::ChipIdentity& id) {
  return {{"index", id.index},           {"serial", id.serial},
          {"hardware_revision", id.hardware_revision}, {"pci_bus_id", id.pci_bus_id},
          {"numa_node", id.numa_node},   {"memory_bytes", id.memory_bytes}};
}

json firmware_json(const drivers::FirmwareSlots& slots) {
  json out = {{"active", std::string(drivers::to_string(slots.active))},
              {"version_a", slots.version_a},
              {"version_b", slots.version_b},
              {"valid_a", slots.valid_a},
              {"valid_b", slots.valid_b},
              {"previous", nullptr}};
  if (slots.previous) out["previous"] = std::string(drivers::to_string(*slots.previous));
  return out;
}

json telemetry_json(const drivers::ChipTelemetry& t) {
  return {{"temperature_c", t.temperature_c},   {"power_w", t.power_w},
          {"clock_mhz", t.clock_mhz},           {"memory_used_bytes", t.memory_used_bytes},
          {"ecc_corrected", t.ecc_corrected},   {"ecc_uncorrected", t.ecc_uncorrected},
          {"link_up", t.link_up},               {"throttled", t.throttled}};
}

json self_test_json(const drivers::SelfTestResult& r) {
  return {{"kind", static_cast<int>(r.kind)},
          {"level", r.level},
          {"passed", r.passed},
          {"errors_found", r.errors_found},
          {"duration_s", r.duration_s},
          {"memory_bandwidth_gb_per_s", r.memory_bandwidth_gb_per_s},
          {"interconnect_bandwidth_gb_per_s", r.interconnect_bandwidth_gb_per_s},
          {"compute_tflop_per_s", r.compute_tflop_per_s},
          {"detail", r.detail}};
}

drivers::FirmwareSlot parse_slot(const std::string& text) {
  return text == "b" ? drivers::FirmwareSlot::b : drivers::FirmwareSlot::a;
}

}  // namespace

Result<CheckKind> parse_check_kind(std::string_view text) {
  for (CheckKind kind : kAllKinds) {
    if (text == to_string(kind)) return kind;
  }
  return fail(Errc::invalid_argument,
              "unknown check '" + std::string(text) +
                  "'; use driver, chip_firmware, telemetry, memory, interconnect or compute");
}

const char* category_of(CheckKind kind) {
  switch (kind) {
    case CheckKind::driver: return category::software;
    case CheckKind::chip_firmware: return category::firmware;
    case CheckKind::telemetry: return category::firmware;
    case CheckKind::memory: return category::memory;
    case CheckKind::interconnect: return category::interconnect;
    case CheckKind::compute: return category::compute;
  }
  return category::software;
}

bool needs_chip(CheckKind kind) { return kind != CheckKind::driver; }

std::string reading_to_json(const CheckReading& reading) {
  json out = {{"check", std::string(to_string(reading.kind))},
              {"chip", nullptr},
              {"level", reading.level}};
  if (reading.chip) out["chip"] = *reading.chip;
  if (reading.error) {
    out["error"] = {{"code", std::string(kiln::to_string(reading.error->code))},
                    {"message", reading.error->message}};
  }
  if (reading.driver) {
    out["driver"] = {{"version", reading.driver->version},
                     {"chip_count", reading.driver->chip_count},
                     {"backend", reading.driver->backend}};
  }
  if (reading.identity) out["identity"] = identity_json(*reading.identity);
  if (reading.firmware) out["firmware"] = firmware_json(*reading.firmware);
  if (reading.telemetry) out["telemetry"] = telemetry_json(*reading.telemetry);
  if (reading.self_test) out["self_test"] = self_test_json(*reading.self_test);
  if (reading.capabilities) {
    out["capabilities"] = {{"operations", drivers::operation_bits(*reading.capabilities)},
                           {"telemetry_kinds", drivers::telemetry_bits(*reading.capabilities)}};
  }
  // Replace invalid UTF-8 from a backend's message instead of failing to print.
  return out.dump(-1, ' ', false, json::error_handler_t::replace);
}

Result<CheckReading> parse_reading_json(std::string_view text) {
  try {
    const json in = json::parse(text);
    CheckReading reading;
    auto kind = parse_check_kind(in.at("check").get<std::string>());
    if (!kind) return tl::unexpected(kind.error());
    reading.kind = *kind;
    if (!in.at("chip").is_null()) reading.chip = in.at("chip").get<std::uint32_t>();
    reading.level = in.at("level").get<std::uint32_t>();
    if (in.contains("error")) {
      const auto& e = in.at("error");
      reading.error = Error{errc_from_string(e.at("code").get<std::string>()).value_or(Errc::internal),
                            e.at("message").get<std::string>()};
    }
    if (in.contains("driver")) {
      reading.driver = DriverInfo{in["driver"].at("version").get<std::string>(),
                                  in["driver"].at("chip_count").get<std::uint32_t>(),
                                  in["driver"].value("backend", "")};
    }
    if (in.contains("capabilities")) {
      reading.capabilities = drivers::capabilities_from_bits(in["capabilities"].at("operations").get<std::uint32_t>(),
                                                             in["capabilities"].at("telemetry_kinds").get<std::uint32_t>());
    }
    if (in.contains("identity")) {
      const auto& j = in.at("identity");
      drivers::ChipIdentity id;
      id.index = j.at("index").get<std::uint32_t>();
      id.serial = j.at("serial").get<std::string>();
      id.hardware_revision = j.at("hardware_revision").get<std::string>();
      id.pci_bus_id = j.at("pci_bus_id").get<std::string>();
      id.numa_node = j.at("numa_node").get<std::int32_t>();
      id.memory_bytes = j.at("memory_bytes").get<std::uint64_t>();
      reading.identity = id;
    }
    if (in.contains("firmware")) {
      const auto& j = in.at("firmware");
      drivers::FirmwareSlots slots;
      slots.active = parse_slot(j.at("active").get<std::string>());
      if (!j.at("previous").is_null()) slots.previous = parse_slot(j.at("previous").get<std::string>());
      slots.version_a = j.at("version_a").get<std::string>();
      slots.version_b = j.at("version_b").get<std::string>();
      slots.valid_a = j.at("valid_a").get<bool>();
      slots.valid_b = j.at("valid_b").get<bool>();
      reading.firmware = slots;
    }
    if (in.contains("telemetry")) {
      const auto& j = in.at("telemetry");
      drivers::ChipTelemetry t;
      t.temperature_c = j.at("temperature_c").get<double>();
      t.power_w = j.at("power_w").get<double>();
      t.clock_mhz = j.at("clock_mhz").get<double>();
      t.memory_used_bytes = j.at("memory_used_bytes").get<std::uint64_t>();
      t.ecc_corrected = j.at("ecc_corrected").get<std::uint64_t>();
      t.ecc_uncorrected = j.at("ecc_uncorrected").get<std::uint64_t>();
      t.link_up = j.at("link_up").get<bool>();
      t.throttled = j.at("throttled").get<bool>();
      reading.telemetry = t;
    }
    if (in.contains("self_test")) {
      const auto& j = in.at("self_test");
      drivers::SelfTestResult r;
      const int kind_number = j.at("kind").get<int>();
      if (kind_number < 1 || kind_number > 3) {
        return fail(Errc::bad_message, "self-test kind " + std::to_string(kind_number) +
                                           " in a check reading is not 1, 2 or 3");
      }
      r.kind = static_cast<drivers::SelfTestKind>(kind_number);
      r.level = j.at("level").get<std::uint32_t>();
      r.passed = j.at("passed").get<bool>();
      r.errors_found = j.at("errors_found").get<std::uint64_t>();
      r.duration_s = j.at("duration_s").get<double>();
      r.memory_bandwidth_gb_per_s = j.at("memory_bandwidth_gb_per_s").get<double>();
      r.interconnect_bandwidth_gb_per_s = j.at("interconnect_bandwidth_gb_per_s").get<double>();
      r.compute_tflop_per_s = j.at("compute_tflop_per_s").get<double>();
      r.detail = j.at("detail").get<std::string>();
      reading.self_test = r;
    }
    return reading;
  } catch (const json::exception& error) {
    return fail(Errc::bad_message, std::string("a health check printed an unreadable reading (") +
                                       error.what() +
                                       "); the kiln-agent-check helper and the agent may be "
                                       "from different versions: reinstall kiln");
  }
}

Result<CheckReading> find_reading(std::string_view output) {
  const std::size_t at = output.rfind(kReadingMarker);
  if (at == std::string_view::npos || (at > 0 && output[at - 1] != '\n')) {
    return fail(Errc::bad_message, "the health check printed no reading");
  }
  std::string_view line = output.substr(at + kReadingMarker.size());
  line = line.substr(0, line.find('\n'));
  return parse_reading_json(line);
}

CheckReading take_reading(const std::string& driver_library, const std::string& driver_options,
                          CheckKind kind, std::optional<std::uint32_t> chip,
                          std::uint32_t level) {
  CheckReading reading;
  reading.kind = kind;
  reading.chip = chip;
  reading.level = level;
  auto failed = [&](const Error& error) {
    reading.error = error;
    return reading;
  };

  auto driver = drivers::Driver::load(driver_library, driver_options);
  if (!driver) return failed(driver.error());
  drivers::Driver& d = **driver;
  auto capabilities = d.capabilities();
  if (!capabilities) return failed(capabilities.error());
  reading.capabilities = *capabilities;
  if (kind == CheckKind::driver) {
    auto version = d.driver_version();
    if (!version) return failed(version.error());
    auto count = d.chip_count();
    if (!count) return failed(count.error());
    // A backend built before backend_kind declares nothing: its kind stays unknown.
    auto backend = d.backend_kind();
    reading.driver = DriverInfo{*version, *count, backend ? *backend : std::string()};
    return reading;
  }
  KILN_ASSERT(chip.has_value(), "chip checks are always given a chip");
  auto identity = d.chip_identity(*chip);
  if (!identity) return failed(identity.error());
  reading.identity = *identity;
  switch (kind) {
    case CheckKind::chip_firmware: {
      if (!capabilities->firmware_slots) break;  // a backend without firmware (the CPU's)
      auto slots = d.firmware_slots(*chip);
      if (!slots) return failed(slots.error());
      reading.firmware = *slots;
      break;
    }
    case CheckKind::telemetry: {
      auto telemetry = d.chip_telemetry(*chip);
      if (!telemetry) return failed(telemetry.error());
      reading.telemetry = *telemetry;
      break;
    }
    case CheckKind::memory:
    case CheckKind::interconnect:
    case CheckKind::compute: {
      const auto test_kind = kind == CheckKind::memory         ? drivers::SelfTestKind::memory
                             : kind == CheckKind::interconnect ? drivers::SelfTestKind::interconnect
                                                               : drivers::SelfTestKind::compute;
      auto result = d.run_self_test(*chip, test_kind, level);
      if (!result) return failed(result.error());
      reading.self_test = *result;
      break;
    }
    case CheckKind::driver: break;
  }
  return reading;
}

}  // namespace kiln::agent::health

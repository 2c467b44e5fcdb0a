// Health on a backend that declares what it has (drivers/kiln_driver.h capabilities): the CPU
// node's host, a chip without firmware, and a node with no healthy chip (docs/health.md).
#include <doctest/doctest.h>

#include "agent/health/diagnostics.h"
#include "agent/health/evaluate.h"
#include "drivers/kiln_driver.h"
#include "tests/support/driver_support.h"
#include "tests/support/health_support.h"

namespace kiln::agent::health {
namespace {

using testing::SimNodeFixture;

const CheckResult& result_of(const std::vector<CheckResult>& results, const std::string& check) {
  for (const auto& result : results) {
    if (result.check == check) return result;
  }
  FAIL("no result for check " << check);
  return results.front();
}

drivers::DriverCapabilities cpu_host() {
  return drivers::capabilities_from_bits(0, KILN_TELEMETRY_TEMPERATURE | KILN_TELEMETRY_MEMORY);
}

TEST_CASE("telemetry a backend does not read is unknown, not a failure; what it reads is judged") {
  const HealthTargets targets = default_health_targets();
  drivers::ChipTelemetry host;  // no links, no ECC, no power: all zero, and not read
  host.temperature_c = 57;
  host.throttled = true;  // not declared: means nothing
  auto results = evaluate_telemetry(0, host, targets.find("cpu"), cpu_host());
  for (const char* unread : {"ecc", "link", "power"}) {
    CAPTURE(unread);
    CHECK(result_of(results, unread).status == CheckStatus::skip);
    CHECK(result_of(results, unread).reason_code == "not_reported_by_backend");
  }
  CHECK(result_of(results, "thermal").status == CheckStatus::pass);
  CHECK(result_of(results, "thermal").measured.count("throttled") == 0);

  host.temperature_c = 101;
  results = evaluate_telemetry(0, host, targets.find("cpu"), cpu_host());
  CHECK(result_of(results, "thermal").reason_code == "temperature_critical");

  // The same reading from a backend that declares everything (every backend before
  // capabilities): the link is down and that fails.
  results = evaluate_telemetry(0, host, targets.find("cpu"));
  CHECK(result_of(results, "link").reason_code == "link_down");
  CHECK(result_of(results, "thermal").reason_code == "thermal_throttling");
}

TEST_CASE("a chip of a backend without firmware passes chip_firmware, and survives the helper's JSON") {
  CheckReading reading;
  reading.kind = CheckKind::chip_firmware;
  reading.chip = 0;
  reading.identity = drivers::ChipIdentity{0, "cpu-host", "cpu", "", -1, 0};
  reading.capabilities = cpu_host();
  auto parsed = parse_reading_json(reading_to_json(reading));
  REQUIRE(parsed);
  REQUIRE(parsed->capabilities.has_value());
  CHECK_FALSE(parsed->capabilities->firmware_slots);
  CHECK(parsed->capabilities->temperature);
  const auto results = evaluate_reading(*parsed, default_health_targets(), std::nullopt);
  REQUIRE(results.size() == 1);
  CHECK(results[0].status == CheckStatus::pass);
  CHECK(results[0].message.find("has no firmware") != std::string::npos);
  CHECK(evaluate_firmware_consistency(results).status == CheckStatus::pass);

  // A reading from a helper before capabilities carries none.
  reading.capabilities.reset();
  CHECK_FALSE(parse_reading_json(reading_to_json(reading))->capabilities.has_value());
}

TEST_CASE("a node whose every chip is unhealthy fails its probe, and so is not schedulable") {
  const auto none = evaluate_no_healthy_chip(2, {0, 1});
  REQUIRE(none.has_value());
  CHECK(none->status == CheckStatus::fail);
  CHECK(none->reason_code == "no_healthy_chip");
  CHECK(none->recommended_action.find("restart the agent") != std::string::npos);
  CHECK_FALSE(evaluate_no_healthy_chip(2, {1}).has_value());
  CHECK_FALSE(evaluate_no_healthy_chip(0, {}).has_value());

  // Through the real probe: both chips reported unhealthy at start-up.
  SimNodeFixture node(2);
  auto options = node.diag_options();
  options.unprobed_chips = {0, 1};
  auto probes = run_probes(node.config(), options);
  REQUIRE(probes);
  CHECK(result_of(*probes, "chips_healthy").status == CheckStatus::fail);
  CHECK(verdict(*probes) == CheckStatus::fail);
  options.unprobed_chips = {1};
  probes = run_probes(node.config(), options);
  REQUIRE(probes);
  for (const auto& result : *probes) CHECK(result.check != "chips_healthy");
}

TEST_CASE("a CPU node's host: cores online and memory available, unknown where the host lacks them") {
  drivers::cpu::HostReadings host;
  host.cores_online = 3;
  host.cores_present = 4;
  host.memory_total_bytes = 100ull << 30;
  host.memory_available_bytes = 50ull << 30;
  auto results = evaluate_host(host);
  CHECK(result_of(results, "cores_online").reason_code == "cores_offline");
  CHECK(result_of(results, "cores_online").measured.at("cores_online") == 3);
  CHECK(result_of(results, "memory_available").status == CheckStatus::pass);

  host.cores_online = 4;
  host.memory_available_bytes = 5ull << 30;
  results = evaluate_host(host);
  CHECK(result_of(results, "cores_online").status == CheckStatus::pass);
  CHECK(result_of(results, "memory_available").reason_code == "memory_low");
  host.memory_available_bytes = 1ull << 30;
  CHECK(result_of(evaluate_host(host), "memory_available").reason_code == "memory_exhausted");

  results = evaluate_host(drivers::cpu::HostReadings{});
  CHECK(result_of(results, "cores_online").status == CheckStatus::skip);
  CHECK(result_of(results, "memory_available").reason_code == "not_reported_by_host");
}

TEST_CASE("the CPU backend's probe on this host: a driver, a chip and the host, nothing failing for what it lacks") {
  SimNodeFixture sim(1);  // for the helper and the work dir
  auto config = sim.config();
  config.driver_library_path = drivers::testing::cpu_library();
  config.driver_options = "";
  auto options = sim.diag_options();
  options.targets.expected_chip_count = 1;
  auto probes = run_probes(config, options);
  REQUIRE(probes);
  CHECK(result_of(*probes, "driver").attributes.at("backend") == "cpu");
  CHECK(result_of(*probes, "ecc").reason_code == "not_reported_by_backend");
  CHECK(result_of(*probes, "memory_available").status != CheckStatus::skip);  // Linux has /proc/meminfo
  CHECK(result_of(*probes, "cores_online").status != CheckStatus::fail);
}

}  // namespace
}  // namespace kiln::agent::health

#include "agent/health/diagnostics.h"

#include <chrono>
#include <sstream>

#include <doctest/doctest.h>

#include "tests/support/health_support.h"

namespace kiln::agent::health {
namespace {

using testing::SimNodeFixture;

std::vector<const CheckResult*> matching(const std::vector<CheckResult>& results,
                                         const std::string& check,
                                         std::optional<std::uint32_t> chip) {
  std::vector<const CheckResult*> out;
  for (const auto& result : results) {
    if (result.check == check && result.chip == chip) out.push_back(&result);
  }
  return out;
}

const CheckResult& one(const std::vector<CheckResult>& results, const std::string& check,
                       std::optional<std::uint32_t> chip = std::nullopt) {
  const auto found = matching(results, check, chip);
  REQUIRE_MESSAGE(found.size() == 1, "expected one " << check << " result");
  return *found.front();
}

DiagReport diagnose(SimNodeFixture& node, int level) {
  auto report = run_diagnostics(node.config(), level, node.diag_options());
  REQUIRE_MESSAGE(report, (report ? "" : report.error().describe()));
  return *report;
}

std::string failures(const DiagReport& report) {
  std::string out;
  for (const auto& r : report.results) {
    if (r.status != CheckStatus::pass) out += r.check + ": " + r.message + "\n";
  }
  return out;
}

TEST_CASE("a healthy node passes every level, with each chip's checks present") {
  SimNodeFixture node(2);
  const auto report = diagnose(node, 3);
  CHECK_MESSAGE(report.verdict == CheckStatus::pass, failures(report));
  CHECK(report.level == 3);
  CHECK(report.node == "n07");
  CHECK(report.revision == "a");
  CHECK(report.finished_at_ms >= report.started_at_ms);
  for (const char* node_check : {"driver", "chip_count", "workloads", "firmware_consistency",
                                 "revision_consistency"}) {
    CHECK(one(report.results, node_check).status == CheckStatus::pass);
  }
  for (std::uint32_t chip = 0; chip < 2; ++chip) {
    for (const char* check : {"chip_firmware", "ecc", "thermal", "link", "power", "memory",
                              "interconnect", "compute"}) {
      CHECK(one(report.results, check, chip).status == CheckStatus::pass);
    }
    CHECK(one(report.results, "chip_firmware", chip).attributes.at("firmware_version") == "1.0.0");
    CHECK(one(report.results, "compute", chip).measured.at("self_test_level") == 3);
  }
}

TEST_CASE("levels add checks: level 1 runs no self-test, level 2 no compute stress") {
  SimNodeFixture node(1);
  const auto level1 = diagnose(node, 1);
  CHECK(matching(level1.results, "memory", 0u).empty());
  CHECK(matching(level1.results, "ecc", 0u).size() == 1);
  const auto level2 = diagnose(node, 2);
  CHECK(matching(level2.results, "memory", 0u).size() == 1);
  CHECK(matching(level2.results, "interconnect", 0u).size() == 1);
  CHECK(matching(level2.results, "compute", 0u).empty());
}

TEST_CASE("ecc_storm: the probe fails on uncorrected ECC, level 2 on memory errors") {
  SimNodeFixture node(2);
  node.inject(1, "ecc_storm");
  const auto report = diagnose(node, 2);
  CHECK(report.verdict == CheckStatus::fail);
  const auto& ecc = one(report.results, "ecc", 1u);
  CHECK(ecc.status == CheckStatus::fail);
  CHECK(ecc.reason_code == "ecc_uncorrected");
  CHECK(ecc.recommended_action == "drain and run level 3 diagnostics");
  CHECK(one(report.results, "memory", 1u).reason_code == "memory_errors");
  CHECK(one(report.results, "ecc", 0u).status == CheckStatus::pass);
  CHECK(one(report.results, "memory", 0u).status == CheckStatus::pass);
}

TEST_CASE("thermal_throttle fails the thermal check and the compute stress") {
  SimNodeFixture node(2);
  node.inject(0, "thermal_throttle");
  const auto report = diagnose(node, 3);
  const auto& thermal = one(report.results, "thermal", 0u);
  CHECK(thermal.status == CheckStatus::fail);
  CHECK(thermal.reason_code == "thermal_throttling");
  CHECK(thermal.measured.at("temperature_c") > 90);
  CHECK(one(report.results, "compute", 0u).reason_code == "compute_below_target");
  CHECK(one(report.results, "thermal", 1u).status == CheckStatus::pass);
}

TEST_CASE("link_down fails the link probe and the interconnect self-test") {
  SimNodeFixture node(2);
  node.inject(1, "link_down");
  const auto report = diagnose(node, 2);
  CHECK(one(report.results, "link", 1u).reason_code == "link_down");
  CHECK(one(report.results, "interconnect", 1u).status == CheckStatus::fail);
  CHECK(one(report.results, "interconnect", 1u).reason_code == "interconnect_failed");
  CHECK(one(report.results, "link", 0u).status == CheckStatus::pass);
}

TEST_CASE("a slow chip passes the probes but fails, or warns, its self-tests") {
  SimNodeFixture node(2);
  node.inject(0, "slow", 0.5);
  node.inject(1, "slow", 0.9);
  const auto report = diagnose(node, 3);
  CHECK(one(report.results, "thermal", 0u).status == CheckStatus::pass);
  CHECK(one(report.results, "memory", 0u).status == CheckStatus::fail);
  CHECK(one(report.results, "memory", 0u).reason_code == "memory_bandwidth_low");
  CHECK(one(report.results, "compute", 0u).status == CheckStatus::fail);
  CHECK(one(report.results, "compute", 1u).status == CheckStatus::warn);
  CHECK(one(report.results, "compute", 1u).reason_code == "compute_below_target");
}

TEST_CASE("silent data corruption is caught by the level 3 stress only") {
  SimNodeFixture node(1);
  node.inject(0, "sdc", 0.01);
  const auto level2 = diagnose(node, 2);
  CHECK(level2.verdict == CheckStatus::pass);
  const auto level3 = diagnose(node, 3);
  CHECK(level3.verdict == CheckStatus::fail);
  const auto& compute = one(level3.results, "compute", 0u);
  CHECK(compute.reason_code == "compute_errors");
  CHECK(compute.category == "compute");
  CHECK(compute.measured.at("errors_found") == 11);
}

TEST_CASE("a hung chip times out within its deadline and never hangs the caller") {
  SimNodeFixture node(2);
  node.inject(1, "hang");
  auto options = node.diag_options();
  options.quick_check_timeout_ms = 800;
  const auto started = std::chrono::steady_clock::now();
  auto report = run_diagnostics(node.config(), 2, options);
  const auto took = std::chrono::steady_clock::now() - started;
  REQUIRE(report);
  // One deadline for the first check on the hung chip; the rest of its checks are skipped.
  CHECK(took < std::chrono::seconds(4));
  CHECK(report->verdict == CheckStatus::fail);
  const auto& firmware = one(report->results, "chip_firmware", 1u);
  CHECK(firmware.status == CheckStatus::fail);
  CHECK(firmware.reason_code == "check_timed_out");
  CHECK(firmware.category == "firmware");
  CHECK(firmware.recommended_action ==
        "reset the chip; if it stays wedged, drain the node for the lab");
  for (const char* check : {"telemetry", "memory", "interconnect"}) {
    const auto& skipped = one(report->results, check, 1u);
    CHECK(skipped.status == CheckStatus::skip);
    CHECK(skipped.reason_code == "chip_unresponsive");
  }
  CHECK(one(report->results, "memory", 0u).status == CheckStatus::pass);
  CHECK(one(report->results, "firmware_consistency").status == CheckStatus::pass);
}

TEST_CASE("a hung chip fails the periodic probe with check_timed_out") {
  SimNodeFixture node(2);
  node.inject(0, "hang");
  auto options = node.diag_options();
  options.quick_check_timeout_ms = 500;
  auto probes = run_probes(node.config(), options);
  REQUIRE(probes);
  const auto& telemetry = one(*probes, "telemetry", 0u);
  CHECK(telemetry.status == CheckStatus::fail);
  CHECK(telemetry.reason_code == "check_timed_out");
  CHECK(telemetry.measured.at("deadline_s") == doctest::Approx(0.5));
  CHECK(one(*probes, "ecc", 1u).status == CheckStatus::pass);
}

TEST_CASE("chips on different firmware fail the consistency check") {
  SimNodeFixture node(2);
  const auto image = node.dir().write("fw-1.1.0.bin", "image bytes");
  REQUIRE(node.driver().flash_standby(1, image, "1.1.0"));
  REQUIRE(node.driver().activate_standby(1));
  const auto report = diagnose(node, 1);
  const auto& consistency = one(report.results, "firmware_consistency");
  CHECK(consistency.status == CheckStatus::fail);
  CHECK(consistency.reason_code == "firmware_mismatch");
  CHECK(consistency.message.find("1.1.0 on chip 1") != std::string::npos);
}

TEST_CASE("a missing driver fails the driver check and skips the chips") {
  SimNodeFixture node(1);
  auto config = node.config();
  config.driver_library_path = "/nonexistent/libkiln_driver.so";
  auto report = run_diagnostics(config, 2, node.diag_options());
  REQUIRE(report);
  CHECK(report->verdict == CheckStatus::fail);
  CHECK(one(report->results, "driver").reason_code == "driver_missing");
  CHECK(one(report->results, "chip_count").status == CheckStatus::skip);
  CHECK(matching(report->results, "memory", 0u).empty());
}

TEST_CASE("a driver that refuses its options fails the driver check, not the helper") {
  SimNodeFixture node(1);
  auto config = node.config();
  config.driver_options = "";  // the sim needs a state_dir
  auto report = run_diagnostics(config, 1, node.diag_options());
  REQUIRE(report);
  const auto& driver = one(report->results, "driver");
  CHECK(driver.reason_code == "driver_load_failed");
  CHECK(driver.message.find("state_dir") != std::string::npos);
}

TEST_CASE("a chip count other than expected fails") {
  SimNodeFixture node(2);
  auto options = node.diag_options();
  options.targets.expected_chip_count = 8;
  auto report = run_diagnostics(node.config(), 1, options);
  REQUIRE(report);
  CHECK(one(report->results, "chip_count").reason_code == "chip_count_mismatch");
}

TEST_CASE("a revision override chooses the targets") {
  SimNodeFixture node(1);  // revision a chips measured against b's targets
  auto config = node.config();
  config.hardware_revision_override = "b";
  auto report = run_diagnostics(config, 2, node.diag_options());
  REQUIRE(report);
  CHECK(report->revision == "b");
  CHECK(one(report->results, "memory", 0u).reason_code == "memory_bandwidth_low");
}

TEST_CASE("probes: driver plus ecc, thermal, link and power per chip") {
  SimNodeFixture node(2);
  node.inject(0, "link_down");
  auto results = run_probes(node.config(), node.diag_options());
  REQUIRE(results);
  CHECK(results->size() == 1 + 2 * 4);
  CHECK(one(*results, "driver").status == CheckStatus::pass);
  CHECK(one(*results, "link", 0u).status == CheckStatus::fail);
  CHECK(verdict(*results) == CheckStatus::fail);
}

TEST_CASE("diagnostics refuse a bad level or a missing helper") {
  SimNodeFixture node(1);
  auto bad_level = run_diagnostics(node.config(), 4, node.diag_options());
  REQUIRE_FALSE(bad_level);
  CHECK(bad_level.error().code == Errc::invalid_argument);
  auto options = node.diag_options();
  options.check_program = "/nonexistent/kiln-agent-check";
  auto missing = run_diagnostics(node.config(), 1, options);
  REQUIRE_FALSE(missing);
  CHECK(missing.error().message.find("/nonexistent/kiln-agent-check") != std::string::npos);
}

TEST_CASE("the diag command prints text or JSON and its exit code is the verdict") {
  SimNodeFixture node(2);
  // run_diag_command reads the targets beside agent.toml and finds the helper beside the
  // running executable (the test runs from the same bin/ folder).
  node.dir().write("health-targets.toml", "expected_chip_count = 2\n");
  std::ostringstream out;
  std::ostringstream err;
  CHECK(run_diag_command(node.config(), 1, false, out, err) == 0);
  CHECK(out.str().find("kiln diagnostics level 1 on node n07, revision a: PASS") !=
        std::string::npos);

  node.inject(0, "ecc_storm");
  std::ostringstream json_out;
  CHECK(run_diag_command(node.config(), 1, true, json_out, err) == 1);
  auto json = json_out.str();
  CHECK(json.find("\"verdict\": \"fail\"") != std::string::npos);
  CHECK(json.find("\"reason_code\": \"ecc_uncorrected\"") != std::string::npos);

  std::ostringstream text_out;
  CHECK(run_diag_command(node.config(), 1, false, text_out, err) == 1);
  CHECK(text_out.str().find("action: drain and run level 3 diagnostics") != std::string::npos);

  std::ostringstream bad_err;
  CHECK(run_diag_command(node.config(), 0, false, out, bad_err) == 2);
  CHECK(bad_err.str().find("level 0") != std::string::npos);
}

}  // namespace
}  // namespace kiln::agent::health

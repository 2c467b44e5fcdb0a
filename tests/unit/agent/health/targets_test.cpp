#include "agent/health/targets.h"

#include <doctest/doctest.h>

#include "sim/chip/model.h"
#include "tests/support/health_support.h"

namespace kiln::agent::health {
namespace {

TEST_CASE("default targets are the sim's nominal figures for revisions a and b") {
  const auto targets = default_health_targets();
  for (auto revision : {sim::Revision::a, sim::Revision::b}) {
    const auto& nominal = sim::profile(revision);
    const auto* t = targets.find(sim::to_string(revision));
    REQUIRE(t != nullptr);
    CHECK(t->memory_bandwidth_gb_per_s == nominal.memory_bandwidth_gb_per_s);
    CHECK(t->interconnect_bandwidth_gb_per_s == nominal.interconnect_bandwidth_gb_per_s);
    CHECK(t->compute_tflop_per_s == nominal.compute_tflop_per_s);
    // A healthy loaded chip stays under the limits; a throttling one does not.
    CHECK(t->warn_temperature_c > nominal.loaded_temperature_c);
    CHECK(t->warn_temperature_c < sim::kThrottleTemperatureC);
    CHECK(t->max_power_w > nominal.loaded_power_w * 1.03);
  }
  CHECK(targets.expected_chip_count == 8);
  CHECK(targets.find("c") == nullptr);
}

TEST_CASE("a targets file overrides single figures and adds revisions") {
  auto targets = parse_health_targets(R"(
expected_chip_count = 4
warn_below_fraction = 0.9
fail_below_fraction = 0.8

[revision.a]
compute_tflop_per_s = 200
warn_ecc_corrected = 10

[revision.c]
memory_bandwidth_gb_per_s = 3200
interconnect_bandwidth_gb_per_s = 600
compute_tflop_per_s = 500
warn_temperature_c = 80
fail_temperature_c = 90
max_power_w = 700
warn_ecc_corrected = 50
)",
                                      "health-targets.toml");
  REQUIRE_MESSAGE(targets, (targets ? "" : targets.error().message));
  CHECK(targets->expected_chip_count == 4);
  CHECK(targets->warn_below_fraction == 0.9);
  CHECK(targets->find("a")->compute_tflop_per_s == 200);
  CHECK(targets->find("a")->memory_bandwidth_gb_per_s == 1600);  // untouched default
  CHECK(targets->find("a")->warn_ecc_corrected == 10);
  CHECK(targets->find("b")->compute_tflop_per_s == 310);
  REQUIRE(targets->find("c") != nullptr);
  CHECK(targets->find("c")->compute_tflop_per_s == 500);
  CHECK(targets->find("c")->fail_ecc_uncorrected == 1);
}

TEST_CASE("a targets file with mistakes is refused, every mistake with its line") {
  auto targets = parse_health_targets(R"(
expected_chip_count = -1
[revision.a]
compute_tflops = 200
warn_temperature_c = 99
[revision.c]
compute_tflop_per_s = 500
)",
                                      "t.toml");
  REQUIRE_FALSE(targets);
  CHECK(targets.error().code == Errc::config);
  const auto& message = targets.error().message;
  CHECK(message.find("t.toml:2:") != std::string::npos);
  CHECK(message.find("unknown key 'compute_tflops'") != std::string::npos);
  CHECK(message.find("fail_temperature_c must be above warn_temperature_c") != std::string::npos);
  CHECK(message.find("new revision: give 'memory_bandwidth_gb_per_s'") != std::string::npos);
}

TEST_CASE("fractions must leave fail below warn, and the syntax must be TOML") {
  auto inverted = parse_health_targets("warn_below_fraction = 0.8\nfail_below_fraction = 0.9\n", "t");
  REQUIRE_FALSE(inverted);
  CHECK(inverted.error().message.find("fail_below_fraction must be below") != std::string::npos);
  auto broken = parse_health_targets("[revision.a\n", "t.toml");
  REQUIRE_FALSE(broken);
  CHECK(broken.error().message.find("t.toml:1") != std::string::npos);
}

TEST_CASE("a count given as a float, even one too large for an integer, is refused, not converted") {
  // Found by fuzzing: toml++ converted 5.6e23 to an integer, which is undefined behaviour.
  auto huge = parse_health_targets("\nexpected_chip_count = 555555555555555555555550.0", "t.toml");
  REQUIRE_FALSE(huge);
  CHECK(huge.error().message.find("t.toml:2:") != std::string::npos);
  CHECK(huge.error().message.find("'expected_chip_count' must be a whole number >= 0") != std::string::npos);
  CHECK_FALSE(parse_health_targets("expected_chip_count = 8.0\n", "t.toml"));
}

TEST_CASE("loading a missing targets file says which") {
  auto targets = load_health_targets("/nonexistent/health-targets.toml");
  REQUIRE_FALSE(targets);
  CHECK(targets.error().code == Errc::not_found);
  CHECK(targets.error().message.find("/nonexistent/health-targets.toml") != std::string::npos);
}

TEST_CASE("default diag options read health-targets.toml beside agent.toml") {
  testing::TempDir dir;
  dir.write("health-targets.toml", "expected_chip_count = 2\n");
  AgentConfig config;
  config.config_path = dir.file("agent.toml");
  config.knobs.probe_timeout_ms = 7000;
  auto options = default_diag_options(config);
  REQUIRE(options);
  CHECK(options->targets.expected_chip_count == 2);
  CHECK(options->quick_check_timeout_ms == 7000);

  dir.write("health-targets.toml", "nonsense = 1\n");
  CHECK_FALSE(default_diag_options(config));
}

}  // namespace
}  // namespace kiln::agent::health

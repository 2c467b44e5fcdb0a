#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "common/stability/criteria.h"

namespace kiln::stability {

TEST_CASE("stability.toml: every key read, left-out keys keep their defaults") {
  auto c = parse_criteria_toml(R"(
[run]
time_scale = 600
confidence = 0.9
[loss_spike]
band_relative = 2.5
window_steps = 20
smoothing_steps = 3
[hang]
minutes = 15
[throughput_decay]
window_minutes = 5
max_drop = 0.2
[device_errors]
ecc_uncorrected_max = 3
link_down = false
)",
                               "stability.toml");
  REQUIRE(c);
  CHECK(c->time_scale == 600);
  CHECK(c->confidence == 0.9);
  CHECK(c->loss_spike_band_relative == 2.5);
  CHECK(c->loss_spike_window_steps == 20);
  CHECK(c->loss_spike_smoothing_steps == 3);
  CHECK(c->hang_minutes == 15);
  CHECK(c->decay_window_minutes == 5);
  CHECK(c->decay_max_drop == 0.2);
  CHECK(c->ecc_uncorrected_max == 3);
  CHECK_FALSE(c->link_down_fails);

  auto defaults = parse_criteria_toml("[hang]\nminutes = 45\n", "s.toml");
  REQUIRE(defaults);
  CHECK(defaults->hang_minutes == 45);
  CHECK(defaults->decay_max_drop == StabilityCriteria{}.decay_max_drop);
}

TEST_CASE("stability.toml: mistakes name the place and what to do") {
  auto typo = parse_criteria_toml("[hang]\nminuts = 5\n", "s.toml");
  REQUIRE_FALSE(typo);
  CHECK(typo.error().message.find("s.toml:2") != std::string::npos);
  CHECK(typo.error().message.find("minutes") != std::string::npos);

  auto table = parse_criteria_toml("[hangs]\nminutes = 5\n", "s.toml");
  REQUIRE_FALSE(table);
  CHECK(table.error().message.find("hang") != std::string::npos);

  auto range = parse_criteria_toml("[throughput_decay]\nmax_drop = 1.5\n", "s.toml");
  REQUIRE_FALSE(range);
  CHECK(range.error().message.find("throughput_decay.max_drop") != std::string::npos);
  CHECK(range.error().message.find("(0, 1)") != std::string::npos);

  auto type = parse_criteria_toml("[device_errors]\nlink_down = 1\n", "s.toml");
  REQUIRE_FALSE(type);
  CHECK(type.error().message.find("true or false") != std::string::npos);

  auto negative = parse_criteria_toml("[loss_spike]\nwindow_steps = -3\n", "s.toml");
  REQUIRE_FALSE(negative);
  CHECK(negative.error().message.find("whole number") != std::string::npos);
}

TEST_CASE("the criteria travel as JSON unchanged, and are checked on arrival") {
  StabilityCriteria c;
  c.time_scale = 3600;
  c.hang_minutes = 12.5;
  c.ecc_uncorrected_max = 2;
  c.link_down_fails = false;
  auto back = criteria_from_json(criteria_to_json(c));
  REQUIRE(back);
  CHECK(back->time_scale == 3600);
  CHECK(back->hang_minutes == 12.5);
  CHECK(back->ecc_uncorrected_max == 2);
  CHECK_FALSE(back->link_down_fails);

  nlohmann::json broken = criteria_to_json(c);
  broken["run"]["time_scale"] = -1;
  CHECK_FALSE(criteria_from_json(broken));
  broken = criteria_to_json(c);
  broken["hang"].erase("minutes");
  auto missing = criteria_from_json(broken);
  REQUIRE_FALSE(missing);
  CHECK(missing.error().message.find("hang.minutes") != std::string::npos);
}

}  // namespace kiln::stability

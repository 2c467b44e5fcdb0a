#include <doctest/doctest.h>

#include "coordinator/scheduler/knobs.h"

using namespace kiln;
using namespace kiln::scheduler;

TEST_CASE("scheduler knobs default when the table is absent") {
  auto knobs = parse_scheduler_knobs_toml("[other]\nx = 1\n");
  REQUIRE(knobs);
  CHECK(knobs->policy == Policy::kiln);
  CHECK(knobs->grace_ms == 5 * kMinuteMs);
  CHECK(!knobs->quota(RequestClass::experiment, "a"));
}

TEST_CASE("scheduler knobs parse quotas, targets and borrowing") {
  auto knobs = parse_scheduler_knobs_toml(R"(
[scheduler]
policy = "strict_priority"
grace_ms = 120000
lease_slack = 2.0
[scheduler.target_start_latency_ms]
presubmit = 60000
nightly = -1
[scheduler.may_borrow]
experiment = false
[scheduler.quota_chips.experiment]
a = 56
b = 24
)");
  REQUIRE(knobs);
  CHECK(knobs->policy == Policy::strict_priority);
  CHECK(knobs->grace_ms == 120000);
  CHECK(knobs->lease_slack == doctest::Approx(2.0));
  CHECK(knobs->target_start_latency_ms[rank(RequestClass::presubmit)] == 60000);
  CHECK(!knobs->target_start_latency_ms[rank(RequestClass::nightly)]);
  CHECK(!knobs->may_borrow[rank(RequestClass::experiment)]);
  CHECK(knobs->quota(RequestClass::experiment, "a") == 56);
  CHECK(knobs->quota(RequestClass::experiment, "b") == 24);
}

TEST_CASE("bad scheduler knobs are errors that name the key") {
  auto unknown = parse_scheduler_knobs_toml("[scheduler]\ngrace_minutes = 5\n");
  REQUIRE(!unknown);
  CHECK(unknown.error().code == Errc::config);
  CHECK(unknown.error().message.find("grace_minutes") != std::string::npos);

  auto bad_class = parse_scheduler_knobs_toml("[scheduler.quota_chips.devs]\na = 1\n");
  REQUIRE(!bad_class);
  CHECK(bad_class.error().message.find("unknown class 'devs'") != std::string::npos);

  auto negative = parse_scheduler_knobs_toml("[scheduler]\ngrace_ms = -5\n");
  REQUIRE(!negative);

  auto syntax = parse_scheduler_knobs_toml("[scheduler\n");
  REQUIRE(!syntax);
  CHECK(syntax.error().message.find("not valid TOML") != std::string::npos);

  auto missing = load_scheduler_knobs("/nonexistent/coordinator.toml");
  REQUIRE(!missing);
  CHECK(missing.error().code == Errc::io);
}

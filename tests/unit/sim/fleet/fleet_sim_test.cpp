#include <filesystem>

#include <doctest/doctest.h>

#include "coordinator/scheduler/knobs.h"
#include "sim/fleet/fleet_sim.h"

using namespace kiln;
using namespace kiln::fleet;

namespace {

// A few busy hours on a small pool: every kind of work, and nodes that fail every few hours so
// leases are lost and requeued while the invariants are checked after every step.
constexpr const char* kShortDay = R"(
[pool]
revisions = [ { name = "a", nodes = 4, chips_per_node = 8 }, { name = "b", nodes = 3, chips_per_node = 8 } ]
node_mtbf_hours = 3
node_repair_minutes = 30
[changes]
per_day = 60
hardware_path = 40
workday_share = 0.9
layers = ["kernels"]
workday = ["01:00", "03:00"]
[presubmit]
models = 4
chips_per_model = 1
minutes_per_model = 8
target_p90_minutes = 45
[nightly]
start = "00:00"
deadline = "02:30"
small = { count = 10, chips = 1, minutes = 10 }
large = { count = 2, chips = 16, minutes = 30 }
[release]
start = "02:00"
nodes_per_revision = 1
minutes = 90
[experiments]
window = ["00:30", "03:00"]
arrivals_per_hour = 8
sizes = [ { chips = 2, share = 0.3 }, { chips = 8, share = 0.4 }, { chips = 16, share = 0.3 } ]
median_minutes = 40
sigma = 0.6
checkpoint_every_minutes = 15
grace_minutes = 5
[bisect]
candidate_changes = 16
chips_per_step = 8
minutes_per_step = 10
)";

}  // namespace

TEST_CASE("a short fleet run keeps every invariant under every policy and finishes all work") {
  auto scenario = parse_scenario_toml(kShortDay, "short-day");
  REQUIRE_MESSAGE(scenario, scenario.error().describe());
  std::size_t failures = 0;
  for (std::uint64_t seed : {1u, 2u, 3u}) {
    for (auto policy : {scheduler::Policy::kiln, scheduler::Policy::fifo,
                        scheduler::Policy::strict_priority}) {
      scheduler::SchedulerKnobs knobs = knobs_for(*scenario, {});
      knobs.policy = policy;
      FleetOptions options;
      options.seed = seed;
      options.day_ms = 4 * kHourMs;
      options.drain_limit_ms = 24 * kHourMs;
      auto report = run_fleet(*scenario, knobs, options);
      REQUIRE_MESSAGE(report, report.error().describe());
      CAPTURE(seed);
      CAPTURE(report->policy);
      CHECK(report->unfinished_requests == 0);
      // The unit tier (5% by default) keeps some hardware-path changes from ever asking for a chip.
      CHECK(report->presubmit_changes + report->unit_rejected_changes == 40);
      CHECK(report->presubmit_signal.count == report->presubmit_changes);
      CHECK(report->unit_tier_changes == 60);
      CHECK(report->experiments_started == report->experiments);
      CHECK(report->bisect_minutes.has_value());
      failures += report->node_failures;
      for (const RevisionReport& rev : report->revisions) {
        CHECK(rev.nightly_makespan_minutes.has_value());
        CHECK(rev.release_start_delay_minutes.has_value());
        CHECK(rev.utilization > 0.0);
        CHECK(rev.utilization <= 1.0);
      }
    }
  }
  CHECK(failures > 0);  // the run did exercise lost leases
}

TEST_CASE("the unit tier runs before the smoke: rejected changes take no chip, the others wait for it") {
  auto base = parse_scenario_toml(kShortDay, "short-day");
  REQUIRE(base);
  FleetOptions options;
  options.seed = 3;
  options.day_ms = 4 * kHourMs;
  auto run = [&](double reject_share, double minutes) {
    Scenario s = *base;
    s.unit_reject_share = reject_share;
    s.unit_duration_ms = static_cast<DurationMs>(minutes * kMinuteMs);
    auto report = run_fleet(s, knobs_for(s, {}), options);
    REQUIRE_MESSAGE(report, report.error().describe());
    return *report;
  };
  const PolicyReport none = run(0.0, 0.0);
  CHECK(none.unit_rejected_changes == 0);
  CHECK(none.presubmit_changes == 40);
  CHECK(none.unit_chip_hours_saved == 0.0);
  const PolicyReport half = run(0.5, 0.0);
  CHECK(half.unit_rejected_changes > 10);
  CHECK(half.unit_rejected_changes < 30);
  CHECK(half.presubmit_changes == 40 - half.unit_rejected_changes);
  // Each rejected change saves its smoke: 4 one-chip models of 8 minutes on 2 revisions.
  CHECK(half.unit_chip_hours_saved == doctest::Approx(static_cast<double>(half.unit_rejected_changes) * 8 * 8 / 60.0));
  const PolicyReport slow = run(0.0, 30.0);
  // Shifted by the 30 minutes, give or take how the shifted requests queue.
  CHECK(slow.presubmit_signal.p50_minutes >= none.presubmit_signal.p50_minutes + 25.0);
  CHECK(slow.unit_cpu_hours == doctest::Approx(60 * 2 * 0.5));

  std::string bad = kShortDay;
  bad += "[unit]\nminutes = 2\nreject_share = 1.5\n";
  auto refused = parse_scenario_toml(bad, "unit.toml");
  REQUIRE_FALSE(refused);
  CHECK(refused.error().message.find("unit.reject_share") != std::string::npos);
  std::string good = kShortDay;
  good += "[unit]\nminutes = 3\nreject_share = 0.1\n";
  auto parsed = parse_scenario_toml(good, "unit.toml");
  REQUIRE_MESSAGE(parsed, parsed.error().describe());
  CHECK(parsed->unit_duration_ms == 3 * kMinuteMs);
  CHECK(parsed->unit_reject_share == 0.1);
}

TEST_CASE("one seed reproduces a fleet run exactly") {
  auto scenario = parse_scenario_toml(kShortDay, "short-day");
  REQUIRE(scenario);
  FleetOptions options;
  options.seed = 7;
  options.day_ms = 4 * kHourMs;
  auto knobs = knobs_for(*scenario, {});
  auto first = run_fleet(*scenario, knobs, options);
  auto second = run_fleet(*scenario, knobs, options);
  REQUIRE(first);
  REQUIRE(second);
  CHECK(format_json({*first}, 7, "x") == format_json({*second}, 7, "x"));
}

TEST_CASE("scenario errors name the file and the key") {
  auto unknown = parse_scenario_toml("[pool]\nrevisions = []\n", "bad.toml");
  REQUIRE(!unknown);
  CHECK(unknown.error().message.find("bad.toml: pool.revisions") != std::string::npos);

  std::string typo = kShortDay;
  typo.replace(typo.find("grace_minutes"), 13, "grace_minuets");
  auto misspelt = parse_scenario_toml(typo, "typo.toml");
  REQUIRE(!misspelt);
  CHECK(misspelt.error().message.find("experiments.grace_minuets: unknown key") != std::string::npos);

  std::string bad_time = kShortDay;
  bad_time.replace(bad_time.find("\"02:30\""), 7, "\"25:99\"");
  CHECK(!parse_scenario_toml(bad_time, "time.toml"));
  CHECK(!load_scenario("/nonexistent/day.toml"));

  // Found by fuzzing: 1.8e19 minutes overflowed the conversion to milliseconds (undefined).
  std::string huge = kShortDay;
  const std::size_t repair = huge.find("node_repair_minutes = ");
  REQUIRE(repair != std::string::npos);
  huge.replace(repair, huge.find('\n', repair) - repair, "node_repair_minutes = 1.82e19");
  auto too_long = parse_scenario_toml(huge, "huge.toml");
  REQUIRE(!too_long);
  CHECK(too_long.error().message.find("pool.node_repair_minutes: must be a number up to") != std::string::npos);
}

// The figures docs/performance.md reports, kept honest: runs the real working day when the
// shared scenarios are checked out beside the repository (about a second).
TEST_CASE("ci-day.toml: the kiln policy reaches the documented figures") {
  const std::filesystem::path day =
      std::filesystem::path(KILN_SOURCE_DIR) / ".." / "shared" / "scenarios" / "ci-day.toml";
  if (!std::filesystem::exists(day)) {
    MESSAGE("shared/scenarios/ci-day.toml is not beside the repository; skipped");
    return;
  }
  auto scenario = load_scenario(day.string());
  REQUIRE_MESSAGE(scenario, scenario.error().describe());
  auto knobs = scheduler::load_scheduler_knobs(std::string(KILN_SOURCE_DIR) +
                                               "/sim/fleet/ci-day-knobs.toml");
  REQUIRE_MESSAGE(knobs, knobs.error().describe());
  FleetOptions options;
  options.seed = 1;
  auto report = run_fleet(*scenario, knobs_for(*scenario, *knobs), options);
  REQUIRE_MESSAGE(report, report.error().describe());
  CHECK(report->presubmit_signal.p90_minutes <= 20.0);
  CHECK(report->nightly_met_deadline);
  CHECK(report->experiment_lost_share < 0.02);
  CHECK(report->unfinished_requests == 0);
}

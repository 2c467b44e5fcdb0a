// The sim's pure model and its options, without the driver library.
#include <cmath>

#include <doctest/doctest.h>

#include "sim/chip/model.h"
#include "sim/chip/sim_files.h"
#include "sim/chip/sim_node.h"
#include "tests/support/driver_support.h"

namespace kiln::sim {
namespace {

using drivers::testing::TempDir;

NodeState node_with_seed(std::uint64_t seed, Revision revision = Revision::a) {
  return initial_node_state(NodeIdentity{"n01", revision, 8, seed}, "1.0.0", 0);
}

TEST_CASE("the load fraction follows a first-order response in both directions") {
  LoadHistory load{true, 1000, 0.0};
  CHECK(load_fraction(load, 1000, 1000) == doctest::Approx(0.0));
  CHECK(load_fraction(load, 2000, 1000) == doctest::Approx(1.0 - std::exp(-1.0)));
  CHECK(load_fraction(load, 100000, 1000) == doctest::Approx(1.0));
  ChipState chip;
  chip.load = load;
  record_load(chip, false, 2000, 1000);
  CHECK(chip.load.fraction_at_change == doctest::Approx(1.0 - std::exp(-1.0)));
  CHECK(load_fraction(chip.load, 3000, 1000) ==
        doctest::Approx((1.0 - std::exp(-1.0)) * std::exp(-1.0)));
}

TEST_CASE("telemetry is a function of seed, state and time") {
  const NodeState a = node_with_seed(5);
  const NodeState same = node_with_seed(5);
  const NodeState other = node_with_seed(6);
  for (TimeMs now : {0, 1500, 60000}) {
    const Telemetry x = chip_telemetry(a, 2, now, 1000);
    const Telemetry y = chip_telemetry(same, 2, now, 1000);
    const Telemetry z = chip_telemetry(other, 2, now, 1000);
    CHECK(x.temperature_c == y.temperature_c);
    CHECK(x.power_w == y.power_w);
    CHECK(x.clock_mhz == y.clock_mhz);
    CHECK(x.temperature_c != z.temperature_c);
    CHECK(x.temperature_c == doctest::Approx(profile(Revision::a).idle_temperature_c).epsilon(0.05));
  }
}

TEST_CASE("the workload query reports every condition a fault sets") {
  NodeState node = node_with_seed(1, Revision::b);
  node.chips[0].faults = {*make_fault(FaultKind::slow, 0.0, FlashFailMode::flash, 0, false),
                          *make_fault(FaultKind::thermal_throttle, 0.0, FlashFailMode::flash, 0,
                                      false)};
  node.chips[1].faults = {*make_fault(FaultKind::sdc, 0.0, FlashFailMode::flash, 0, false),
                          *make_fault(FaultKind::hang, 0.0, FlashFailMode::flash, 0, false)};
  const ChipConditions slow = chip_conditions(node, 0);
  CHECK(slow.revision == Revision::b);
  CHECK(slow.slow_factor == 0.5);  // the default
  CHECK(slow.throttled);
  CHECK(slow.speed_factor == doctest::Approx(slow.silicon_factor * 0.5 * kThrottledClockFraction));
  const ChipConditions sdc = chip_conditions(node, 1);
  CHECK(sdc.sdc_active);
  CHECK(sdc.sdc_rate == 0.01);  // the default
  CHECK(sdc.hung);
  CHECK(sdc.chip_seed != slow.chip_seed);
  CHECK(sdc.node_seed == 1);
  CHECK(sdc.firmware_version == "1.0.0");
  CHECK_FALSE(make_fault(FaultKind::slow, 1.5, FlashFailMode::flash, 0, false));
}

TEST_CASE("sim options: inline keys, a node TOML, and inline keys over a TOML") {
  TempDir dir;
  auto inline_options = parse_sim_options(
      " state_dir=" + (dir / "s").string() + " ; seed = 42;hardware_revision=b;chip_count=2 ");
  REQUIRE(inline_options);
  CHECK(inline_options->identity.seed == 42);
  CHECK(inline_options->identity.revision == Revision::b);
  CHECK(inline_options->identity.chip_count == 2);
  CHECK(inline_options->state_dir == dir / "s");

  const auto toml = dir.write("node.toml",
                              "node_id = \"n07\"\nhardware_revision = \"a\"\nseed = 9\n"
                              "state_dir = \"state\"\nfault_file = \"faults.toml\"\n"
                              "self_test_time_scale = 0.5\n");
  auto from_file = parse_sim_options(toml);
  REQUIRE_MESSAGE(from_file, (from_file ? "" : from_file.error().describe()));
  CHECK(from_file->identity.node_id == "n07");
  CHECK(from_file->identity.chip_count == 8);  // the default
  CHECK(from_file->state_dir == dir / "state");  // relative to the TOML's folder
  CHECK(from_file->fault_file == dir / "faults.toml");
  CHECK(from_file->self_test_time_scale == 0.5);

  auto overridden = parse_sim_options("config=" + toml + ";seed=10");
  REQUIRE(overridden);
  CHECK(overridden->identity.seed == 10);
  CHECK(overridden->identity.node_id == "n07");

  auto bad_revision = parse_sim_options("state_dir=/tmp/x;hardware_revision=c");
  REQUIRE_FALSE(bad_revision);
  CHECK(bad_revision.error().code == Errc::config);
  CHECK(bad_revision.error().message.find("\"a\" or \"b\"") != std::string::npos);

  const auto broken = dir.write("broken.toml", "seed = = 3\n");
  auto parse_error = parse_sim_options(broken);
  REQUIRE_FALSE(parse_error);
  CHECK(parse_error.error().message.find("broken.toml") != std::string::npos);

  auto missing = parse_sim_options((dir / "absent.toml").string());
  REQUIRE_FALSE(missing);
  CHECK(missing.error().code == Errc::config);
  CHECK(parse_sim_options("state_dir=/tmp/x;seed=-1").error().code == Errc::config);
  CHECK(parse_sim_options("state_dir=/tmp/x;seed=1;seed=2").error().code == Errc::config);
  CHECK(parse_sim_options("").error().code == Errc::config);
}

TEST_CASE("a simulated clock drives the node shell deterministically") {
  TempDir dir;
  TimeMs now = 1'000'000;
  std::int64_t live_pid = 0;
  auto env = system_environment();
  env.now_ms = [&] { return now; };
  env.pid_alive = [&](std::int64_t pid) { return pid == live_pid; };
  auto node = SimNode::open("state_dir=" + (dir / "s").string() + ";thermal_time_constant_ms=1000",
                            env);
  REQUIRE(node);
  live_pid = 4242;
  REQUIRE(node->bind(4242, {0}));
  now += 1000;
  const double expected = profile(Revision::a).idle_temperature_c +
                          (profile(Revision::a).loaded_temperature_c -
                           profile(Revision::a).idle_temperature_c) *
                              (1.0 - std::exp(-1.0));
  CHECK(node->telemetry(0)->temperature_c == doctest::Approx(expected).epsilon(0.02));
  live_pid = 0;  // the workload exits
  CHECK(node->binding(0).value() == 0);
  now += 100000;
  CHECK(node->telemetry(0)->temperature_c ==
        doctest::Approx(profile(Revision::a).idle_temperature_c).epsilon(0.03));
}

}  // namespace
}  // namespace kiln::sim

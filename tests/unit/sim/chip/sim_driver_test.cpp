// The simulated chip seen through the real ABI and loader: load, faults, firmware, shared
// state, determinism.
#include <dlfcn.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>

#include <doctest/doctest.h>

#include "drivers/loader.h"
#include "sim/chip/kiln_sim_driver.h"
#include "sim/chip/sim_node.h"
#include "tests/support/driver_support.h"

namespace kiln::drivers {
namespace {

using testing::IdleChild;
using testing::TempDir;

// The sim library's run-time fault functions, found the way a test harness would.
class SimFaults {
 public:
  SimFaults() {
    library_ = dlopen(testing::sim_library().c_str(), RTLD_NOW | RTLD_LOCAL);
    REQUIRE(library_ != nullptr);
    void* inject = dlsym(library_, KILN_SIM_INJECT_FAULT_SYMBOL);
    void* clear = dlsym(library_, KILN_SIM_CLEAR_FAULTS_SYMBOL);
    REQUIRE(inject != nullptr);
    REQUIRE(clear != nullptr);
    std::memcpy(&inject_, &inject, sizeof inject);
    std::memcpy(&clear_, &clear, sizeof clear);
  }
  ~SimFaults() { dlclose(library_); }

  void inject(const TempDir& dir, std::uint32_t chip, const char* kind, double factor = 0.0,
              const char* mode = nullptr) {
    std::array<char, 512> error{};
    const auto state = (dir / "state").string();
    const auto status = inject_(state.c_str(), chip, kind, factor, mode, error.data(),
                                static_cast<std::uint32_t>(error.size()));
    REQUIRE_MESSAGE(status == KILN_DRIVER_OK, error.data());
  }

  void clear(const TempDir& dir, std::int32_t chip = -1) {
    std::array<char, 512> error{};
    const auto state = (dir / "state").string();
    REQUIRE(clear_(state.c_str(), chip, error.data(), static_cast<std::uint32_t>(error.size())) ==
            KILN_DRIVER_OK);
  }

  kiln_driver_status raw_inject(const std::string& state, std::uint32_t chip, const char* kind,
                                std::string& message) {
    std::array<char, 512> error{};
    const auto status = inject_(state.c_str(), chip, kind, 0.0, nullptr, error.data(),
                                static_cast<std::uint32_t>(error.size()));
    message = error.data();
    return status;
  }

 private:
  void* library_ = nullptr;
  kiln_sim_inject_fault_fn inject_ = nullptr;
  kiln_sim_clear_faults_fn clear_ = nullptr;
};

std::unique_ptr<Driver> open_sim(const TempDir& dir, const std::string& extra = "") {
  auto driver = Driver::load(testing::sim_library(), testing::fast_options(dir, extra));
  REQUIRE_MESSAGE(driver, (driver ? "" : driver.error().describe()));
  return std::move(*driver);
}

ChipTelemetry telemetry(Driver& d, std::uint32_t chip) {
  auto t = d.chip_telemetry(chip);
  REQUIRE_MESSAGE(t, (t ? "" : t.error().describe()));
  return *t;
}

SelfTestResult self_test(Driver& d, std::uint32_t chip, SelfTestKind kind, std::uint32_t level = 1) {
  auto t = d.run_self_test(chip, kind, level);
  REQUIRE_MESSAGE(t, (t ? "" : t.error().describe()));
  return *t;
}

std::string image(const TempDir& dir) {
  return dir.write("firmware.img", "simulated firmware image\n");
}

TEST_CASE("telemetry moves with load: a bound live process heats the chip, its exit cools it") {
  TempDir dir;
  auto d = open_sim(dir);
  const auto idle = telemetry(*d, 0);
  CHECK(idle.temperature_c < 50.0);
  CHECK_FALSE(idle.throttled);
  CHECK(idle.link_up);

  IdleChild workload;
  REQUIRE(d->bind_workload(workload.pid(), {0, 1}));
  CHECK(d->chip_binding(0).value() == std::optional<std::int64_t>(workload.pid()));
  CHECK(d->chip_binding(2).value() == std::nullopt);
  testing::sleep_ms(400);  // four thermal time constants
  const auto loaded = telemetry(*d, 0);
  const auto peer = telemetry(*d, 2);
  CHECK(d->chip_activity(0).value().utilization == 1.0);
  CHECK(d->chip_activity(2).value().utilization == 0.0);
  CHECK(loaded.temperature_c > peer.temperature_c + 25.0);
  CHECK(loaded.power_w > peer.power_w * 3.0);
  CHECK(loaded.memory_used_bytes > peer.memory_used_bytes * 10);

  // The workload dies without unbinding: the chip frees itself and cools.
  workload.stop();
  CHECK(d->chip_binding(0).value() == std::nullopt);
  testing::sleep_ms(400);
  const auto cooled = telemetry(*d, 0);
  CHECK(cooled.temperature_c < loaded.temperature_c - 25.0);
  CHECK(cooled.memory_used_bytes == peer.memory_used_bytes);
  CHECK(d->chip_activity(0).value().utilization == 0.0);
}

TEST_CASE("a chip bound to a live process refuses other workloads, self-tests and resets") {
  TempDir dir;
  auto d = open_sim(dir);
  IdleChild first;
  IdleChild second;
  REQUIRE(d->bind_workload(first.pid(), {2}));
  auto conflict = d->bind_workload(second.pid(), {3, 2});
  REQUIRE_FALSE(conflict);
  CHECK(conflict.error().code == Errc::unavailable);
  CHECK(conflict.error().message.find(std::to_string(first.pid())) != std::string::npos);
  // All or nothing: chip 3 stayed free.
  CHECK(d->chip_binding(3).value() == std::nullopt);

  auto test = d->run_self_test(2, SelfTestKind::memory, 1);
  REQUIRE_FALSE(test);
  CHECK(test.error().code == Errc::unavailable);
  CHECK(d->reset_chip(2).error().code == Errc::unavailable);
  CHECK(d->activate_standby(2).error().code == Errc::unavailable);

  REQUIRE(d->unbind_workload(first.pid()));
  CHECK(d->bind_workload(second.pid(), {3, 2}));
  CHECK(d->unbind_workload(first.pid()));  // holding nothing is not an error

  second.stop();
  auto dead = d->bind_workload(second.pid(), {4});
  REQUIRE_FALSE(dead);
  CHECK(dead.error().code == Errc::invalid_argument);
  CHECK(d->bind_workload(first.pid(), {}).error().code == Errc::invalid_argument);
  CHECK(d->bind_workload(first.pid(), {9}).error().code == Errc::not_found);
}

TEST_CASE("fault ecc_storm: uncorrected errors climb and the memory self-test fails") {
  TempDir dir;
  auto d = open_sim(dir);
  SimFaults faults;
  CHECK(self_test(*d, 1, SelfTestKind::memory).passed);
  faults.inject(dir, 1, "ecc_storm");
  const auto first = telemetry(*d, 1);
  CHECK(first.ecc_uncorrected >= 1);
  CHECK(first.ecc_corrected >= 1000);
  testing::sleep_ms(600);
  CHECK(telemetry(*d, 1).ecc_uncorrected > first.ecc_uncorrected);
  CHECK(telemetry(*d, 0).ecc_uncorrected == 0);

  const auto memory = self_test(*d, 1, SelfTestKind::memory, 2);
  CHECK_FALSE(memory.passed);
  CHECK(memory.errors_found > 0);
  CHECK(memory.detail.find("uncorrectable") != std::string::npos);
  CHECK(self_test(*d, 0, SelfTestKind::memory, 2).passed);

  faults.clear(dir, 1);
  REQUIRE(d->reset_chip(1));
  CHECK(telemetry(*d, 1).ecc_uncorrected == 0);
  CHECK(telemetry(*d, 1).ecc_corrected == 0);
  CHECK(self_test(*d, 1, SelfTestKind::memory).passed);
}

TEST_CASE("fault thermal_throttle: hot, throttled, lower clocks and less compute") {
  TempDir dir;
  auto d = open_sim(dir);
  SimFaults faults;
  faults.inject(dir, 4, "thermal_throttle");
  const auto hot = telemetry(*d, 4);
  const auto peer = telemetry(*d, 5);
  CHECK(hot.throttled);
  CHECK_FALSE(peer.throttled);
  // Heat is the reason the driver gives; a peer's clocks are not reduced at all.
  const auto hot_activity = d->chip_activity(4).value();
  CHECK(hot_activity.thermal_throttle);
  CHECK_FALSE(hot_activity.power_throttle);
  CHECK_FALSE(d->chip_activity(5).value().thermal_throttle);
  CHECK(hot.temperature_c >= 90.0);
  CHECK(hot.clock_mhz < 0.7 * peer.clock_mhz);
  const double ratio = self_test(*d, 4, SelfTestKind::compute).compute_tflop_per_s /
                       self_test(*d, 5, SelfTestKind::compute).compute_tflop_per_s;
  CHECK(ratio == doctest::Approx(0.6).epsilon(0.08));
}

TEST_CASE("fault link_down: telemetry shows the link down and the interconnect test fails") {
  TempDir dir;
  auto d = open_sim(dir);
  SimFaults faults;
  faults.inject(dir, 6, "link_down");
  CHECK_FALSE(telemetry(*d, 6).link_up);
  CHECK(telemetry(*d, 7).link_up);
  const auto link = self_test(*d, 6, SelfTestKind::interconnect);
  CHECK_FALSE(link.passed);
  CHECK(link.interconnect_bandwidth_gb_per_s == 0.0);
  const auto healthy = self_test(*d, 7, SelfTestKind::interconnect);
  CHECK(healthy.passed);
  CHECK(healthy.interconnect_bandwidth_gb_per_s == doctest::Approx(300.0).epsilon(0.05));
}

TEST_CASE("fault slow: the compute self-test and the workload query see the speed factor") {
  TempDir dir;
  auto d = open_sim(dir);
  SimFaults faults;
  faults.inject(dir, 3, "slow", 0.7);
  const double ratio = self_test(*d, 3, SelfTestKind::compute, 3).compute_tflop_per_s /
                       self_test(*d, 2, SelfTestKind::compute, 3).compute_tflop_per_s;
  CHECK(ratio == doctest::Approx(0.7).epsilon(0.07));
  CHECK(self_test(*d, 3, SelfTestKind::compute, 3).passed);  // slow is not broken

  auto node = sim::SimNode::attach(dir / "state");
  REQUIRE(node);
  auto slow = node->conditions(3);
  auto healthy = node->conditions(2);
  REQUIRE(slow);
  REQUIRE(healthy);
  CHECK(slow->slow_factor == 0.7);
  CHECK(slow->speed_factor == doctest::Approx(0.7 * slow->silicon_factor));
  CHECK(healthy->slow_factor == 1.0);
  CHECK(healthy->speed_factor == doctest::Approx(1.0).epsilon(0.021));
}

TEST_CASE("fault sdc: workloads learn to corrupt outputs; only the level 3 stress catches it") {
  TempDir dir;
  auto d = open_sim(dir);
  SimFaults faults;
  faults.inject(dir, 5, "sdc", 0.05);
  auto node = sim::SimNode::attach(dir / "state");
  REQUIRE(node);
  CHECK(node->conditions(5)->sdc_active);
  CHECK(node->conditions(5)->sdc_rate == 0.05);
  CHECK_FALSE(node->conditions(4)->sdc_active);
  CHECK(self_test(*d, 5, SelfTestKind::compute, 1).passed);
  const auto stress = self_test(*d, 5, SelfTestKind::compute, 3);
  CHECK_FALSE(stress.passed);
  CHECK(stress.errors_found > 0);
  CHECK(self_test(*d, 4, SelfTestKind::compute, 3).passed);
}

TEST_CASE("fault hang: a call touching the chip never returns, other chips still answer") {
  TempDir dir;
  auto d = open_sim(dir);
  SimFaults faults;
  faults.inject(dir, 2, "hang");
  const std::string options = testing::fast_options(dir);

  // Each probe runs in a forked child with a deadline, as the agent runs its checks.
  auto probe = [&](std::uint32_t chip, int deadline_ms) {
    const pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {
      auto driver = Driver::load(testing::sim_library(), options);
      if (!driver) ::_exit(3);
      ::_exit((*driver)->chip_telemetry(chip) ? 0 : 4);
    }
    int status = 0;
    for (int waited_ms = 0; waited_ms < deadline_ms; waited_ms += 20) {
      if (::waitpid(child, &status, WNOHANG) == child) {
        return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      }
      testing::sleep_ms(20);
    }
    ::kill(child, SIGKILL);
    ::waitpid(child, &status, 0);
    return -2;  // still blocked at the deadline
  };
  CHECK(probe(2, 600) == -2);
  CHECK(probe(1, 10000) == 0);
  CHECK(d->chip_count().value() == 8);  // touches no chip

  auto node = sim::SimNode::attach(dir / "state");
  REQUIRE(node);
  CHECK(node->conditions(2)->hung);  // the query API itself never blocks
  faults.clear(dir, 2);
  CHECK(probe(2, 10000) == 0);
}

TEST_CASE("firmware slots: flash the standby, activate, roll back") {
  TempDir dir;
  auto d = open_sim(dir, "firmware_version=1.0.0");
  const std::string img = image(dir);
  auto slots = d->firmware_slots(0);
  REQUIRE(slots);
  CHECK(slots->active == FirmwareSlot::a);
  CHECK(slots->previous == std::nullopt);
  CHECK(slots->version_a == "1.0.0");
  CHECK(slots->version_b == "1.0.0");

  REQUIRE(d->flash_standby(0, img, "2.0.0"));
  slots = d->firmware_slots(0);
  CHECK(slots->active_version() == "1.0.0");
  CHECK(slots->version_b == "2.0.0");
  CHECK(slots->valid_b);

  REQUIRE(d->activate_standby(0));
  slots = d->firmware_slots(0);
  CHECK(slots->active == FirmwareSlot::b);
  CHECK(slots->active_version() == "2.0.0");
  CHECK(slots->previous == FirmwareSlot::a);
  auto node = sim::SimNode::attach(dir / "state");
  CHECK(node->conditions(0)->firmware_version == "2.0.0");

  REQUIRE(d->rollback_firmware(0));
  slots = d->firmware_slots(0);
  CHECK(slots->active == FirmwareSlot::a);
  CHECK(slots->active_version() == "1.0.0");
  CHECK(slots->previous == std::nullopt);
  auto again = d->rollback_firmware(0);
  REQUIRE_FALSE(again);
  CHECK(again.error().code == Errc::conflict);

  // Flashing over the previous slot removes the rollback target.
  REQUIRE(d->activate_standby(0));
  REQUIRE(d->flash_standby(0, img, "3.0.0"));
  CHECK(d->firmware_slots(0)->previous == std::nullopt);
  CHECK(d->rollback_firmware(0).error().code == Errc::conflict);

  auto missing = d->flash_standby(0, (dir / "missing.img").string(), "4.0.0");
  REQUIRE_FALSE(missing);
  CHECK(missing.error().code == Errc::io);
  CHECK(missing.error().message.find("missing.img") != std::string::npos);
  CHECK(d->flash_standby(0, img, "bad version").error().code == Errc::invalid_argument);
}

TEST_CASE("fault flash_fail mode flash: the flash fails and the standby slot is invalid") {
  TempDir dir;
  auto d = open_sim(dir);
  SimFaults faults;
  const std::string img = image(dir);
  faults.inject(dir, 1, "flash_fail", 0.0, "flash");
  auto flashed = d->flash_standby(1, img, "2.0.0");
  REQUIRE_FALSE(flashed);
  CHECK(flashed.error().code == Errc::device);
  CHECK(flashed.error().message.find("KILN_DRIVER_E_FIRMWARE") != std::string::npos);
  auto slots = d->firmware_slots(1);
  CHECK_FALSE(slots->valid_b);
  CHECK(slots->active_version() == "1.0.0");
  CHECK(d->activate_standby(1).error().code == Errc::conflict);
  CHECK(self_test(*d, 1, SelfTestKind::memory).passed);  // the running firmware is untouched

  faults.clear(dir, 1);
  REQUIRE(d->flash_standby(1, img, "2.0.0"));
  REQUIRE(d->activate_standby(1));
  CHECK(d->firmware_slots(1)->active_version() == "2.0.0");
}

TEST_CASE("fault flash_fail mode activate: the new firmware fails its health check until rollback") {
  TempDir dir;
  auto d = open_sim(dir);
  SimFaults faults;
  const std::string img = image(dir);
  faults.inject(dir, 3, "flash_fail", 0.0, "activate");
  REQUIRE(d->flash_standby(3, img, "2.0.0"));
  REQUIRE(d->activate_standby(3));
  CHECK(d->firmware_slots(3)->active_version() == "2.0.0");
  CHECK_FALSE(telemetry(*d, 3).link_up);
  const auto check = self_test(*d, 3, SelfTestKind::memory);
  CHECK_FALSE(check.passed);
  CHECK(check.detail.find("firmware") != std::string::npos);

  REQUIRE(d->rollback_firmware(3));
  CHECK(d->firmware_slots(3)->active_version() == "1.0.0");
  CHECK(telemetry(*d, 3).link_up);
  CHECK(self_test(*d, 3, SelfTestKind::memory).passed);
}

TEST_CASE("two handles on one state directory see the same chips") {
  TempDir dir;
  auto agent = open_sim(dir);
  auto workload = open_sim(dir);
  IdleChild process;
  REQUIRE(workload->bind_workload(process.pid(), {5}));
  CHECK(agent->chip_binding(5).value() == std::optional<std::int64_t>(process.pid()));
  REQUIRE(agent->flash_standby(0, image(dir), "9.9.9"));
  CHECK(workload->firmware_slots(0)->version_b == "9.9.9");
  CHECK(agent->chip_identity(4)->serial == workload->chip_identity(4)->serial);

  // The command-line tool changes the same state while both handles are open.
  const std::string tool = std::string(KILN_BIN_DIR) + "/kiln-sim-chip";
  const std::string state = (dir / "state").string();
  REQUIRE(std::system((tool + " inject --state-dir " + state +
                       " --chip 7 --fault link_down").c_str()) == 0);
  CHECK_FALSE(agent->chip_telemetry(7)->link_up);
  CHECK_FALSE(workload->chip_telemetry(7)->link_up);
  const std::string shown = (dir / "show.txt").string();
  REQUIRE(std::system((tool + " show --state-dir " + state + " > " + shown).c_str()) == 0);
  std::ifstream in(shown);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CHECK(text.find("chip 7:") != std::string::npos);
  CHECK(text.find("link_down") != std::string::npos);
  REQUIRE(std::system((tool + " clear --state-dir " + state).c_str()) == 0);
  CHECK(agent->chip_telemetry(7)->link_up);
  CHECK(std::system((tool + " inject --state-dir " + state +
                     " --chip 8 --fault link_down 2>/dev/null").c_str()) != 0);

  // A restarted agent keeps the firmware; different hardware in the same folder is refused.
  agent.reset();
  auto restarted = open_sim(dir);
  CHECK(restarted->firmware_slots(0)->version_b == "9.9.9");
  auto other = Driver::load(testing::sim_library(), testing::fast_options(dir, "seed=2"));
  REQUIRE_FALSE(other);
  CHECK(other.error().code == Errc::config);
  CHECK(other.error().message.find("fresh state_dir") != std::string::npos);
}

TEST_CASE("the driver reports the version a driver install recorded, also after a restart") {
  TempDir dir;
  auto driver = open_sim(dir);
  CHECK(driver->driver_version().value() == "kiln-sim 0.1.0");
  const std::string tool = std::string(KILN_BIN_DIR) + "/kiln-sim-chip";
  // As an installer does: the node named by the agent's driver options.
  REQUIRE(std::system((tool + " set-driver-version --driver-options '" + testing::fast_options(dir) + "' 2.0.0")
                          .c_str()) == 0);
  CHECK(driver->driver_version().value() == "2.0.0");
  // A version string like a vendor's does not make the simulated chip silicon: its kind is what
  // the driver declares.
  CHECK(driver->backend_kind().value() == "sim");
  driver.reset();
  CHECK(open_sim(dir)->driver_version().value() == "2.0.0");
  REQUIRE(std::system((tool + " set-driver-version --state-dir " + (dir / "state").string() + " 2.1.0").c_str()) ==
          0);
  CHECK(open_sim(dir)->driver_version().value() == "2.1.0");
  // A version the driver could not report plainly is refused; so is a call that names no node.
  CHECK(std::system((tool + " set-driver-version --state-dir " + (dir / "state").string() + " '2 0' 2>/dev/null")
                        .c_str()) != 0);
  CHECK(std::system((tool + " set-driver-version 2.2.0 2>/dev/null").c_str()) != 0);
  CHECK(open_sim(dir)->driver_version().value() == "2.1.0");
}

TEST_CASE("injecting into a folder without a node is refused") {
  TempDir dir;
  SimFaults faults;
  std::string message;
  CHECK(faults.raw_inject((dir / "nothing").string(), 0, "hang", message) == KILN_DRIVER_E_IO);
  CHECK(message.find("holds no simulated node") != std::string::npos);
  auto d = open_sim(dir);
  CHECK(faults.raw_inject((dir / "state").string(), 0, "melt", message) ==
        KILN_DRIVER_E_INVALID_ARGUMENT);
  CHECK(message.find("melt") != std::string::npos);
}

TEST_CASE("faults from a fault file apply once and stay cleared until the file changes") {
  TempDir dir;
  const auto file = dir.write("faults.toml",
                              "[[fault]]\nchip = 1\nkind = \"ecc_storm\"\n\n"
                              "[[fault]]\nchip = 3\nkind = \"slow\"\nfactor = 0.25\n");
  const std::string extra = "fault_file=" + file;
  auto d = open_sim(dir, extra);
  CHECK(telemetry(*d, 1).ecc_uncorrected > 0);
  auto node = sim::SimNode::attach(dir / "state");
  CHECK(node->conditions(3)->slow_factor == 0.25);

  SimFaults faults;
  faults.clear(dir);
  auto reopened = open_sim(dir, extra);
  CHECK(telemetry(*reopened, 1).ecc_uncorrected == 0);

  dir.write("faults.toml", "[[fault]]\nchip = 2\nkind = \"link_down\"\n");
  auto changed = open_sim(dir, extra);
  CHECK_FALSE(telemetry(*changed, 2).link_up);

  dir.write("bad.toml", "[[fault]]\nchip = 12\nkind = \"hang\"\n");
  auto bad = Driver::load(testing::sim_library(),
                          testing::fast_options(dir, "fault_file=" + (dir / "bad.toml").string()));
  REQUIRE_FALSE(bad);
  CHECK(bad.error().code == Errc::config);
  CHECK(bad.error().message.find("chip 12") != std::string::npos);
}

TEST_CASE("one seed reproduces serials and self-test figures; another seed differs") {
  auto run = [](const std::string& seed) {
    TempDir dir;
    auto d = open_sim(dir, "seed=" + seed);
    std::vector<std::string> out;
    for (std::uint32_t chip = 0; chip < 3; ++chip) out.push_back(d->chip_identity(chip)->serial);
    for (int i = 0; i < 3; ++i) {
      char figure[64];
      std::snprintf(figure, sizeof figure, "%.9f",
                    self_test(*d, 0, SelfTestKind::compute, 2).compute_tflop_per_s);
      out.push_back(figure);
    }
    return out;
  };
  const auto first = run("11");
  CHECK(first == run("11"));
  const auto other = run("12");
  for (std::size_t i = 0; i < first.size(); ++i) CHECK(first[i] != other[i]);
}

TEST_CASE("self-test figures follow the revision with about 1% noise") {
  TempDir dir_a;
  TempDir dir_b;
  auto a = open_sim(dir_a, "hardware_revision=a");
  auto b = open_sim(dir_b, "hardware_revision=b");
  double sum = 0;
  double sum_squares = 0;
  const int runs = 30;
  for (int i = 0; i < runs; ++i) {
    const double x = self_test(*a, 0, SelfTestKind::memory, 1).memory_bandwidth_gb_per_s;
    sum += x;
    sum_squares += x * x;
  }
  const double mean = sum / runs;
  const double relative_sd = std::sqrt(sum_squares / runs - mean * mean) / mean;
  CHECK(relative_sd > 0.004);
  CHECK(relative_sd < 0.02);
  CHECK(mean == doctest::Approx(1600.0).epsilon(0.03));
  CHECK(self_test(*b, 0, SelfTestKind::memory).memory_bandwidth_gb_per_s > 2200.0);
  CHECK(self_test(*b, 0, SelfTestKind::compute).compute_tflop_per_s >
        1.4 * self_test(*a, 0, SelfTestKind::compute).compute_tflop_per_s);
}

}  // namespace
}  // namespace kiln::drivers

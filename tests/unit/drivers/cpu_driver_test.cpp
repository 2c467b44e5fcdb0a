// The CPU reference backend behind the driver ABI, and kernels run through both backends.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>

#include "common/numerics/kernels.h"
#include "drivers/cpu/host_readings.h"
#include "drivers/kiln_driver.h"
#include "drivers/loader.h"
#include "tests/support/driver_support.h"

namespace kiln::drivers {
namespace {

using numerics::KernelContext;
using numerics::KernelLaunch;
using numerics::Matrix;
using testing::TempDir;

Matrix ramp(int rows, int cols, float scale) {
  Matrix m(rows, cols);
  for (std::size_t i = 0; i < m.data.size(); ++i) m.data[i] = scale * static_cast<float>((i * 7) % 13) - 0.3f;
  return m;
}

KernelLaunch gemm_launch() { return {"gemm-bf16", false, false, {ramp(4, 8, 0.11f), ramp(8, 3, 0.07f)}}; }

std::unique_ptr<Driver> load(const std::string& library, const std::string& options) {
  auto driver = Driver::load(library, options);
  REQUIRE_MESSAGE(driver, (driver ? "" : driver.error().describe()));
  return std::move(*driver);
}

TEST_CASE("the CPU backend has one device and runs kernels with the chip's numerics") {
  auto driver = load(testing::cpu_library(), "");
  CHECK(driver->driver_version().value() == "kiln-cpu 0.1.0");
  CHECK(driver->backend_kind().value() == "cpu");
  CHECK(driver->chip_count().value() == 1);
  const auto id = driver->chip_identity(0);
  REQUIRE(id);
  CHECK(id->hardware_revision == "cpu");

  const auto out = driver->run_kernel(0, gemm_launch());
  REQUIRE_MESSAGE(out, (out ? "" : out.error().describe()));
  const auto expected = numerics::run_kernel(KernelContext{}, gemm_launch());
  REQUIRE(expected);
  CHECK(out->rows == 4);
  CHECK(out->cols == 3);
  CHECK(out->data == expected->data);  // the same arithmetic: the same bits
}

TEST_CASE("the CPU backend declares no firmware, resets, bindings or self-tests, and answers E_UNSUPPORTED for them") {
  auto driver = load(testing::cpu_library(), "");
  const auto capabilities = driver->capabilities();
  REQUIRE(capabilities);
  CHECK_FALSE(capabilities->firmware_slots);
  CHECK_FALSE(capabilities->firmware_install);
  CHECK_FALSE(capabilities->reset);
  CHECK_FALSE(capabilities->bindings);
  CHECK_FALSE(capabilities->self_tests);
  CHECK_FALSE(capabilities->ecc);
  CHECK_FALSE(capabilities->link);
  CHECK_FALSE(capabilities->power);
  const auto activity = driver->chip_activity(0);
  REQUIRE_FALSE(activity);
  CHECK(activity.error().message.find("KILN_DRIVER_E_UNSUPPORTED") != std::string::npos);
  const auto slots = driver->firmware_slots(0);
  REQUIRE_FALSE(slots);
  CHECK(slots.error().message.find("declares no firmware") != std::string::npos);
  CHECK_FALSE(driver->bind_workload(1, {0}));
  CHECK_FALSE(driver->run_self_test(0, SelfTestKind::compute, 1));
  const auto other = driver->run_kernel(1, gemm_launch());
  REQUIRE_FALSE(other);
  CHECK(other.error().code == Errc::not_found);
}

TEST_CASE("a backend built before capabilities can do everything") {
  TempDir dir;
  auto sim = load(testing::sim_library(), testing::fast_options(dir));
  const auto capabilities = sim->capabilities();
  REQUIRE(capabilities);
  CHECK(capabilities->firmware_slots);
  CHECK(capabilities->firmware_install);
  CHECK(capabilities->ecc);
  CHECK(capabilities->link);
  CHECK(operation_bits(*capabilities) == operation_bits(DriverCapabilities{}));
  CHECK(capabilities_from_bits(KILN_CAPABILITY_RESET, KILN_TELEMETRY_MEMORY).reset);
  CHECK_FALSE(capabilities_from_bits(KILN_CAPABILITY_RESET, KILN_TELEMETRY_MEMORY).firmware_slots);
}

// A host's /proc and /sys in miniature.
void write_file(const std::filesystem::path& file, const std::string& text) {
  std::filesystem::create_directories(file.parent_path());
  std::ofstream(file) << text;
}

TEST_CASE("the CPU backend reports the host's health as its telemetry, and what the host lacks as unknown") {
  TempDir root;
  write_file(root.path() / "proc/meminfo", "MemTotal:       16000000 kB\nMemFree:  1000 kB\nMemAvailable:    4000000 kB\n");
  write_file(root.path() / "sys/devices/system/cpu/online", "0-3,6\n");
  write_file(root.path() / "sys/class/thermal/thermal_zone0/temp", "41000\n");
  write_file(root.path() / "sys/class/thermal/thermal_zone1/temp", "57500\n");
  write_file(root.path() / "sys/devices/system/cpu/cpu0/cpufreq/scaling_cur_freq", "2000000\n");
  write_file(root.path() / "sys/devices/system/cpu/cpu1/cpufreq/scaling_cur_freq", "3000000\n");
  write_file(root.path() / "sys/devices/system/cpu/cpu0/thermal_throttle/core_throttle_count", "4\n");

  const auto host = cpu::read_host(root.path());
  CHECK(host.cores_online == 5u);
  CHECK(host.memory_total_bytes == 16000000ull * 1024);
  CHECK(host.memory_available_bytes == 4000000ull * 1024);
  CHECK(host.max_temperature_c == doctest::Approx(57.5));
  CHECK(host.mean_clock_mhz == doctest::Approx(2500));
  CHECK(host.throttle_count == 4u);

  auto driver = load(testing::cpu_library(), "host_root=" + root.path().string());
  const auto capabilities = driver->capabilities();
  REQUIRE(capabilities);
  CHECK(capabilities->temperature);
  CHECK(capabilities->memory);
  CHECK(capabilities->clock);
  CHECK(capabilities->throttle);
  CHECK(driver->chip_identity(0).value().memory_bytes == 16000000ull * 1024);
  auto first = driver->chip_telemetry(0);
  REQUIRE(first);
  CHECK(first->temperature_c == doctest::Approx(57.5));
  CHECK(first->memory_used_bytes == 12000000ull * 1024);
  CHECK_FALSE(first->throttled);  // nothing to compare the first count with
  write_file(root.path() / "sys/devices/system/cpu/cpu0/thermal_throttle/core_throttle_count", "9\n");
  CHECK(driver->chip_telemetry(0).value().throttled);  // the count grew since the last reading
  CHECK_FALSE(driver->chip_telemetry(0).value().throttled);

  // A VM: no thermal zones, no cpufreq, no throttle counters. Unknown, not a failure.
  TempDir bare;
  write_file(bare.path() / "proc/meminfo", "MemTotal: 1000 kB\nMemAvailable: 500 kB\n");
  const auto vm = cpu::read_host(bare.path());
  CHECK_FALSE(vm.cores_online);
  CHECK_FALSE(vm.max_temperature_c);
  CHECK_FALSE(vm.throttle_count);
  auto on_vm = load(testing::cpu_library(), "host_root=" + bare.path().string());
  CHECK_FALSE(on_vm->capabilities().value().temperature);
  CHECK(on_vm->capabilities().value().memory);
  REQUIRE(on_vm->chip_telemetry(0));
  CHECK(cpu::count_cpu_list("0-7") == 8u);
  CHECK_FALSE(cpu::count_cpu_list("3-1"));
  CHECK_FALSE(cpu::count_cpu_list(""));
}

TEST_CASE("the CPU backend refuses unknown options, kernels and shapes with a message") {
  auto bad_option = Driver::load(testing::cpu_library(), "state_dir=/tmp");
  CHECK_FALSE(Driver::load(testing::cpu_library(), "host_root="));
  REQUIRE_FALSE(bad_option);
  CHECK(bad_option.error().code == Errc::config);
  auto bad_kernel = Driver::load(testing::cpu_library(), "broken_kernels=gemm-int4");
  REQUIRE_FALSE(bad_kernel);
  CHECK(bad_kernel.error().message.find("gemm-int4") != std::string::npos);

  auto driver = load(testing::cpu_library(), "");
  const auto unknown = driver->run_kernel(0, KernelLaunch{"conv", false, false, {ramp(2, 2, 1.0f)}});
  REQUIRE_FALSE(unknown);
  CHECK(unknown.error().message.find("unknown kernel 'conv'") != std::string::npos);
  const auto shapes = driver->run_kernel(0, KernelLaunch{"gemm-bf16", false, false, {ramp(2, 3, 1.0f), ramp(2, 3, 1.0f)}});
  REQUIRE_FALSE(shapes);
  CHECK(shapes.error().code == Errc::invalid_argument);
}

TEST_CASE("a kernel gives the same numbers on the sim chip and the CPU backend; a broken one breaks on both") {
  TempDir dir;
  auto sim = load(testing::sim_library(), testing::fast_options(dir));
  auto cpu = load(testing::cpu_library(), "");
  const KernelLaunch softmax{"softmax", true, false, {ramp(5, 5, 0.9f)}};
  for (const KernelLaunch& launch : {gemm_launch(), softmax}) {
    const auto on_sim = sim->run_kernel(3, launch);
    const auto on_cpu = cpu->run_kernel(0, launch);
    REQUIRE(on_sim);
    REQUIRE(on_cpu);
    CHECK(on_sim->data == on_cpu->data);
  }

  TempDir broken_dir;
  auto broken_sim = load(testing::sim_library(), testing::fast_options(broken_dir, "broken_kernels=gemm-bf16"));
  auto broken_cpu = load(testing::cpu_library(), "broken_kernels=gemm-bf16");
  const auto good = cpu->run_kernel(0, gemm_launch());
  const auto bad_sim = broken_sim->run_kernel(0, gemm_launch());
  const auto bad_cpu = broken_cpu->run_kernel(0, gemm_launch());
  REQUIRE(good);
  REQUIRE(bad_sim);
  REQUIRE(bad_cpu);
  CHECK(bad_sim->data == bad_cpu->data);
  CHECK(bad_cpu->data != good->data);
}

}  // namespace
}  // namespace kiln::drivers

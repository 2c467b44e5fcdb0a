// The CPU reference backend behind the driver ABI, and kernels run through both backends.
#include <doctest/doctest.h>

#include "common/numerics/kernels.h"
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

TEST_CASE("the CPU backend answers E_UNSUPPORTED for what only a chip has") {
  auto driver = load(testing::cpu_library(), "");
  const auto telemetry = driver->chip_telemetry(0);
  REQUIRE_FALSE(telemetry);
  CHECK(telemetry.error().message.find("KILN_DRIVER_E_UNSUPPORTED") != std::string::npos);
  CHECK(telemetry.error().message.find("only runs kernels") != std::string::npos);
  const auto activity = driver->chip_activity(0);
  REQUIRE_FALSE(activity);
  CHECK(activity.error().message.find("KILN_DRIVER_E_UNSUPPORTED") != std::string::npos);
  CHECK_FALSE(driver->firmware_slots(0));
  CHECK_FALSE(driver->bind_workload(1, {0}));
  CHECK_FALSE(driver->run_self_test(0, SelfTestKind::compute, 1));
  const auto other = driver->run_kernel(1, gemm_launch());
  REQUIRE_FALSE(other);
  CHECK(other.error().code == Errc::not_found);
}

TEST_CASE("the CPU backend refuses unknown options, kernels and shapes with a message") {
  auto bad_option = Driver::load(testing::cpu_library(), "state_dir=/tmp");
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

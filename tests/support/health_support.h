// Helpers shared by the health and install tests: temporary folders, a simulated node with
// fault injection (through the sim library's own exports), and configs pointing at it.
#pragma once

#include <dlfcn.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include <doctest/doctest.h>

#include "agent/health/diagnostics.h"
#include "agent/host/agent_config.h"
#include "drivers/loader.h"
#include "sim/chip/kiln_sim_driver.h"
#include "tests/support/temp_dir.h"

namespace kiln::agent::testing {

using kiln::testing::TempDir;

inline std::string sim_library() { return std::string(KILN_LIB_DIR) + "/libkiln_sim_driver.so"; }
inline std::string check_program() { return std::string(KILN_BIN_DIR) + "/kiln-agent-check"; }


// A simulated node in a temporary folder. Opening it creates its state; the Driver it keeps is
// for the test's own calls (never on a chip the test hangs).
class SimNodeFixture {
 public:
  explicit SimNodeFixture(std::uint32_t chip_count = 2, const std::string& extra = "")
      : state_dir_(dir_.file("state")) {
    options_ = "state_dir=" + state_dir_ + ";chip_count=" + std::to_string(chip_count) +
               ";thermal_time_constant_ms=100;self_test_time_scale=0";
    if (!extra.empty()) options_ += ";" + extra;
    auto driver = drivers::Driver::load(sim_library(), options_);
    REQUIRE_MESSAGE(driver, (driver ? "" : driver.error().describe()));
    driver_ = std::move(*driver);
    library_ = ::dlopen(sim_library().c_str(), RTLD_NOW | RTLD_LOCAL);
    REQUIRE(library_ != nullptr);
    inject_ = reinterpret_cast<kiln_sim_inject_fault_fn>(
        ::dlsym(library_, KILN_SIM_INJECT_FAULT_SYMBOL));
    REQUIRE(::dlsym(library_, KILN_SIM_INJECT_FAULT_SYMBOL) != nullptr);
  }
  ~SimNodeFixture() {
    driver_.reset();
    if (library_ != nullptr) ::dlclose(library_);
  }
  SimNodeFixture(const SimNodeFixture&) = delete;
  SimNodeFixture& operator=(const SimNodeFixture&) = delete;

  void inject(std::uint32_t chip, const char* kind, double factor = 0,
              const char* mode = nullptr) {
    char error[512] = {0};
    const auto status = inject_(state_dir_.c_str(), chip, kind, factor, mode, error, sizeof error);
    REQUIRE_MESSAGE(status == KILN_DRIVER_OK, error);
  }

  drivers::Driver& driver() { return *driver_; }
  const TempDir& dir() const { return dir_; }
  const std::string& options() const { return options_; }

  // An agent config for this node: its driver, a work dir and a config path in the temp dir.
  AgentConfig config() const {
    AgentConfig config;
    config.config_path = dir_.file("agent.toml");
    config.node_id = "n07";
    config.driver_library_path = sim_library();
    config.driver_options = options_;
    config.work_dir = dir_.file("work");
    config.workloads["mlp"] = "/bin/true";
    return config;
  }

  // Diagnostics options for this node: its chip count, the built helper, short deadlines.
  health::DiagOptions diag_options() const {
    health::DiagOptions options;
    options.targets.expected_chip_count = driver_->chip_count().value();
    options.check_program = check_program();
    options.quick_check_timeout_ms = 5000;
    options.self_test_timeout_ms = {5000, 5000, 5000};
    options.kill_grace_ms = 200;
    return options;
  }

 private:
  TempDir dir_;
  std::string state_dir_;
  std::string options_;
  std::unique_ptr<drivers::Driver> driver_;
  void* library_ = nullptr;
  kiln_sim_inject_fault_fn inject_ = nullptr;
};

}  // namespace kiln::agent::testing

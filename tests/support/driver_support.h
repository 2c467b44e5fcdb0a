// Helpers shared by the driver loader and sim chip tests: temporary folders, idle child
// processes to bind, and the paths of the built backends.
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include <doctest/doctest.h>

#include "tests/support/temp_dir.h"

namespace kiln::drivers::testing {

using kiln::testing::TempDir;

inline std::string sim_library() { return std::string(KILN_LIB_DIR) + "/libkiln_sim_driver.so"; }
inline std::string cpu_library() { return std::string(KILN_LIB_DIR) + "/libkiln_cpu_driver.so"; }

inline std::string fake_library(const std::string& name) {
  return std::string(KILN_LIB_DIR) + "/libkiln_fake_driver_" + name + ".so";
}


// A child process that only waits, standing in for a workload bound to chips.
class IdleChild {
 public:
  IdleChild() {
    pid_ = ::fork();
    REQUIRE(pid_ >= 0);
    if (pid_ == 0) {
      for (;;) ::pause();
    }
  }
  ~IdleChild() { stop(); }
  IdleChild(const IdleChild&) = delete;
  IdleChild& operator=(const IdleChild&) = delete;

  pid_t pid() const { return pid_; }

  void stop() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }

 private:
  pid_t pid_ = -1;
};

inline void sleep_ms(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

// Options for a fast sim node in `dir`: telemetry settles within a few hundred milliseconds.
inline std::string fast_options(const TempDir& dir, const std::string& extra = "") {
  std::string out = "state_dir=" + (dir / "state").string() + ";thermal_time_constant_ms=100";
  if (!extra.empty()) out += ";" + extra;
  return out;
}

}  // namespace kiln::drivers::testing

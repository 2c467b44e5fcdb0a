// The unit tier's shell: loads each driver backend (drivers/loader.h), launches every selected
// test on it and judges the result against the golden computed on the host (unit_tier.h). It
// needs no chip of the pool: the backends are the CPU reference and the simulated chip.
#pragma once

#include <cstdint>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "common/error.h"
#include "qualification/unit_tier.h"

namespace kiln::qualification::shell {

struct UnitBackend {
  std::string name;     // "sim", "cpu": how reports name it
  std::string library;  // the backend's shared library
  std::string options;  // its open options
  std::uint32_t chip = 0;
};

// A backend shipped with the running binary: lib/lib<name>.so beside bin/ in the build tree, else
// in kiln's private library folder of the install (/usr/lib/<multiarch>/kiln/lib<name>.so).
std::string installed_backend(const std::string& name);

// Where the unit tier finds its backends (defaults: installed_backend).
struct UnitTierSetup {
  std::string sim_library;
  std::string cpu_library;
};
UnitTierSetup default_unit_tier_setup();

// The unit tier of one change of `bundle` (its changes from `history`), or of every test
// (`change_id` ""), in a private folder removed afterwards. Errc::not_found for a change the
// bundle or the history lacks; Errc::config for a backend that cannot be loaded.
Result<UnitTierReport> run_unit_tier(const Bundle& bundle, const std::vector<Change>& history,
                                     const std::string& change_id, const UnitTierSetup& setup);

// The two backends of the unit tier: the simulated chip (one chip, state in `work_dir`) and the
// CPU reference, both with `broken_kernels` (the bundle's kernel library, simulated).
std::vector<UnitBackend> unit_backends(const std::string& sim_library, const std::string& cpu_library,
                                       const std::filesystem::path& work_dir,
                                       const std::set<std::string>& broken_kernels);

// Runs every test on every backend. A backend that cannot be loaded is an error (nothing is
// judged on half the backends); a launch the backend refuses is that case's error.
Result<std::vector<UnitCaseResult>> run_unit_tests(const std::vector<const UnitTest*>& tests,
                                                   const std::vector<UnitBackend>& backends);

}  // namespace kiln::qualification::shell

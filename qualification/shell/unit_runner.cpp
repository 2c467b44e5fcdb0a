#include "qualification/shell/unit_runner.h"

#include <stdlib.h>

#include <algorithm>
#include <chrono>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/process/installed_file.h"
#include "drivers/loader.h"

namespace kiln::qualification::shell {

namespace fs = std::filesystem;

// The build tree keeps the backends in lib/ beside bin/; an installed kiln in its private library
// folder (KILN_BACKEND_DIR_FROM_BIN, from the install layout).
std::string installed_backend(const std::string& name) {
  const std::string file = "lib" + name + ".so";
  return process::installed_file("lib/" + file, std::string(KILN_BACKEND_DIR_FROM_BIN) + "/" + file);
}

UnitTierSetup default_unit_tier_setup() {
  return {installed_backend("kiln_sim_driver"), installed_backend("kiln_cpu_driver")};
}

namespace {

// A private folder for the simulated chip's state, removed when the tier ends.
class WorkDir {
 public:
  static Result<WorkDir> make() {
    std::string pattern = (fs::temp_directory_path() / "kiln-unit-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) {
      return fail(Errc::io, fmt::format("cannot create a folder under {} for the simulated chip; set TMPDIR to a "
                                        "writable folder",
                                        fs::temp_directory_path().string()));
    }
    return WorkDir(pattern);
  }
  WorkDir(WorkDir&& other) noexcept : path_(std::move(other.path_)) { other.path_.clear(); }
  WorkDir(const WorkDir&) = delete;
  WorkDir& operator=(const WorkDir&) = delete;
  WorkDir& operator=(WorkDir&&) = delete;
  ~WorkDir() {
    std::error_code ec;
    if (!path_.empty()) fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }

 private:
  explicit WorkDir(fs::path path) : path_(std::move(path)) {}
  fs::path path_;
};

}  // namespace

Result<UnitTierReport> run_unit_tier(const Bundle& bundle, const std::vector<Change>& history,
                                     const std::string& change_id, const UnitTierSetup& setup) {
  // The bundle's changes in its order: what its kernel library is built from.
  auto bundle_history = bundle_changes(history, bundle);
  if (!bundle_history) return tl::unexpected(bundle_history.error());
  const std::span<const Change> changes = *bundle_history;
  UnitTierReport report;
  report.bundle_id = bundle.id;
  UnitSelection selection;
  if (change_id.empty()) {
    selection = all_unit_tests(unit_tests());
  } else {
    auto it = std::find_if(changes.begin(), changes.end(), [&](const Change& c) { return c.id == change_id; });
    if (it == changes.end()) {
      return fail(Errc::not_found, fmt::format("change {} is not in bundle {}; give one of its changes (kiln bundle "
                                               "show {})",
                                               change_id, bundle.id.substr(0, 12), bundle.id.substr(0, 12)));
    }
    report.change_id = change_id;
    selection = select_unit_tests(*it, unit_tests());
  }
  report.selection = selection.why;
  auto work_dir = WorkDir::make();
  if (!work_dir) return tl::unexpected(work_dir.error());
  const auto backends =
      unit_backends(setup.sim_library, setup.cpu_library, work_dir->path(), sim_broken_kernels(changes));
  for (const auto& backend : backends) report.backends.push_back(backend.name);
  auto cases = run_unit_tests(selection.tests, backends);
  if (!cases) return tl::unexpected(cases.error());
  report.cases = std::move(*cases);
  return report;
}

std::vector<UnitBackend> unit_backends(const std::string& sim_library, const std::string& cpu_library,
                                       const std::filesystem::path& work_dir,
                                       const std::set<std::string>& broken_kernels) {
  const std::string broken =
      broken_kernels.empty() ? "" : fmt::format("broken_kernels={}", fmt::join(broken_kernels, ","));
  std::string sim_options = fmt::format("state_dir={};chip_count=1", (work_dir / "sim-node").string());
  if (!broken.empty()) sim_options += ";" + broken;
  return {{"sim", sim_library, sim_options, 0}, {"cpu", cpu_library, broken, 0}};
}

Result<std::vector<UnitCaseResult>> run_unit_tests(const std::vector<const UnitTest*>& tests,
                                                   const std::vector<UnitBackend>& backends) {
  std::vector<UnitCaseResult> results;
  if (tests.empty()) return results;
  for (const UnitBackend& backend : backends) {
    auto driver = drivers::Driver::load(backend.library, backend.options);
    if (!driver) {
      return fail(Errc::config, fmt::format("the unit tier's {} backend: {}", backend.name, driver.error().message));
    }
    for (const UnitTest* test : tests) {
      const auto started = std::chrono::steady_clock::now();
      const numerics::KernelLaunch launch = unit_test_launch(*test);
      auto golden = numerics::run_kernel(numerics::KernelContext{true, {}}, launch);
      if (!golden) return tl::unexpected(golden.error());  // the registry's own launch: a bug
      auto actual = (*driver)->run_kernel(backend.chip, launch);
      UnitCaseResult result = actual ? judge_unit_case(*test, backend.name, *golden, *actual)
                                     : UnitCaseResult{test->name, backend.name, false, true, actual.error().message, 0};
      result.duration_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                               std::chrono::steady_clock::now() - started)
                               .count();
      results.push_back(std::move(result));
    }
  }
  return results;
}

}  // namespace kiln::qualification::shell

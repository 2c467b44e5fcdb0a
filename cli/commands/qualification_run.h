// Asking for one qualification run (smoke, nightly, qualify-release): the run request goes to the
// coordinator, and kiln-qualifier drives it; with --wait the command follows the run's report
// until its verdict, which is the exit code (and the --junit file).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

#include "common/error.h"
#include "client/client.h"
#include "qualification/run_types.h"

namespace kiln::cli {

struct RunOptions {
  std::string bundle;
  std::string change;  // smoke: the change under test (default: the bundle's last)
  std::string junit_path;
  std::string run_id;
  std::uint32_t soak_rounds = 2;
  std::uint32_t repeats = 10;
  std::uint32_t max_jobs = 32;
  std::uint32_t max_models = 0;  // 0: all the tier selects
  bool wait = false;
  bool no_accept = false;
  std::string perf_rule;  // "sequential" or "fixed"; empty: the tier's
};

// What can be checked without the coordinator: the --junit file can be written (Errc::config,
// exit 2); it is left as it was.
Status check_run_locally(const RunOptions& options);
// The same for any output file given with `option` (--junit, --html; "" for none).
Status check_output_path(std::string_view option, const std::string& path);

// Records the request and prints the run id; with --wait, follows the run to its verdict.
int run_qualification(const RunOptions& options, qualification::Tier tier, Client& client, bool json);
// Follows a run (one not recorded yet included: a scheduled nightly) to its verdict: prints its
// summary (or report, with json), writes the JUnit file if a path is given; the exit code is the verdict.
int follow_to_verdict(Client& client, const std::string& run_id, const std::string& junit_path, bool json);
// The exit code of a run's recorded report (qualification/run_verdict.h): 0 passed or still
// running, 1 failed (a regression), 2 error (it could not be carried out; says why on stderr).
int verdict_exit_code(const nlohmann::json& report);

}  // namespace kiln::cli

// Carrying out one qualification run from the kiln command (smoke, nightly, qualify-release):
// the checks made before any job is submitted, then the run in the foreground (with the
// release's soak, flaky-test tickets, JUnit and the new baseline) or again in the background.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "common/error.h"
#include "coordinator/cli/client.h"
#include "coordinator/cli/commands/qualification_options.h"
#include "coordinator/qualification/model_set.h"
#include "coordinator/qualification/run_types.h"

namespace kiln::cli {

struct RunOptions {
  std::string bundle;
  std::string change;  // smoke: the change under test (default: the bundle's last)
  std::string model_set_path;
  std::string workload_catalog_path;  // empty: the sim's workloads
  BuilderOptions builder;             // also the bundle directory
  std::string golden_dir;
  std::string tickets_dir;
  std::string junit_path;
  std::string webhook_config;
  std::string run_id;
  std::string log_path;
  std::uint32_t soak_rounds = 2;
  std::uint32_t repeats = 10;
  std::size_t max_jobs = 32;
  std::size_t max_models = 0;  // 0: all the tier selects
  bool wait = false;
  bool no_accept = false;
};

// What can be checked without the coordinator, in the order a person would fix it: every
// path is given, the model set is readable and matches the fleet's workloads, the golden
// directory exists and is not empty, and the --junit file can be written. Errc::config or
// invalid_argument (exit 2).
Result<qualification::ModelSet> check_run_locally(const RunOptions& options);

// The caller's role may submit every class the tier's jobs use (Errc::unauthorized, exit 3).
Status check_run_role(Client& client, qualification::Tier tier);

// Runs it: in the foreground with --wait (the exit code is the verdict), else again in the
// background with a log.
int run_qualification(const RunOptions& options, qualification::Tier tier, const qualification::ModelSet& set,
                      Client& client, bool json, int argc, char** argv);

}  // namespace kiln::cli

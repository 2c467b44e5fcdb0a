// Verified installs of firmware and driver packages: the shell around FirmwareInstall (the
// driver does each step) and the driver installer run (by argv, under a deadline, through
// ProcessRunner). Every call blocks until the install ended: the agent runs them from a child
// process. docs/health.md, "Installs", describes the steps and outcomes.
#pragma once

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include "common/health/check_result.h"
#include "agent/health/diagnostics.h"
#include "agent/host/agent_config.h"
#include "agent/install/firmware_install.h"
#include "agent/install/package.h"
#include "common/enum_names.h"
#include "common/error.h"
#include "common/time.h"
#include "drivers/loader.h"

namespace kiln::agent::install {

struct InstallOptions {
  // Where verified copies of packages are kept while they install; empty means
  // <work_dir>/install (or a folder under the system's temp dir).
  std::string staging_dir;
  std::uint64_t size_limit_bytes = kDefaultPackageSizeLimitBytes;
  // Driver installers: a hard deadline, then SIGTERM to their process group and SIGKILL after
  // the grace.
  DurationMs installer_timeout_ms = 30 * kMinuteMs;
  DurationMs installer_kill_grace_ms = 10 * kSecondMs;
  // Arguments after the installer's own path (docs/health.md: "Driver installer contract").
  std::vector<std::string> installer_args;
  // The agent's [driver] options, for the installer (KILN_DRIVER_OPTIONS): they name the device
  // or, on the sim, the node's state directory.
  std::string driver_options;
  // The post-install health check: level 1 diagnostics, which include the probes.
  health::DiagOptions diag;
};

enum class InstallOutcome {
  installed,          // the new version runs and passed its health check
  already_installed,  // it already ran everywhere; nothing was done
  refused,            // the package or request was refused before anything ran
  not_installed,      // a step failed before the node ran the new version; nothing to undo
  rolled_back,        // the new firmware failed and every chip runs its previous image again
  quarantined,        // the node may run a half-installed stack: it must not take work
};
constexpr EnumTable<InstallOutcome, 6> enum_names(InstallOutcome) {
  return {{
      {InstallOutcome::installed, "installed"},
      {InstallOutcome::already_installed, "already_installed"},
      {InstallOutcome::refused, "refused"},
      {InstallOutcome::not_installed, "not_installed"},
      {InstallOutcome::rolled_back, "rolled_back"},
      {InstallOutcome::quarantined, "quarantined"},
  }};
}
inline std::string_view to_string(InstallOutcome value) { return enum_name(value); }

struct InstallReport {
  PackageKind kind = PackageKind::firmware;
  std::string version;
  std::string package_path;
  std::string sha256;
  std::string node;
  InstallOutcome outcome = InstallOutcome::refused;
  // False only when the install may have left a half-installed stack (quarantine).
  bool fit_for_work = true;
  std::string reason;  // why it ended as it did; empty for a plain success
  std::vector<InstallStep> steps;
  std::vector<std::string> previous_versions;  // firmware: what each chip ran before
  std::optional<int> installer_exit_code;      // driver: the installer's exit code
  std::string installer_output;                // driver: the tail of its stdout and stderr
  std::vector<kiln::health::CheckResult> health_results;  // the post-install check's results
  TimeMs started_at_ms = 0;  // wall clock, milliseconds since the epoch
  TimeMs finished_at_ms = 0;
};

// Runs the post-install health check; run_install uses run_diagnostics at level 1.
using HealthCheck = std::function<Result<kiln::health::DiagReport>()>;

// verify -> read slots -> flash standby on every chip -> activate -> health check -> keep or
// roll back, driving FirmwareInstall with the driver. The package file is the image.
InstallReport install_firmware(drivers::Driver& driver, const PackageEntry& entry,
                               const InstallOptions& options, const HealthCheck& health_check);

// verify -> run the installer by argv with a deadline -> health check. An installer that
// fails or overruns leaves the node quarantined: it may have installed half a driver.
InstallReport install_driver(const PackageEntry& entry, const InstallOptions& options,
                             const HealthCheck& health_check);

// Loads the node's driver (firmware) and runs the right install with level 1 diagnostics as
// the health check. The report's node is config.node_id.
InstallReport run_install(const AgentConfig& config, const PackageEntry& entry,
                          const InstallOptions& options);

// Options from the agent's config: staging under work_dir, diagnostics as for `diag`.
Result<InstallOptions> default_install_options(const AgentConfig& config);

std::string format_install_json(const InstallReport& report);
std::string format_install_text(const InstallReport& report);

// `kiln-agent install --kind firmware|driver --version V --sha256 HEX PACKAGE [--json]`.
// Exit code: 0 installed (or already installed); 1 not installed and the node still runs its
// previous stack (refused, rolled back, nothing to undo, or the install could not start);
// 2 the node was left unfit for work (quarantined).
int run_install_command(const AgentConfig& config, const std::string& package_path,
                        const std::string& kind, const std::string& version,
                        const std::string& sha256, bool json, std::ostream& out,
                        std::ostream& err);

}  // namespace kiln::agent::install

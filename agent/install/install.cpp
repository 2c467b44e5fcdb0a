#include "agent/install/install.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <ostream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/process/process_runner.h"

namespace kiln::agent::install {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// How much of an installer's output the report keeps.
constexpr std::size_t kInstallerOutputLimitBytes = 64 * 1024;
// Failing health results named in a step message; the report holds them all.
constexpr std::size_t kFailuresNamed = 5;

TimeMs wall_clock_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string staging_dir_of(const InstallOptions& options) {
  if (!options.staging_dir.empty()) return options.staging_dir;
  return (fs::temp_directory_path() / ("kiln-install-" + std::to_string(::getuid()))).string();
}

InstallReport start_report(const PackageEntry& entry) {
  InstallReport report;
  report.kind = entry.kind;
  report.version = entry.version;
  report.package_path = entry.path;
  report.sha256 = entry.sha256;
  report.started_at_ms = wall_clock_ms();
  return report;
}

void add_step(InstallReport& report, std::string step, std::optional<std::uint32_t> chip,
              StepStatus status, std::string message) {
  report.steps.push_back(InstallStep{std::move(step), chip, status, std::move(message),
                                     wall_clock_ms()});
}

// "fail (20 pass, 0 warn, 4 fail, 0 skip): link [chip 1] link_down, ..."
std::string health_summary(const kiln::health::DiagReport& diag) {
  std::string out = std::string(kiln::health::to_string(diag.verdict)) + " (" +
                    kiln::health::summarize(diag.results) + ")";
  std::size_t named = 0;
  for (const auto& result : diag.results) {
    if (result.status != kiln::health::CheckStatus::fail || named == kFailuresNamed) continue;
    out += (named++ == 0 ? ": " : ", ") + result.check +
           (result.chip ? " [chip " + std::to_string(*result.chip) + "]" : "") + " " +
           result.reason_code;
  }
  return out;
}

struct HealthOutcome {
  kiln::health::CheckStatus verdict = kiln::health::CheckStatus::skip;
  std::string summary;
};

HealthOutcome check_health(const HealthCheck& health_check, InstallReport& report) {
  auto diag = health_check();
  if (!diag) return {kiln::health::CheckStatus::skip, "could not run: " + diag.error().describe()};
  report.health_results = diag->results;
  return {diag->verdict, health_summary(*diag)};
}

void finish(InstallReport& report) { report.finished_at_ms = wall_clock_ms(); }

void remove_staged(const std::string& path) {
  if (path.empty()) return;
  std::error_code ignored;
  fs::remove(path, ignored);
}

Result<ChipFirmwareState> read_chip(drivers::Driver& driver, std::uint32_t chip) {
  auto slots = driver.firmware_slots(chip);
  if (!slots) return tl::unexpected(slots.error());
  auto binding = driver.chip_binding(chip);
  if (!binding) return tl::unexpected(binding.error());
  return ChipFirmwareState{slots->active_version(), *binding};
}

json step_json(const InstallStep& step) {
  json out = {{"step", step.step},
              {"chip", nullptr},
              {"status", std::string(to_string(step.status))},
              {"message", step.message},
              {"at", kiln::health::format_timestamp_utc(step.at_ms)}};
  if (step.chip) out["chip"] = *step.chip;
  return out;
}

}  // namespace

InstallReport install_firmware(drivers::Driver& driver, const PackageEntry& entry,
                               const InstallOptions& options, const HealthCheck& health_check) {
  KILN_ASSERT(entry.kind == PackageKind::firmware, "install_firmware takes firmware packages");
  InstallReport report = start_report(entry);
  auto capabilities = driver.capabilities();
  if (!capabilities || !capabilities->firmware_install) {
    report.outcome = InstallOutcome::refused;
    report.reason = capabilities
                        ? fmt::format("the driver {} declares no firmware installs (its backend has no firmware slots, "
                                      "as the CPU backend): nothing was flashed; install firmware {} on a node whose "
                                      "chips have firmware",
                                      driver.library_path(), entry.version)
                        : "cannot read what the driver can do: " + capabilities.error().message;
    add_step(report, "capabilities", std::nullopt, StepStatus::failed, report.reason);
    finish(report);
    return report;
  }
  auto chip_count = driver.chip_count();
  if (!chip_count || *chip_count == 0) {
    report.outcome = InstallOutcome::not_installed;
    report.reason = chip_count ? "the driver reports no chips; nothing to flash"
                               : "cannot count the chips: " + chip_count.error().message;
    add_step(report, "read_slots", std::nullopt, StepStatus::failed, report.reason);
    finish(report);
    return report;
  }

  FirmwareInstall machine(entry.version, *chip_count);
  std::string staged;
  bool activated_any = false;
  while (!machine.finished()) {
    const FirmwareAction action = machine.next_action();
    const std::uint32_t chip = action.chip.value_or(0);
    switch (action.kind) {
      case FirmwareAction::Kind::verify: {
        auto path = stage_package(entry, staging_dir_of(options), options.size_limit_bytes);
        if (path) staged = *path;
        machine.on_verified(path ? Status{} : Status(tl::unexpected(path.error())),
                            wall_clock_ms());
        break;
      }
      case FirmwareAction::Kind::read_slots:
        machine.on_slots_read(chip, read_chip(driver, chip), wall_clock_ms());
        break;
      case FirmwareAction::Kind::flash:
        machine.on_flashed(chip, driver.flash_standby(chip, staged, entry.version),
                           wall_clock_ms());
        break;
      case FirmwareAction::Kind::activate: {
        auto before = driver.firmware_slots(chip);
        auto result = driver.activate_standby(chip);
        bool switched = static_cast<bool>(result);
        if (!result) {
          // A failed activation may still have switched the chip; roll it back if so.
          auto after = driver.firmware_slots(chip);
          switched = !before || !after || after->active != before->active;
        }
        activated_any = activated_any || switched;
        machine.on_activated(chip, result, switched, wall_clock_ms());
        break;
      }
      case FirmwareAction::Kind::health_check: {
        const HealthOutcome health = check_health(health_check, report);
        machine.on_health_checked(health.verdict, health.summary, wall_clock_ms());
        break;
      }
      case FirmwareAction::Kind::rollback:
        machine.on_rolled_back(chip, driver.rollback_firmware(chip), wall_clock_ms());
        break;
      case FirmwareAction::Kind::done: break;
    }
  }
  remove_staged(staged);

  report.steps = machine.steps();
  report.previous_versions = machine.previous_versions();
  report.reason = machine.reason();
  report.fit_for_work = machine.fit_for_work();
  switch (machine.phase()) {
    case FirmwarePhase::kept:
      report.outcome = activated_any ? InstallOutcome::installed : InstallOutcome::already_installed;
      break;
    case FirmwarePhase::unchanged:
      report.outcome = !report.steps.empty() && report.steps.front().step == "verify" &&
                               report.steps.front().status == StepStatus::failed
                           ? InstallOutcome::refused
                           : InstallOutcome::not_installed;
      break;
    case FirmwarePhase::rolled_back: report.outcome = InstallOutcome::rolled_back; break;
    case FirmwarePhase::quarantined: report.outcome = InstallOutcome::quarantined; break;
    default: KILN_ASSERT(false, "the loop ends only in a final phase");
  }
  finish(report);
  return report;
}

InstallReport install_driver(const PackageEntry& entry, const InstallOptions& options,
                             const HealthCheck& health_check) {
  KILN_ASSERT(entry.kind == PackageKind::driver, "install_driver takes driver packages");
  InstallReport report = start_report(entry);
  const std::string staging_dir = staging_dir_of(options);
  auto staged = stage_package(entry, staging_dir, options.size_limit_bytes);
  if (!staged) {
    add_step(report, "verify", std::nullopt, StepStatus::failed, staged.error().describe());
    report.outcome = InstallOutcome::refused;
    report.reason = "package refused before anything ran: " + staged.error().message;
    finish(report);
    return report;
  }
  add_step(report, "verify", std::nullopt, StepStatus::ok, "SHA-256 matches the bundle");

  ProcessSpec spec;
  spec.program = *staged;
  spec.args = options.installer_args;
  spec.env_extra = {{"KILN_PACKAGE_KIND", "driver"},
                    {"KILN_PACKAGE_VERSION", entry.version},
                    {"KILN_PACKAGE_SHA256", entry.sha256},
                    {"KILN_DRIVER_OPTIONS", options.driver_options}};
  spec.work_dir = (fs::path(staging_dir) / "run").string();
  spec.timeout_ms = options.installer_timeout_ms;
  spec.kill_grace_ms = options.installer_kill_grace_ms;
  spec.output_limit_bytes = kInstallerOutputLimitBytes;
  auto exit = run_to_completion(spec);
  remove_staged(*staged);
  if (!exit || exit->outcome == ProcessOutcome::failed_to_start) {
    const std::string why = exit ? exit->detail : exit.error().describe();
    add_step(report, "run_installer", std::nullopt, StepStatus::failed, why);
    report.outcome = InstallOutcome::not_installed;
    report.reason = "the driver installer did not start (" + why + "); nothing was installed";
    finish(report);
    return report;
  }
  if (!exit->output_path.empty()) remove_staged(exit->output_path);
  report.installer_output = exit->output_tail;
  if (exit->outcome == ProcessOutcome::exited && exit->term_signal == 0) {
    report.installer_exit_code = exit->exit_code;
  }
  if (!exit->succeeded()) {
    add_step(report, "run_installer", std::nullopt, StepStatus::failed, exit->detail);
    report.outcome = InstallOutcome::quarantined;
    report.fit_for_work = false;
    report.reason = "the driver installer for " + entry.version + " failed (" + exit->detail +
                    "); the driver may be half-installed, so the node must not take work: "
                    "install a known-good driver with kiln-agent install --kind driver";
    finish(report);
    return report;
  }
  add_step(report, "run_installer", std::nullopt, StepStatus::ok, exit->detail);

  const HealthOutcome health = check_health(health_check, report);
  if (health.verdict == kiln::health::CheckStatus::pass || health.verdict == kiln::health::CheckStatus::warn) {
    add_step(report, "health_check", std::nullopt, StepStatus::ok, health.summary);
    report.outcome = InstallOutcome::installed;
    if (health.verdict == kiln::health::CheckStatus::warn) {
      report.reason = "installed driver " + entry.version + " with health warnings: " +
                      health.summary;
    }
  } else {
    add_step(report, "health_check", std::nullopt, StepStatus::failed, health.summary);
    report.outcome = InstallOutcome::quarantined;
    report.fit_for_work = false;
    report.reason = "driver " + entry.version + " installed but the post-install health check " +
                    health.summary + "; the node must not take work: install a known-good driver "
                    "with kiln-agent install --kind driver, or drain the node for the lab";
  }
  finish(report);
  return report;
}

InstallReport run_install(const AgentConfig& config, const PackageEntry& entry,
                          const InstallOptions& options) {
  const HealthCheck health_check = [&]() { return health::run_diagnostics(config, 1, options.diag); };
  if (entry.kind == PackageKind::driver) {
    InstallReport report = install_driver(entry, options, health_check);
    report.node = config.node_id;
    return report;
  }
  // Refuse a bad package before touching the driver, so a tampered image is reported as such
  // even on a node whose driver does not load.
  if (auto ok = verify_package(entry, options.size_limit_bytes); !ok) {
    InstallReport report = start_report(entry);
    report.node = config.node_id;
    add_step(report, "verify", std::nullopt, StepStatus::failed, ok.error().describe());
    report.outcome = InstallOutcome::refused;
    report.reason = "package refused before anything ran: " + ok.error().message;
    finish(report);
    return report;
  }
  auto driver = drivers::Driver::load(config.driver_library_path, config.driver_options);
  if (!driver) {
    InstallReport report = start_report(entry);
    report.node = config.node_id;
    add_step(report, "load_driver", std::nullopt, StepStatus::failed, driver.error().describe());
    report.outcome = InstallOutcome::not_installed;
    report.reason = "cannot load the chip driver to flash firmware: " + driver.error().message;
    finish(report);
    return report;
  }
  InstallReport report = install_firmware(**driver, entry, options, health_check);
  report.node = config.node_id;
  return report;
}

Result<InstallOptions> default_install_options(const AgentConfig& config) {
  InstallOptions options;
  auto diag = health::default_diag_options(config);
  if (!diag) return tl::unexpected(diag.error());
  options.diag = std::move(*diag);
  if (!config.work_dir.empty()) {
    options.staging_dir = (fs::path(config.work_dir) / "install").string();
  }
  options.installer_kill_grace_ms = config.knobs.kill_grace_ms;
  options.driver_options = config.driver_options;
  return options;
}

std::string format_install_json(const InstallReport& report) {
  json steps = json::array();
  for (const auto& step : report.steps) steps.push_back(step_json(step));
  json health_results = json::array();
  for (const auto& result : report.health_results) {
    health_results.push_back(json::parse(kiln::health::check_result_to_json(result)));
  }
  json out = {{"kind", std::string(to_string(report.kind))},
              {"version", report.version},
              {"package_path", report.package_path},
              {"sha256", report.sha256},
              {"node", report.node},
              {"outcome", std::string(to_string(report.outcome))},
              {"fit_for_work", report.fit_for_work},
              {"reason", report.reason},
              {"previous_versions", report.previous_versions},
              {"installer_exit_code", nullptr},
              {"installer_output", report.installer_output},
              {"steps", std::move(steps)},
              {"health_results", std::move(health_results)},
              {"started_at", kiln::health::format_timestamp_utc(report.started_at_ms)},
              {"finished_at", kiln::health::format_timestamp_utc(report.finished_at_ms)}};
  if (report.installer_exit_code) out["installer_exit_code"] = *report.installer_exit_code;
  return out.dump(2, ' ', false, json::error_handler_t::replace) + "\n";
}

std::string format_install_text(const InstallReport& report) {
  std::string out = std::string(to_string(report.kind)) + " " + report.version + " on node " +
                    (report.node.empty() ? "(unnamed)" : report.node) + ": " +
                    std::string(to_string(report.outcome)) +
                    (report.fit_for_work ? "" : " (NODE UNFIT FOR WORK)") + "\n";
  if (!report.reason.empty()) out += report.reason + "\n";
  out += "\n";
  for (const auto& step : report.steps) {
    std::string subject = step.step + (step.chip ? " [chip " + std::to_string(*step.chip) + "]" : "");
    subject.resize(std::max<std::size_t>(subject.size(), 20), ' ');
    out += "  " + kiln::health::format_timestamp_utc(step.at_ms) + "  " + subject + " " +
           std::string(to_string(step.status)) + "  " + step.message + "\n";
  }
  if (report.installer_exit_code) {
    out += "\ninstaller exit code " + std::to_string(*report.installer_exit_code) + "\n";
  }
  if (!report.installer_output.empty()) {
    out += "installer output (tail):\n" + report.installer_output;
    if (report.installer_output.back() != '\n') out += "\n";
  }
  return out;
}

int run_install_command(const AgentConfig& config, const std::string& package_path,
                        const std::string& kind, const std::string& version,
                        const std::string& sha256, bool json_output, std::ostream& out,
                        std::ostream& err) {
  auto package_kind = parse_package_kind(kind);
  if (!package_kind) {
    err << "kiln-agent install: " << package_kind.error().describe() << "\n";
    return 1;
  }
  std::error_code ec;
  const std::string absolute = fs::absolute(package_path, ec).string();
  const PackageEntry entry{*package_kind, version, ec ? package_path : absolute, sha256};
  if (auto ok = validate_entry(entry); !ok) {
    err << "kiln-agent install: " << ok.error().describe() << "\n";
    return 1;
  }
  auto options = default_install_options(config);
  if (!options) {
    err << "kiln-agent install: " << options.error().describe() << "\n";
    return 1;
  }
  const InstallReport report = run_install(config, entry, *options);
  out << (json_output ? format_install_json(report) : format_install_text(report));
  if (!report.fit_for_work) return 2;
  return report.outcome == InstallOutcome::installed ||
                 report.outcome == InstallOutcome::already_installed
             ? 0
             : 1;
}

}  // namespace kiln::agent::install

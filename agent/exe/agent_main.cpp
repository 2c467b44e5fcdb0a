// kiln-agent: the privileged per-node agent. See docs/operations.md.
#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <functional>
#include <iostream>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <sstream>

#include "agent/artifacts/artifact_cache.h"
#include "agent/health/diagnostics.h"
#include "agent/host/agent_config.h"
#include "agent/host/containment.h"
#include "agent/host/topology.h"
#include "agent/install/install.h"
#include "agent/shell/agent_shell.h"
#include "agent/shell/agent_status.h"
#include "agent/shell/local_socket.h"
#include "agent/shell/maintenance.h"
#include "common/text/duration_text.h"
#include "common/text/progress_line.h"
#include "common/version.h"

namespace {

kiln::TimeMs wall_clock_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::atomic<bool> g_stop{false};

void request_stop(int) { g_stop.store(true); }

constexpr int kExitProblem = 1;
constexpr int kExitConfig = 2;  // a restart cannot fix it: systemd's RestartPreventExitStatus=2

std::size_t count_lines(const std::string& text) {
  return text.empty() ? 0 : static_cast<std::size_t>(std::count(text.begin(), text.end(), '\n')) + 1;
}

// Every problem in one run: the file's, then those of the files it names; the driver and the
// job containment are read only from a file without problems.
int check_config(const std::string& config_path) {
  const kiln::agent::AgentConfigReading reading = kiln::agent::read_agent_config(config_path);
  const kiln::agent::AgentConfig& config = reading.config;
  std::size_t problems = reading.problems.size();
  for (const std::string& problem : reading.problems) std::cout << problem << "\n";
  if (reading.problems.empty()) std::cout << kiln::agent::describe_agent_config(config);
  // A file that could not be read or parsed names nothing to check.
  if (!config.config_path.empty()) {
    if (auto env = kiln::agent::check_agent_environment(config, kiln::agent::KeyContents::read); !env) {
      std::cout << env.error().message << "\n";
      problems += count_lines(env.error().message);
    }
  }
  if (!reading.problems.empty()) {
    std::cout << problems << " problem(s) in " << config_path
              << "; fix them and run `kiln-agent check-config` again (the driver is read once the file has none)\n";
    return kExitConfig;
  }
  if (auto found = kiln::agent::discover_identity(config)) {
    std::cout << "driver: " << found->identity.driver_version << ", " << found->identity.chips.size()
              << " chips of revision " << found->identity.hardware_revision << "\n";
    for (const auto& [chip, why] : found->unhealthy_chips) {
      std::cout << "driver: chip " << chip << " would be reported unhealthy: " << why << "\n";
      ++problems;
    }
  } else {
    std::cout << "driver: " << found.error().message << "\n";
    ++problems;
  }
  if (auto containment = kiln::agent::check_containment(config)) {
    std::cout << kiln::agent::describe_containment(*containment) << "\n";
  } else {
    std::cout << containment.error().message << "\n";
    ++problems;
  }
  if (auto topology = kiln::agent::discover_topology()) {
    std::cout << kiln::agent::describe_topology(*topology);
  }
  std::cout << (problems == 0 ? "configuration OK\n" : "configuration has problems (see above)\n");
  return problems == 0 ? 0 : kExitConfig;
}

// Asks the running agent what it is doing: 0 it answered, 1 no agent runs here, 2 it could not
// be asked.
int status(const kiln::agent::AgentConfig& config, bool json) {
  constexpr int kStatusReplyTimeoutMs = 10000;
  auto reply = kiln::agent::ask_running_agent(config.local_socket_path, "status", 0, kStatusReplyTimeoutMs);
  if (!reply) {
    std::fprintf(stderr, "kiln-agent status: no agent is running on this host (nothing listens on %s, the "
                         "local_socket.path of %s); start it, e.g. systemctl start kiln-agent\n",
                 config.local_socket_path.c_str(), config.config_path.c_str());
    return kExitProblem;
  }
  if (!*reply) {
    std::fprintf(stderr, "kiln-agent status: %s\n", reply->error().message.c_str());
    return kExitConfig;
  }
  if (json) {
    std::cout << (*reply)->output << "\n";
    return 0;
  }
  auto text = kiln::agent::status_text((*reply)->output);
  if (!text) {
    std::fprintf(stderr, "kiln-agent status: the agent's answer was not a status document; is it the same version "
                         "as this command (kiln-agent --version)?\n");
    return kExitConfig;
  }
  std::cout << *text;
  return 0;
}

// As a built-in job the agent asks for the JSON report in KILN_RESULT_FILE; the same text
// goes to the output the job keeps.
int run_as_job(const std::function<int(std::ostream&)>& command) {
  std::ostringstream report;
  const int code = command(report);
  std::cout << report.str();
  const char* result_file = std::getenv("KILN_RESULT_FILE");
  if (result_file && !kiln::agent::write_result_file(result_file, report.str(), std::cerr)) return 2;
  return code;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"kiln-agent: owns this host's chips for kiln"};
  app.set_version_flag("--version", kiln::version_text("kiln-agent"));
  std::string config_path = "/etc/kiln/agent.toml";
  app.add_option("--config", config_path, "agent.toml to use")->capture_default_str();
  app.fallthrough();  // --config may also follow the subcommand
  auto* check = app.add_subcommand("check-config", "validate the configuration, the keys and the driver, then exit");

  auto* diag = app.add_subcommand("diag", "run diagnostics on this host's chips (through the running agent when "
                                          "there is one); exit 0 pass or warn, 1 fail, 2 could not run");
  int diag_level = 1;
  bool json = false;
  bool standalone = false;
  bool as_job = false;
  diag->add_option("--level", diag_level, "1: seconds (software, config); 2: adds memory and interconnect; "
                                          "3: adds the compute stress")
      ->check(CLI::Range(1, 3))
      ->capture_default_str();
  diag->add_flag("--json", json, "print the report as JSON");
  diag->add_flag("--standalone", standalone, "run here even when an agent is running");
  diag->add_flag("--job", as_job, "run as the agent's built-in kiln.diag job")->group("");
  bool no_progress = false;
  diag->add_flag("--no-progress", no_progress, "say nothing while the checks run (the agent's own runs)")->group("");

  auto* status_command = app.add_subcommand("status", "what the running agent is doing now: its coordinator "
                                                     "connection, each chip's owner, running jobs and installs, the "
                                                     "last probe");
  status_command->add_flag("--json", json, "print the status as JSON");

  auto* probe = app.add_subcommand("probe", "run the cheap health probes once; exit 0 pass or warn, 1 fail");
  probe->add_flag("--json", json, "print the health report as JSON");
  std::vector<std::uint32_t> unprobed_chips;
  probe->add_option("--skip-chips", unprobed_chips, "chips not to probe (the agent's unresponsive ones), e.g. 3,5")
      ->delimiter(',');

  auto* install = app.add_subcommand("install", "verify and install a firmware or driver package; exit 0 "
                                                "installed, 1 not installed, 2 node left unfit");
  std::string package, kind = "firmware", version, sha256;
  install->add_option("PACKAGE", package, "the firmware image or driver installer")->required();
  install->add_option("--kind", kind, "firmware or driver")->capture_default_str();
  install->add_option("--version", version, "the version the package installs")->required();
  install->add_option("--sha256", sha256, "the package's digest from its bundle")->required();
  install->add_flag("--json", json, "print the report as JSON");
  install->add_flag("--job", as_job, "run as the agent's built-in kiln.install job")->group("");
  auto* fetch = app.add_subcommand("fetch-artifacts", "fetch artifacts into the host's cache by digest and verify "
                                                    "them; exit 0 all there, 1 one could not be had");
  std::vector<std::string> artifact_specs;
  fetch->add_option("ARTIFACT", artifact_specs, "NAME=SHA256:SIZE or SHA256:SIZE")->required();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : kExitConfig;  // --help and --version exit 0
  }

  if (check->parsed()) return check_config(config_path);
  auto config = kiln::agent::load_agent_config(config_path);
  if (!config) {
    std::fprintf(stderr, "kiln-agent: %s\n", config.error().message.c_str());
    return kExitConfig;
  }
  if (status_command->parsed()) return status(*config, json);
  if (probe->parsed()) {
    return kiln::agent::run_probe_command(*config, {unprobed_chips.begin(), unprobed_chips.end()}, json, std::cout,
                                          std::cerr);
  }
  if (diag->parsed()) {
    if (as_job) {
      return run_as_job([&](std::ostream& out) {
        return kiln::agent::health::run_diag_command(*config, diag_level, true, out, std::cerr);
      });
    }
    kiln::ProgressLine progress = kiln::ProgressLine::for_stderr();
    const kiln::TimeMs started_ms = wall_clock_ms();
    if (!standalone) {
      // Through the running agent, so diagnostics do not race its jobs for the chips.
      constexpr int kDiagReplyTimeoutMs = 2 * 3600 * 1000;
      // The agent runs them in a child of its own: what is known here is the level's deadlines.
      const auto options = kiln::agent::health::default_diag_options(*config);
      const kiln::DurationMs deadline_ms =
          !options ? 0
          : diag_level >= 2 ? options->self_test_timeout_ms[static_cast<std::size_t>(std::min(diag_level, 3) - 1)]
                            : options->quick_check_timeout_ms;
      const auto waiting = [&](kiln::DurationMs waited_ms) {
        progress.show(fmt::format("level {} diagnostics of every chip, run by the agent on this host (each check "
                                  "of the level has up to {})",
                                  diag_level, kiln::duration_text(static_cast<std::uint64_t>(deadline_ms))),
                      waited_ms, wall_clock_ms());
      };
      if (auto reply = kiln::agent::ask_running_agent(config->local_socket_path, "diag", diag_level,
                                                      kDiagReplyTimeoutMs, waiting)) {
        progress.done();
        if (!*reply) {
          std::fprintf(stderr, "kiln-agent diag: %s\n", reply->error().message.c_str());
          return 2;
        }
        std::cout << (*reply)->output;
        return (*reply)->exit_code;
      }
    }
    // Run here: each stage's checks done and planned, and the ones running, as they go.
    const auto told = [&](const kiln::agent::health::DiagProgress& at) {
      progress.show(fmt::format("level {} diagnostics: {} of {} checks of this stage done{}{}", diag_level,
                                at.checks_done, at.checks_planned, at.running.empty() ? "" : "; running: ",
                                fmt::join(at.running, ", ")),
                    wall_clock_ms() - started_ms, wall_clock_ms());
    };
    const int code = kiln::agent::health::run_diag_command(
        *config, diag_level, json, std::cout, std::cerr,
        no_progress ? std::function<void(const kiln::agent::health::DiagProgress&)>{} : told);
    progress.done();
    return code;
  }
  if (fetch->parsed()) return kiln::agent::artifacts::run_fetch_command(*config, artifact_specs, std::cout, std::cerr);
  if (install->parsed()) {
    auto command = [&](std::ostream& out, bool as_json) {
      return kiln::agent::install::run_install_command(*config, package, kind, version, sha256, as_json, out,
                                                       std::cerr);
    };
    if (as_job) return run_as_job([&](std::ostream& out) { return command(out, true); });
    return command(std::cout, json);
  }

  struct sigaction sa {};
  sa.sa_handler = request_stop;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);

  if (auto keys = kiln::agent::check_agent_keys(*config); !keys) {
    std::fprintf(stderr, "kiln-agent: %s\n", keys.error().message.c_str());
    return kExitConfig;
  }
  auto shell = kiln::agent::AgentShell::create(std::move(*config));
  if (!shell) {
    std::fprintf(stderr, "kiln-agent: %s\n", shell.error().message.c_str());
    return shell.error().code == kiln::Errc::config ? kExitConfig : kExitProblem;
  }
  if (auto s = (*shell)->run(g_stop); !s) {
    std::fprintf(stderr, "kiln-agent: %s\n", s.error().message.c_str());
    return kExitProblem;
  }
  return 0;
}

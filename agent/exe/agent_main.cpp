// kiln-agent: the privileged per-node agent. See docs/operations.md.
#include <csignal>
#include <cstdio>
#include <iostream>

#include <CLI/CLI.hpp>

#include "agent/host/agent_config.h"
#include "agent/host/topology.h"
#include "agent/shell/agent_shell.h"
#include "drivers/loader.h"

namespace {

std::atomic<bool> g_stop{false};

void request_stop(int) { g_stop.store(true); }

int check_config(const kiln::agent::AgentConfig& config) {
  std::cout << kiln::agent::describe_agent_config(config);
  int problems = 0;
  if (auto env = kiln::agent::check_agent_environment(config); !env) {
    std::cout << env.error().message << "\n";
    ++problems;
  }
  auto driver = kiln::drivers::Driver::load(config.driver_library_path, config.driver_options);
  if (!driver) {
    std::cout << "driver: " << driver.error().message << "\n";
    ++problems;
  } else if (auto identity = kiln::agent::discover_identity(config, **driver)) {
    std::cout << "driver: " << identity->driver_version << ", " << identity->chips.size() << " chips of revision "
              << identity->hardware_revision << "\n";
  } else {
    std::cout << "driver: " << identity.error().message << "\n";
    ++problems;
  }
  if (auto topology = kiln::agent::discover_topology()) {
    std::cout << kiln::agent::describe_topology(*topology);
  }
  std::cout << (problems == 0 ? "configuration OK\n" : "configuration has problems (see above)\n");
  return problems == 0 ? 0 : 2;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"kiln-agent: owns this host's chips for kiln"};
  std::string config_path = "/etc/kiln/agent.toml";
  app.add_option("--config", config_path, "agent.toml to use")->capture_default_str();
  auto* check = app.add_subcommand("check-config", "validate the configuration, the keys and the driver, then exit");
  CLI11_PARSE(app, argc, argv);

  auto config = kiln::agent::load_agent_config(config_path);
  if (!config) {
    std::fprintf(stderr, "kiln-agent: %s\n", config.error().message.c_str());
    return 2;
  }
  if (check->parsed()) return check_config(*config);

  struct sigaction sa {};
  sa.sa_handler = request_stop;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);

  auto shell = kiln::agent::AgentShell::create(std::move(*config));
  if (!shell) {
    std::fprintf(stderr, "kiln-agent: %s\n", shell.error().message.c_str());
    return 1;
  }
  if (auto s = (*shell)->run(g_stop); !s) {
    std::fprintf(stderr, "kiln-agent: %s\n", s.error().message.c_str());
    return 1;
  }
  return 0;
}

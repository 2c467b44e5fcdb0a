// kiln-coordinator: leases nodes, dispatches jobs, keeps results. See docs/operations.md.
#include <csignal>
#include <cstdio>

#include <CLI/CLI.hpp>

#include "coordinator/shell/server.h"

namespace {

std::atomic<bool> g_stop{false};

void request_stop(int) { g_stop.store(true); }

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"kiln-coordinator: the kiln fleet coordinator"};
  std::string config_path = "/etc/kiln/coordinator.toml";
  app.add_option("--config", config_path, "coordinator.toml to use")->capture_default_str();
  auto* check = app.add_subcommand("check-config", "load the configuration, print what it says, and exit");
  CLI11_PARSE(app, argc, argv);

  auto config = kiln::coordinator::load_coordinator_config(config_path);
  if (!config) {
    std::fprintf(stderr, "kiln-coordinator: %s\n", config.error().message.c_str());
    return 2;
  }
  if (check->parsed()) {
    std::printf("%s: OK\n  agents connect to  %s\n  clients connect to %s\n  database           %s\n"
                "  authorized keys    %zu\n  heartbeat          %u ms, lost after %u missed\n",
                config_path.c_str(), config->agent_endpoint.c_str(), config->client_endpoint.c_str(),
                config->database.c_str(), config->keys_by_public_key.size(), config->knobs.heartbeat_interval_ms,
                config->knobs.liveness_missed_beats);
    return 0;
  }

  struct sigaction sa {};
  sa.sa_handler = request_stop;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);

  auto server = kiln::coordinator::CoordinatorServer::create(std::move(*config));
  if (!server) {
    std::fprintf(stderr, "kiln-coordinator: %s\n", server.error().message.c_str());
    return 1;
  }
  if (auto s = (*server)->run(g_stop); !s) {
    std::fprintf(stderr, "kiln-coordinator: %s\n", s.error().message.c_str());
    return 1;
  }
  return 0;
}

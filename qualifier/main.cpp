// kiln-qualifier: drives the qualification runs asked of the coordinator. See docs/operations.md.
#include <csignal>
#include <cstdio>

#include <CLI/CLI.hpp>

#include "common/version.h"
#include "qualifier/qualifier.h"

namespace {

std::atomic<bool> g_stop{false};

void request_stop(int) { g_stop.store(true); }

constexpr int kExitProblem = 1;
constexpr int kExitConfig = 2;  // a restart cannot fix it: systemd's RestartPreventExitStatus=2

int print_config_problems(const std::string& config_path, const kiln::Error& error) {
  std::fprintf(stderr, "%s\n", error.message.c_str());
  std::fprintf(stderr, "kiln-qualifier: fix %s and run `kiln-qualifier --config %s check-config` again\n",
               config_path.c_str(), config_path.c_str());
  return kExitConfig;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"kiln-qualifier: drives the qualification runs (smoke, nightly, release) asked of the coordinator"};
  app.set_version_flag("--version", kiln::version_text("kiln-qualifier"));
  app.fallthrough();  // --config may also follow the subcommand
  std::string config_path = "/etc/kiln/qualifier.toml";
  app.add_option("--config", config_path, "qualifier.toml to use")->capture_default_str();
  auto* check = app.add_subcommand("check-config", "load the configuration, the model set, the goldens, the ticket "
                                                   "sink, the report directory and the keys, print what they say, "
                                                   "and exit");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : kExitConfig;
  }
  auto config = kiln::qualifier::load_qualifier_config(config_path);
  if (!config) return print_config_problems(config_path, config.error());
  auto setup = kiln::qualifier::check_setup(*config);
  if (!setup) return print_config_problems(config_path, setup.error());
  const auto& set = setup->set;
  if (check->parsed()) {
    const std::string register_text =
        config->risk_register.empty()
            ? std::string("none ([qualifier] risk_register)")
            : config->risk_register + " (" + std::to_string(setup->risks.risks.size()) + " risks)";
    const std::string metrics = config->http_listen.empty() ? std::string("not served (no [http] listen)")
                                                            : "http://" + config->http_listen + "/metrics";
    std::printf("%s: OK\n  name            %s\n  coordinator     %s\n  model set       %s (%zu models)\n"
                "  bundle dir      %s\n  golden dir      %s\n  tickets dir     %s%s\n  claims          %lld ms\n"
                "  runs at once    %u\n  metrics         %s\n  report pages    %s\n  risk register   %s\n",
                config_path.c_str(), config->name.c_str(), config->client.coordinator_endpoint.c_str(),
                config->model_set.c_str(), set.models.size(), config->bundle_dir.c_str(), config->golden_dir.c_str(),
                config->tickets_dir.c_str(),
                config->webhook_config.empty() ? "" : (" (and the webhook of " + config->webhook_config + ")").c_str(),
                static_cast<long long>(config->claim_ms), config->max_runs, metrics.c_str(),
                config->reports_dir.empty() ? "none ([reports] directory)" : config->reports_dir.c_str(),
                register_text.c_str());
    return 0;
  }
  struct sigaction sa {};
  sa.sa_handler = request_stop;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  if (auto ok = kiln::qualifier::run_qualifier(*config, *setup, g_stop); !ok) {
    std::fprintf(stderr, "kiln-qualifier: %s\n", ok.error().message.c_str());
    return ok.error().code == kiln::Errc::unauthorized ? kExitConfig : kExitProblem;
  }
  return 0;
}

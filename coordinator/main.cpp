// kiln-coordinator: leases nodes, dispatches jobs, keeps results. See docs/operations.md.
#include <algorithm>
#include <csignal>
#include <cstdio>
#include <filesystem>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "coordinator/server/server.h"
#include "coordinator/store/copy_store.h"
#include "coordinator/store/store.h"
#include "common/version.h"

namespace {

std::atomic<bool> g_stop{false};

void request_stop(int) { g_stop.store(true); }

constexpr int kExitProblem = 1;
constexpr int kExitConfig = 2;  // a restart cannot fix it: systemd's RestartPreventExitStatus=2

int print_error(const kiln::Error& error, int status) {
  std::fprintf(stderr, "kiln-coordinator: %s\n", error.message.c_str());
  return status;
}

// Every problem of the configuration, one a line, and what to do.
int print_config_problems(const std::string& config_path, const kiln::Error& error) {
  const std::string& problems = error.message;
  std::fprintf(stderr, "%s\n", problems.c_str());
  const auto count = std::count(problems.begin(), problems.end(), '\n') + 1;
  std::fprintf(stderr, "kiln-coordinator: %ld problem(s) in %s; fix them and run `kiln-coordinator --config %s "
                       "check-config` again\n",
               static_cast<long>(count), config_path.c_str(), config_path.c_str());
  return kExitConfig;
}

// Reads the database without writing to it and says what to do about what it finds.
int check_store(const kiln::Result<kiln::coordinator::StoreCheck>& check, bool sqlite) {
  if (!check) return print_error(check.error(), check.error().code == kiln::Errc::not_found ? kExitConfig : kExitProblem);
  std::printf("%s\n", check->summary.c_str());
  if (check->problems.empty()) {
    std::printf(sqlite ? "OK: SQLite's integrity check and kiln's own checks found nothing wrong\n"
                       : "OK: kiln's own checks found nothing wrong\n");
    return 0;
  }
  for (const std::string& problem : check->problems) std::printf("  %s\n", problem.c_str());
  std::printf(sqlite ? "%zu problem(s). Stop the coordinator, keep a copy of the file, restore it from your latest "
                       "backup and run check-store on what you restored before starting the coordinator on it.\n"
                     : "%zu problem(s). Stop the coordinator, restore the database from your latest backup and run "
                       "check-store on what you restored before starting the coordinator on it.\n",
              check->problems.size());
  return kExitProblem;
}

// Copies the configured store into an empty PostgreSQL database (docs/operations.md, "Moving
// from SQLite to PostgreSQL").
int migrate_store(const std::string& config_path, const kiln::coordinator::PostgresLocation& target) {
  namespace coord = kiln::coordinator;
  auto config = coord::load_coordinator_config(config_path);
  if (!config) return print_config_problems(config_path, config.error());
  if (auto problem = coord::postgres_url_problem(target.url)) {
    return print_error(kiln::Error{kiln::Errc::config, "--to: " + *problem}, kExitConfig);
  }
  if (!target.password_file.empty()) {
    if (auto problem = coord::postgres_password_file_problem(target.password_file)) {
      return print_error(kiln::Error{kiln::Errc::config, "--password-file: " + *problem}, kExitConfig);
    }
  }
  if (config->store_backend == coord::StoreBackend::sqlite && !std::filesystem::exists(config->database)) {
    return print_error(kiln::Error{kiln::Errc::not_found,
                                   "there is no SQLite database at " + config->database + " to migrate; check "
                                   "[coordinator] database in " + config_path},
                       kExitConfig);
  }
  auto from = config->store_backend == coord::StoreBackend::postgresql ? coord::open_postgres_store(config->postgres)
                                                                       : coord::open_sqlite_store(config->database);
  if (!from) return print_error(from.error(), kExitProblem);
  auto to = coord::open_postgres_store(target);
  if (!to) return print_error(to.error(), kExitProblem);
  const std::string into = coord::postgres_server_name(target);
  std::printf("copying the %s into the %s\n", coord::store_description(*config).c_str(), into.c_str());
  auto copied = coord::copy_store(**from, **to, [](const std::string& step) { std::printf("  %s\n", step.c_str()); });
  if (!copied) return print_error(copied.error(), kExitProblem);
  std::printf("copied %s; read back from the target, every count matches.\nNow set [store] backend = \"postgresql\" "
              "and its url in %s, and start the coordinator.\n",
              coord::to_string(*copied).c_str(), config_path.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"kiln-coordinator: the kiln fleet coordinator"};
  app.set_version_flag("--version", kiln::version_text("kiln-coordinator"));
  app.fallthrough();  // --config may also follow the subcommand
  std::string config_path = "/etc/kiln/coordinator.toml";
  auto* config_option = app.add_option("--config", config_path, "coordinator.toml to use")->capture_default_str();
  auto* check = app.add_subcommand("check-config", "load the configuration and the secret key, print what they say, "
                                                   "and exit");
  auto* store_check = app.add_subcommand("check-store", "check the store read-only: SQLite's integrity check "
                                                        "and kiln's own, and say what to do");
  std::string database;
  store_check->add_option("--database", database, "the database to check (default: the one coordinator.toml names)")
      ->excludes(config_option);
  auto* migrate = app.add_subcommand("migrate-store", "copy the store coordinator.toml names into an empty "
                                                     "PostgreSQL database (stop the coordinator first)");
  kiln::coordinator::PostgresLocation target;
  migrate->add_option("--to", target.url, "the target: a libpq connection string or postgresql:// URI, without a "
                                          "password")
      ->required();
  migrate->add_option("--password-file", target.password_file, "a file holding the target role's password (mode 0600)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : kExitConfig;  // --help and --version exit 0
  }

  if (store_check->parsed() && !database.empty()) return check_store(kiln::coordinator::check_sqlite_store(database), true);
  if (store_check->parsed()) {
    auto config = kiln::coordinator::load_coordinator_config(config_path);
    if (!config) return print_config_problems(config_path, config.error());
    if (config->store_backend == kiln::coordinator::StoreBackend::postgresql) {
      return check_store(kiln::coordinator::check_postgres_store(config->postgres), false);
    }
    return check_store(kiln::coordinator::check_sqlite_store(config->database), true);
  }
  if (migrate->parsed()) return migrate_store(config_path, target);
  // What the coordinator would refuse at start, check-config refuses too, and both with status 2.
  auto config = kiln::coordinator::load_coordinator_config_to_start(config_path);
  if (!config) return print_config_problems(config_path, config.error());
  if (check->parsed()) {
    const std::string approvers =
        config->waiver_register
            ? fmt::format("the [[team]]s of {} ({} team{})", config->risk_register,
                          config->waiver_register->teams.size(), config->waiver_register->teams.size() == 1 ? "" : "s")
            : std::string("none: no waiver is taken ([coordinator] risk_register)");
    const std::string metrics =
        config->http_listen.empty() ? std::string("not served (no [http] listen)") : "http://" + config->http_listen + "/metrics";
    std::printf("%s: OK\n  agents connect to  %s\n  clients connect to %s\n  store              %s\n"
                "  authorized keys    %zu\n  heartbeat          %u ms, lost after %u missed\n  log level          %s\n"
                "  metrics            %s\n  waiver approvers   %s\n",
                config_path.c_str(), config->agent_endpoint.c_str(), config->client_endpoint.c_str(),
                kiln::coordinator::store_description(*config).c_str(), config->authorized_keys.size(),
                config->knobs.heartbeat_interval_ms, config->knobs.liveness_missed_beats, config->log_level.c_str(),
                metrics.c_str(), approvers.c_str());
    return 0;
  }

  struct sigaction sa {};
  sa.sa_handler = request_stop;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);

  auto server = kiln::coordinator::CoordinatorServer::create(std::move(*config), g_stop);
  if (!server) return print_error(server.error(), kExitProblem);
  if (!*server) return 0;  // stopped while standing by
  if (auto s = (*server)->run(g_stop); !s) return print_error(s.error(), kExitProblem);
  return 0;
}

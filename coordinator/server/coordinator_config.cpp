#include "coordinator/server/coordinator_config.h"

#include <unistd.h>

#include <filesystem>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/config/endpoint.h"
#include "common/config/toml_errors.h"
#include "common/http/listen_address.h"
#include "common/logging.h"
#include "coordinator/scheduler/knobs_toml.h"

namespace kiln::coordinator {
namespace {

namespace fs = std::filesystem;
using config::where;

// Reads one table's keys into the config, recording every problem rather than stopping at the
// first; unknown keys are problems too, so a misspelt knob never goes unnoticed.
class TableReader {
 public:
  TableReader(config::Problems& problems, const toml::table& table, std::string name)
      : problems_(problems), table_(table), name_(std::move(name)) {}

  void string(const char* key, std::string& out) {
    seen_.insert(key);
    const toml::node* node = table_.get(key);
    if (!node) return;
    if (!node->is_string()) return bad(*node, fmt::format("{} must be a string", key));
    out = node->as_string()->get();
  }

  template <class I>
  void integer(const char* key, I& out, std::int64_t min, std::int64_t max) {
    seen_.insert(key);
    const toml::node* node = table_.get(key);
    if (!node) return;
    if (!node->is_integer()) return bad(*node, fmt::format("{} must be an integer", key));
    std::int64_t v = node->as_integer()->get();
    if (v < min || v > max) return bad(*node, fmt::format("{} must be between {} and {} (got {})", key, min, max, v));
    out = static_cast<I>(v);
  }

  void no_unknown_keys() {
    const std::vector<std::string_view> known(seen_.begin(), seen_.end());
    problems_.unknown_keys(table_, "[" + name_ + "]", known);
  }

  // Where `key` is set, for checks on its value; the table's own position if it is not.
  const toml::source_region& region(const char* key) const {
    const auto it = table_.find(key);
    return it != table_.end() ? it->first.source() : table_.source();
  }
  std::string origin(const char* key) const { return where(problems_.source(), region(key)); }

  void bad(const toml::node& node, std::string_view what) { problems_.at(node.source(), what); }
  void bad_at(const char* key, std::string_view what) { problems_.at(region(key), what); }

 private:
  config::Problems& problems_;
  const toml::table& table_;
  std::string name_;
  std::set<std::string> seen_;
};

std::string resolve(const fs::path& base, const std::string& path) {
  if (path.empty() || fs::path(path).is_absolute()) return path;
  return (base / path).lexically_normal().string();
}

void read_coordinator_table(config::Problems& problems, const toml::table& root, const fs::path& base,
                            bool check_files, CoordinatorConfig& config) {
  const toml::table* t = root["coordinator"].as_table();
  if (!t) {
    problems.add("missing the [coordinator] table; it needs at least secret_key_file (docs/operations.md)");
    return;
  }
  TableReader r(problems, *t, "coordinator");
  r.string("agent_endpoint", config.agent_endpoint);
  r.string("client_endpoint", config.client_endpoint);
  r.string("secret_key_file", config.secret_key_file);
  r.string("database", config.database);
  r.string("log_level", config.log_level);
  r.integer("max_message_bytes", config.max_message_bytes, 4096, 64 << 20);
  r.string("artifact_dir", config.artifact_dir);
  r.integer("max_artifact_bytes", config.max_artifact_bytes, 1, std::int64_t{1} << 40);
  r.string("risk_register", config.risk_register);
  r.no_unknown_keys();
  for (const char* key : {"agent_endpoint", "client_endpoint"}) {
    const std::string& endpoint = key == std::string_view("agent_endpoint") ? config.agent_endpoint
                                                                            : config.client_endpoint;
    if (auto problem = config::tcp_endpoint_problem(endpoint, /*binds=*/true)) {
      r.bad_at(key, fmt::format("{} \"{}\" {}", key, endpoint, *problem));
    }
  }
  if (std::find(log_level_names().begin(), log_level_names().end(), config.log_level) == log_level_names().end()) {
    r.bad_at("log_level", fmt::format("log_level '{}' is not one of {}", config.log_level, fmt::join(log_level_names(), ", ")));
  }
  config.secret_key_file_origin = r.origin("secret_key_file");
  if (config.secret_key_file.empty()) {
    r.bad_at("secret_key_file", "[coordinator] needs secret_key_file; make one with `kiln keygen --out coordinator`");
  } else {
    config.secret_key_file = resolve(base, config.secret_key_file);
    if (check_files) {
      if (auto keys = load_coordinator_keys(config); !keys) problems.add_located(r.region("secret_key_file").begin,
                                                                                 keys.error().message);
    }
  }
  if (!config.risk_register.empty()) {
    config.risk_register = resolve(base, config.risk_register);
    if (check_files) {
      // The register's own problems name its file and lines; they stop the coordinator as the
      // config's do, since a waiver would otherwise be judged against a register no one checked.
      if (auto reg = qualification::load_risk_register_file(config.risk_register)) {
        config.waiver_register = std::make_shared<const qualification::RiskRegister>(std::move(*reg));
      } else {
        problems.add_located(r.region("risk_register").begin, reg.error().message);
      }
    }
  }
  if (!config.artifact_dir.empty()) {
    config.artifact_dir = resolve(base, config.artifact_dir);
  } else if (config.store_backend == StoreBackend::postgresql) {
    config.artifact_dir = resolve(base, "artifacts");
  } else if (config.database != ":memory:") {
    config.artifact_dir = resolve(base, config.database) + ".artifacts";
  }
  if (config.store_backend == StoreBackend::postgresql) {
    if (t->contains("database")) {
      r.bad_at("database", "database is the SQLite store's file, and [store] chooses PostgreSQL; remove database "
                           "(artifact_dir says where artifacts go)");
    }
  } else if (config.database != ":memory:") {
    config.database = resolve(base, config.database);
    const fs::path dir = fs::path(config.database).parent_path();
    std::error_code ec;
    if (check_files && !fs::is_directory(dir, ec)) {
      r.bad_at("database", fmt::format("database {}: the directory {} does not exist; create it (the coordinator "
                                       "makes the database file, not its directory) or fix the path",
                                       config.database, dir.string()));
    } else if (check_files && ::access(dir.c_str(), W_OK | X_OK) != 0) {
      r.bad_at("database", fmt::format("database {}: the directory {} is not writable by this user; the coordinator "
                                       "writes the database and its journal there",
                                       config.database, dir.string()));
    }
  }
}

// [store]: which store keeps what the coordinator acknowledges. Read before [coordinator], whose
// database is the SQLite store's file.
void read_store_table(config::Problems& problems, const toml::table& root, const fs::path& base, bool check_files,
                      CoordinatorConfig& config) {
  const toml::table* t = root["store"].as_table();
  if (!t) return;
  TableReader r(problems, *t, "store");
  std::string backend(enum_name(config.store_backend));
  r.string("backend", backend);
  r.string("url", config.postgres.url);
  r.string("password_file", config.postgres.password_file);
  r.no_unknown_keys();
  if (auto parsed = enum_from_name<StoreBackend>(backend)) {
    config.store_backend = *parsed;
  } else {
    const auto near = config::nearest_name(backend, {"sqlite", "postgresql"});
    r.bad_at("backend", fmt::format("backend '{}' is not one of sqlite, postgresql{}", backend,
                                    near ? fmt::format(" (did you mean '{}'?)", *near) : ""));
    return;
  }
  if (config.store_backend == StoreBackend::sqlite) {
    for (const char* key : {"url", "password_file"}) {
      if (t->contains(key)) {
        r.bad_at(key, fmt::format("{} is for backend = \"postgresql\"; set backend, or remove {} to keep the "
                                  "SQLite store ([coordinator] database)",
                                  key, key));
      }
    }
    return;
  }
  if (config.postgres.url.empty()) {
    r.bad_at("url", "backend = \"postgresql\" needs url, a libpq connection string such as "
                    "\"host=db.example.com dbname=kiln user=kiln\" (docs/operations.md, \"PostgreSQL\")");
  } else if (auto problem = postgres_url_problem(config.postgres.url)) {
    r.bad_at("url", "url " + *problem);
  }
  if (!config.postgres.password_file.empty()) {
    config.postgres.password_file = resolve(base, config.postgres.password_file);
    if (check_files) {
      if (auto problem = postgres_password_file_problem(config.postgres.password_file)) r.bad_at("password_file", *problem);
    }
  }
}

void read_knobs_table(config::Problems& problems, const toml::table& root, CoordinatorKnobs& k) {
  const toml::table* t = root["knobs"].as_table();
  if (!t) return;
  TableReader r(problems, *t, "knobs");
  r.integer("heartbeat_interval_ms", k.heartbeat_interval_ms, 50, 60000);
  r.integer("liveness_missed_beats", k.liveness_missed_beats, 2, 100);
  r.integer("restart_grace_ms", k.restart_grace_ms, 0, 3600000);
  r.integer("max_queued_jobs", k.max_queued_jobs, 1, 1000000);
  r.integer("max_jobs_listed", k.max_jobs_listed, 1, 1000);
  r.integer("ended_jobs_in_memory", k.ended_jobs_in_memory, 1, 10000000);
  if (k.ended_jobs_in_memory < k.max_jobs_listed) {
    r.bad_at("ended_jobs_in_memory",
             fmt::format("ended_jobs_in_memory {} is below max_jobs_listed {}: `kiln jobs` lists from the jobs held in "
                         "memory; raise ended_jobs_in_memory or lower max_jobs_listed",
                         k.ended_jobs_in_memory, k.max_jobs_listed));
  }
  r.integer("job_timeout_slack_ms", k.job_timeout_slack_ms, 0, 3600000);
  r.integer("quarantine_release_min_diag_level", k.quarantine_release_min_diag_level, 1, 3);
  r.integer("flap_window_ms", k.flap_window_ms, 0, 30LL * 24 * 3600 * 1000);
  r.integer("quarantine_rerun_window_ms", k.quarantine_rerun_window_ms, 0, 7LL * 24 * 3600 * 1000);
  r.integer("max_active_leases", k.max_active_leases, 1, 100000);
  r.integer("max_ended_leases_kept", k.max_ended_leases_kept, 0, 100000);
  r.integer("max_lease_watches", k.max_lease_watches, 1, 100000);
  r.integer("max_job_watches", k.max_job_watches, 1, 100000);
  r.integer("max_job_watches_per_client", k.max_job_watches_per_client, 1, 10000);
  r.integer("rendezvous_port_first", k.rendezvous_port_first, 1024, 65535);
  r.integer("rendezvous_port_count", k.rendezvous_port_count, 1, 64512);
  if (std::uint64_t{k.rendezvous_port_first} + k.rendezvous_port_count - 1 > 65535) {
    r.bad_at("rendezvous_port_count",
             fmt::format("rendezvous_port_first {} plus rendezvous_port_count {} runs past port 65535; "
                         "lower one of them",
                         k.rendezvous_port_first, k.rendezvous_port_count));
  }
  r.no_unknown_keys();
}

void read_environments_table(config::Problems& problems, const toml::table& root, const fs::path& base,
                             bool check_files, CoordinatorConfig& config) {
  const toml::table* t = root["environments"].as_table();
  if (!t) return;
  TableReader r(problems, *t, "environments");
  r.string("repo", config.environments_repo);
  r.string("branch", config.environments_branch);
  r.integer("poll_interval_ms", config.environments_poll_interval_ms, 100, 3600000);
  r.integer("wave_size", config.knobs.rollout_wave_size, 1, 10000);
  r.no_unknown_keys();
  if (config.environments_repo.empty()) {
    r.bad_at("repo", "[environments] needs repo: a clone of the environments repository (docs/releases.md)");
    return;
  }
  config.environments_repo = resolve(base, config.environments_repo);
  std::error_code ec;
  if (check_files && !fs::is_directory(config.environments_repo, ec)) {
    r.bad_at("repo", fmt::format("repo {} is not a directory; clone the environments repository there or fix the "
                                 "path",
                                 config.environments_repo));
  }
  if (config.environments_branch.empty()) r.bad_at("branch", "branch must name the branch to watch, such as \"main\"");
}

void read_http_table(config::Problems& problems, const toml::table& root, CoordinatorConfig& config) {
  const toml::node* http = root.get("http");
  if (!http) return;
  const toml::table* t = http->as_table();
  if (!t) return problems.at(http->source(), "http must be a table ([http])");
  TableReader r(problems, *t, "http");
  r.string("listen", config.http_listen);
  r.no_unknown_keys();
  if (config.http_listen.empty()) {
    r.bad_at("listen", "[http] needs listen: where /metrics is served, as in listen = \"127.0.0.1:9470\"");
  } else if (auto address = http::parse_listen_address(config.http_listen); !address) {
    r.bad_at("listen", "listen " + address.error().message);
  }
}

// The scheduler's loader stops at its first problem. To report them all, a table it refuses is
// read again one entry at a time (one class of a per-class table at a time): each alone says
// what is wrong with it. The entries are moved out, which keeps their positions.
void read_scheduler_table(config::Problems& problems, toml::table& scheduler, scheduler::SchedulerKnobs& out) {
  auto knobs = scheduler::parse_scheduler_knobs(scheduler, problems.source());
  if (knobs) {
    out = std::move(*knobs);
    return;
  }
  for (auto&& [key, node] : scheduler) {
    std::vector<toml::table> singles;
    const auto single = [&](const toml::key& name, toml::node& value) {
      toml::table one;
      value.visit([&](auto& v) { one.insert(name, std::move(v)); });
      return one;
    };
    if (toml::table* per_class = node.as_table(); per_class && !per_class->empty()) {
      for (auto&& [sub_key, sub_node] : *per_class) {
        toml::table outer;
        outer.insert(key, single(sub_key, sub_node));
        singles.push_back(std::move(outer));
      }
    } else {
      singles.push_back(single(key, node));
    }
    for (const toml::table& one : singles) {
      if (auto alone = scheduler::parse_scheduler_knobs(one, problems.source()); !alone) {
        problems.add_located(key.source().begin, alone.error().message);
      }
    }
  }
}

void read_keys(config::Problems& problems, const toml::table& root, const fs::path& base, CoordinatorConfig& config) {
  const toml::node* keys = root.get("keys");
  if (!keys) return;
  const toml::array* list = keys->as_array();
  if (!list) return problems.at(keys->source(), "keys must be an array of tables ([[keys]])");
  for (const toml::node& entry : *list) {
    const toml::table* t = entry.as_table();
    if (!t) {
      problems.at(entry.source(), "each [[keys]] entry must be a table");
      continue;
    }
    TableReader r(problems, *t, "keys");
    AuthorizedKey key;
    std::string role;
    std::string public_key_file;
    r.string("name", key.name);
    r.string("role", role);
    r.string("public_key", key.public_key);
    r.string("public_key_file", public_key_file);
    r.no_unknown_keys();
    const std::size_t before = problems.size();
    if (key.name.empty() || key.name.size() > 64) r.bad(entry, "each [[keys]] entry needs a name of 1 to 64 characters");
    auto parsed_role = protocol::enum_from_name<protocol::Role>(role);
    if (parsed_role) {
      key.role = *parsed_role;
    } else {
      r.bad(entry, fmt::format("key '{}' has role '{}'; use one of agent, ci, developer, ops, lab, admin", key.name,
                               role));
    }
    if (key.public_key.empty() == public_key_file.empty()) {
      r.bad(entry, fmt::format("key '{}' needs exactly one of public_key or public_key_file", key.name));
      continue;
    }
    if (!public_key_file.empty()) {
      auto loaded = load_public_key_file(resolve(base, public_key_file));
      if (!loaded) {
        r.bad_at("public_key_file", fmt::format("public_key_file of key '{}': {}", key.name, loaded.error().message));
        continue;
      }
      key.public_key = *loaded;
    }
    if (!is_z85_key(key.public_key)) {
      r.bad(entry, fmt::format("key '{}' is not a 40-character Z85 CURVE public key", key.name));
    } else if (config.key_index_by_public_key.count(key.public_key)) {
      r.bad(entry, fmt::format("key '{}' repeats a public key listed earlier; one key, one role", key.name));
    } else if (problems.size() == before) {
      config.key_index_by_public_key.emplace(key.public_key, config.authorized_keys.size());
      config.authorized_keys.push_back(std::move(key));
    }
  }
}

Result<CoordinatorConfig> read_coordinator_config(std::string_view text, const std::string& path, bool check_files) {
  auto parsed = config::parse_toml(text, path, "fix the file and run `kiln-coordinator check-config` again");
  if (!parsed) return fail(Errc::config, parsed.error().message);
  toml::table& root = *parsed;
  const fs::path base = fs::absolute(path).parent_path();
  CoordinatorConfig config;
  config.source_path = path;
  config::Problems problems(path);

  static const std::vector<std::string_view> tables = {"coordinator", "knobs",        "scheduler", "keys",
                                                       "environments", "http", "store"};
  for (const auto& [key, node] : root) {
    if (std::find(tables.begin(), tables.end(), key.str()) == tables.end()) {
      const auto near = config::nearest_name(key.str(), tables);
      problems.at(key.source(), fmt::format("unknown table '{}'{}; expected [coordinator], [knobs], [scheduler], "
                                            "[environments], [http], [store] and [[keys]]",
                                            key.str(), near ? fmt::format(" (did you mean '{}'?)", *near) : ""));
    }
  }
  read_store_table(problems, root, base, check_files, config);
  read_coordinator_table(problems, root, base, check_files, config);
  read_knobs_table(problems, root, config.knobs);
  read_environments_table(problems, root, base, check_files, config);
  read_http_table(problems, root, config);
  if (toml::node* scheduler = root.get("scheduler")) {
    if (toml::table* t = scheduler->as_table()) {
      read_scheduler_table(problems, *t, config.knobs.scheduler);
    } else {
      problems.at(scheduler->source(), "scheduler must be a table ([scheduler])");
    }
  }
  read_keys(problems, root, base, config);
  if (auto s = problems.status(); !s) return tl::unexpected(s.error());
  return config;
}

Result<CoordinatorConfig> read_coordinator_file(const std::string& path, bool check_files) {
  auto text = config::read_text_file(path, "the coordinator config", "pass the coordinator's config with --config");
  if (!text) return fail(Errc::config, text.error().message);
  return read_coordinator_config(*text, path, check_files);
}

}  // namespace

Result<CoordinatorConfig> load_coordinator_config(const std::string& path) {
  return read_coordinator_file(path, /*check_files=*/false);
}

Result<CoordinatorConfig> coordinator_config_from_text(std::string_view text, const std::string& path) {
  return read_coordinator_config(text, path, /*check_files=*/false);
}

Result<CoordinatorConfig> load_coordinator_config_to_start(const std::string& path) {
  return read_coordinator_file(path, /*check_files=*/true);
}

std::string store_description(const CoordinatorConfig& config) {
  if (config.store_backend == StoreBackend::postgresql) return postgres_server_name(config.postgres);
  return "SQLite database " + config.database;
}

Result<KeyPair> load_coordinator_keys(const CoordinatorConfig& config) {
  auto keys = load_secret_key_file(config.secret_key_file);
  if (!keys) {
    const bool missing = keys.error().code == Errc::io;
    return fail(Errc::config, fmt::format("{}: secret_key_file: {}{}", config.secret_key_file_origin,
                                          keys.error().message,
                                          missing ? "; make the keypair with `kiln keygen --out coordinator` or fix "
                                                    "the path"
                                                  : ""));
  }
  return keys;
}

}  // namespace kiln::coordinator

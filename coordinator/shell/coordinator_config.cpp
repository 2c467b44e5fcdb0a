#include "coordinator/shell/coordinator_config.h"

#include <filesystem>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/config/endpoint.h"
#include "common/config/toml_errors.h"
#include "coordinator/scheduler/knobs_toml.h"

namespace kiln::coordinator {
namespace {

namespace fs = std::filesystem;
using config::where;

// What make_logger accepts.
const std::vector<std::string_view>& log_levels() {
  static const std::vector<std::string_view> levels = {"trace", "debug", "info", "warn", "error", "critical", "off"};
  return levels;
}

// Reads one table's keys, refusing unknown ones so a misspelt knob never goes unnoticed.
class TableReader {
 public:
  TableReader(const std::string& file, const toml::table& table, std::string name)
      : file_(file), table_(table), name_(std::move(name)) {}

  Status string(const char* key, std::string& out) {
    seen_.insert(key);
    const toml::node* node = table_.get(key);
    if (!node) return {};
    if (!node->is_string()) return bad(*node, fmt::format("{} must be a string", key));
    out = node->as_string()->get();
    return {};
  }

  template <class I>
  Status integer(const char* key, I& out, std::int64_t min, std::int64_t max) {
    seen_.insert(key);
    const toml::node* node = table_.get(key);
    if (!node) return {};
    if (!node->is_integer()) return bad(*node, fmt::format("{} must be an integer", key));
    std::int64_t v = node->as_integer()->get();
    if (v < min || v > max) return bad(*node, fmt::format("{} must be between {} and {} (got {})", key, min, max, v));
    out = static_cast<I>(v);
    return {};
  }

  Status no_unknown_keys() {
    const std::vector<std::string_view> known(seen_.begin(), seen_.end());
    return config::check_known_keys(file_, table_, "[" + name_ + "]", known);
  }

  // Where `key` is set, for checks on its value; the table's own position if it is not.
  std::string origin(const char* key) const {
    const auto it = table_.find(key);
    return where(file_, it != table_.end() ? it->first.source() : table_.source());
  }

  tl::unexpected<Error> bad(const toml::node& node, const std::string& what) const {
    return fail(Errc::config, fmt::format("{}: {}", where(file_, node.source()), what));
  }

 private:
  const std::string& file_;
  const toml::table& table_;
  std::string name_;
  std::set<std::string> seen_;
};

std::string resolve(const fs::path& base, const std::string& path) {
  if (path.empty() || fs::path(path).is_absolute()) return path;
  return (base / path).lexically_normal().string();
}

}  // namespace

Result<CoordinatorConfig> load_coordinator_config(const std::string& path) {
  auto text = config::read_text_file(path, "the coordinator config", "pass the coordinator's config with --config");
  if (!text) return fail(Errc::config, text.error().message);
  return coordinator_config_from_text(*text, path);
}

Result<CoordinatorConfig> coordinator_config_from_text(std::string_view text, const std::string& path) {
  auto parsed = config::parse_toml(text, path, "fix the file and run `kiln-coordinator check-config` again");
  if (!parsed) return fail(Errc::config, parsed.error().message);
  const toml::table& root = *parsed;
  const fs::path base = fs::absolute(path).parent_path();
  CoordinatorConfig config;
  config.source_path = path;

  for (const auto& [key, node] : root) {
    const std::string k(key.str());
    static const std::vector<std::string_view> tables = {"coordinator", "knobs", "scheduler", "keys"};
    if (std::find(tables.begin(), tables.end(), k) == tables.end()) {
      const auto near = config::nearest_name(k, tables);
      return fail(Errc::config, fmt::format("{}: unknown table '{}'{}; expected [coordinator], [knobs], [scheduler] "
                                            "and [[keys]]",
                                            where(path, key.source()), k,
                                            near ? fmt::format(" (did you mean '{}'?)", *near) : ""));
    }
  }

  if (const toml::table* t = root["coordinator"].as_table()) {
    TableReader r(path, *t, "coordinator");
    for (auto s : {r.string("agent_endpoint", config.agent_endpoint),
                   r.string("client_endpoint", config.client_endpoint),
                   r.string("secret_key_file", config.secret_key_file), r.string("database", config.database),
                   r.string("log_level", config.log_level),
                   r.integer("max_message_bytes", config.max_message_bytes, 4096, 64 << 20), r.no_unknown_keys()}) {
      if (!s) return tl::unexpected(s.error());
    }
    for (const auto& [key, endpoint] : {std::pair<const char*, const std::string&>{"agent_endpoint",
                                                                                   config.agent_endpoint},
                                        {"client_endpoint", config.client_endpoint}}) {
      if (auto problem = config::tcp_endpoint_problem(endpoint, /*binds=*/true)) {
        return fail(Errc::config, fmt::format("{}: {} \"{}\" {}", r.origin(key), key, endpoint, *problem));
      }
    }
    if (std::find(log_levels().begin(), log_levels().end(), config.log_level) == log_levels().end()) {
      return fail(Errc::config, fmt::format("{}: log_level '{}' is not one of {}", r.origin("log_level"),
                                            config.log_level, fmt::join(log_levels(), ", ")));
    }
    config.secret_key_file_origin = r.origin("secret_key_file");
  } else {
    return fail(Errc::config, fmt::format("{}: missing the [coordinator] table", path));
  }
  if (config.secret_key_file.empty()) {
    return fail(Errc::config, fmt::format("{}: [coordinator] needs secret_key_file; make one with "
                                          "`kiln keygen --out coordinator`", path));
  }
  config.secret_key_file = resolve(base, config.secret_key_file);
  if (config.database != ":memory:") config.database = resolve(base, config.database);

  if (const toml::table* t = root["knobs"].as_table()) {
    TableReader r(path, *t, "knobs");
    auto& k = config.knobs;
    for (auto s : {r.integer("heartbeat_interval_ms", k.heartbeat_interval_ms, 50, 60000),
                   r.integer("liveness_missed_beats", k.liveness_missed_beats, 2, 100),
                   r.integer("restart_grace_ms", k.restart_grace_ms, 0, 3600000),
                   r.integer("max_queued_jobs", k.max_queued_jobs, 1, 1000000),
                   r.integer("max_jobs_listed", k.max_jobs_listed, 1, 1000),
                   r.integer("job_timeout_slack_ms", k.job_timeout_slack_ms, 0, 3600000),
                   r.integer("quarantine_release_min_diag_level", k.quarantine_release_min_diag_level, 1, 3),
                   r.integer("flap_window_ms", k.flap_window_ms, 0, 30LL * 24 * 3600 * 1000),
                   r.integer("quarantine_rerun_window_ms", k.quarantine_rerun_window_ms, 0, 7LL * 24 * 3600 * 1000),
                   r.integer("max_active_leases", k.max_active_leases, 1, 100000),
                   r.integer("max_ended_leases_kept", k.max_ended_leases_kept, 0, 100000),
                   r.integer("max_lease_watches", k.max_lease_watches, 1, 100000),
                   r.no_unknown_keys()}) {
      if (!s) return tl::unexpected(s.error());
    }
  }

  if (const toml::node* scheduler = root.get("scheduler")) {
    const toml::table* t = scheduler->as_table();
    if (!t) return fail(Errc::config, fmt::format("{}: scheduler must be a table ([scheduler])", where(path, scheduler->source())));
    auto knobs = scheduler::parse_scheduler_knobs(*t, path);
    if (!knobs) return tl::unexpected(knobs.error());
    config.knobs.scheduler = std::move(*knobs);
  }

  if (const toml::node* keys = root.get("keys")) {
    const toml::array* list = keys->as_array();
    if (!list) {
      return fail(Errc::config, fmt::format("{}: keys must be an array of tables ([[keys]])",
                                            where(path, keys->source())));
    }
    for (const toml::node& entry : *list) {
      const toml::table* t = entry.as_table();
      if (!t) return fail(Errc::config, fmt::format("{}: each [[keys]] entry must be a table", where(path, entry.source())));
      TableReader r(path, *t, "keys");
      AuthorizedKey key;
      std::string role;
      std::string public_key_file;
      for (auto s : {r.string("name", key.name), r.string("role", role), r.string("public_key", key.public_key),
                     r.string("public_key_file", public_key_file), r.no_unknown_keys()}) {
        if (!s) return tl::unexpected(s.error());
      }
      if (key.name.empty() || key.name.size() > 64) {
        return r.bad(entry, "each [[keys]] entry needs a name of 1 to 64 characters");
      }
      auto parsed_role = protocol::enum_from_name<protocol::Role>(role);
      if (!parsed_role) {
        return r.bad(entry, fmt::format("key '{}' has role '{}'; use one of agent, ci, developer, ops, lab, admin",
                                        key.name, role));
      }
      key.role = *parsed_role;
      if (key.public_key.empty() == public_key_file.empty()) {
        return r.bad(entry, fmt::format("key '{}' needs exactly one of public_key or public_key_file", key.name));
      }
      if (!public_key_file.empty()) {
        auto loaded = load_public_key_file(resolve(base, public_key_file));
        if (!loaded) {
          return fail(Errc::config, fmt::format("{}: public_key_file of key '{}': {}", r.origin("public_key_file"),
                                                key.name, loaded.error().message));
        }
        key.public_key = *loaded;
      }
      if (!is_z85_key(key.public_key)) {
        return r.bad(entry, fmt::format("key '{}' is not a 40-character Z85 CURVE public key", key.name));
      }
      if (config.keys_by_public_key.count(key.public_key)) {
        return r.bad(entry, fmt::format("key '{}' repeats a public key listed earlier; one key, one role", key.name));
      }
      config.keys_by_public_key.emplace(key.public_key, key);
    }
  }
  return config;
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

#include "agent/host/agent_config.h"

#include <grp.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <functional>
#include <set>
#include <sstream>
#include <string_view>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "agent/host/topology.h"
#include "common/http/listen_address.h"
#include "common/logging.h"
#include "common/keys.h"
#include "common/config/toml_errors.h"
#include "common/protocol/messages_types.h"

namespace kiln::agent {
namespace {

namespace fs = std::filesystem;

struct KnobField {
  KnobSpec spec;
  std::function<void(AgentKnobs&, std::int64_t)> set;
  std::function<std::int64_t(const AgentKnobs&)> get;
};

#define KILN_KNOB(field, def, lo, hi, meaning)                                                 \
  KnobField {                                                                                  \
    KnobSpec{#field, def, lo, hi, meaning},                                                    \
        [](AgentKnobs& k, std::int64_t v) { k.field = static_cast<decltype(k.field)>(v); },    \
        [](const AgentKnobs& k) { return static_cast<std::int64_t>(k.field); }                 \
  }

const std::vector<KnobField>& knob_fields() {
  static const std::vector<KnobField> fields = {
      KILN_KNOB(heartbeat_interval_ms, 1000, 50, 60000,
                "how often the agent heartbeats to the coordinator"),
      KILN_KNOB(liveness_missed_beats, 4, 2, 100,
                "coordinator heartbeats missed before the agent reconnects"),
      KILN_KNOB(reconnect_backoff_initial_ms, 500, 10, 60000,
                "first wait before reconnecting; doubles on each failure"),
      KILN_KNOB(reconnect_backoff_max_ms, 30000, 10, 3600000,
                "longest wait between reconnects (at least reconnect_backoff_initial_ms)"),
      KILN_KNOB(job_output_limit_bytes, 1048576, 1024, 268435456,
                "how much of a job's output (its tail) is reported"),
      KILN_KNOB(default_job_timeout_ms, 3600000, 1000, 604800000,
                "hard deadline of a job that does not set its own"),
      KILN_KNOB(kill_grace_ms, 5000, 100, 600000,
                "wait between SIGTERM and SIGKILL when a process is stopped"),
      KILN_KNOB(probe_interval_ms, 60000, 1000, 86400000, "how often health probes run"),
      KILN_KNOB(probe_timeout_ms, 30000, 100, 600000,
                "hard deadline of one health probe (at most probe_interval_ms)"),
      KILN_KNOB(max_concurrent_jobs, 8, 1, 64, "jobs the agent runs at the same time"),
      KILN_KNOB(job_dir_max_age_ms, 604800000, 60000, 31536000000,
                "a finished job's directory older than this is removed"),
      KILN_KNOB(job_dirs_max_bytes, 10737418240, 1048576, 17592186044416,
                "finished jobs' directories are removed, oldest first, while all take more"),
      KILN_KNOB(job_dir_cleanup_interval_ms, 600000, 1000, 86400000,
                "how often the job directory retention runs (and at start-up)"),
  };
  return fields;
}

#undef KILN_KNOB

std::string describe_node(const toml::node& node) {
  std::ostringstream out;
  switch (node.type()) {
    case toml::node_type::table: return "a table";
    case toml::node_type::array: return "an array";
    case toml::node_type::string: return "string \"" + *node.value_exact<std::string>() + "\"";
    case toml::node_type::floating_point: out << "float "; break;
    case toml::node_type::boolean: out << "boolean "; break;
    default: break;
  }
  node.visit([&out](auto&& value) {
    if constexpr (toml::is_value<decltype(value)>) out << value;
  });
  return out.str();
}

bool is_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
         c == '.' || c == '_' || c == '-';
}

bool is_plain_name(std::string_view text, std::size_t max_length) {
  return !text.empty() && text.size() <= max_length &&
         std::all_of(text.begin(), text.end(), is_name_char);
}

// Every key of the file by table ("" is the top level); [workloads] takes any name.
const std::vector<std::pair<std::string, std::vector<std::string_view>>>& known_keys() {
  static const auto keys = [] {
    std::vector<std::pair<std::string, std::vector<std::string_view>>> out = {
        {"", {"node_id", "work_dir", "secret_key_file", "hardware_revision", "job_containment",
              "cgroup_root", "log_level", "rendezvous_address", "labels", "coordinator", "driver", "local_socket", "knobs", "workloads",
              "artifacts", "http"}},
        {"artifacts", {"cache_dir", "cache_limit_bytes", "http_store", "fetch_timeout_ms"}},
        {"coordinator", {"endpoint", "public_key_file"}},
        {"driver", {"library", "options"}},
        {"local_socket", {"path", "group"}},
        {"http", {"listen"}},
        {"knobs", {}},
    };
    for (const KnobField& field : knob_fields()) out.back().second.emplace_back(field.spec.name);
    return out;
  }();
  return keys;
}

const std::vector<std::string_view>& keys_of(std::string_view table) {
  for (const auto& [name, keys] : known_keys()) {
    if (name == table) return keys;
  }
  KILN_ASSERT(false, "keys_of called with a table that agent.toml does not have");
  return known_keys().front().second;
}

// (table, key) of a known key of another table that `key` is, or nearly is.
std::optional<std::pair<std::string, std::string>> key_elsewhere(std::string_view key,
                                                                 std::string_view table) {
  for (const auto& [name, keys] : known_keys()) {
    if (name == table) continue;
    if (auto match = config::nearest_name(key, keys)) return std::pair<std::string, std::string>(name, *match);
  }
  return std::nullopt;
}

// Walks the parsed document, collecting every problem rather than stopping at the first, so
// one run of check-config shows all that needs fixing.
class Loader {
 public:
  Loader(std::string display_path, fs::path base_dir)
      : problems(std::move(display_path)), base_dir_(std::move(base_dir)) {}

  config::Problems problems;
  std::map<std::string, std::string> origins;

  std::string at(const toml::source_region& region) const { return config::where(problems.source(), region); }

  void error_at(const toml::source_region& region, const std::string& what) { problems.at(region, what); }

  void error(const std::string& what) { problems.add(what); }

  static std::string dotted(std::string_view table, std::string_view key) {
    return table.empty() ? std::string(key) : std::string(table) + "." + std::string(key);
  }

  // Reports every key of `table` not in `allowed`, suggesting the nearest known key: first in
  // this table, then a key of another table written in the wrong place.
  void reject_unknown(const toml::table& table, std::string_view table_name,
                      const std::vector<std::string_view>& allowed) {
    for (auto&& [key, node] : table) {
      if (std::find(allowed.begin(), allowed.end(), key.str()) != allowed.end()) continue;
      std::string message = "unknown key \"" + std::string(key.str()) + "\"";
      message += table_name.empty() ? " at the top level" : " in [" + std::string(table_name) + "]";
      if (const auto here = config::nearest_name(key.str(), allowed)) {
        message += "; did you mean \"" + *here + "\"?";
      } else if (const auto elsewhere = key_elsewhere(key.str(), table_name)) {
        message += "; did you mean \"" + elsewhere->second + "\" under " +
                   (elsewhere->first.empty() ? "the top level" : "[" + elsewhere->first + "]") +
                   "?";
      } else {
        message += "; known keys here:";
        for (const std::string_view candidate : allowed) message += " " + std::string(candidate);
      }
      error_at(key.source(), message);
    }
  }

  // An optional sub-table; reports it when the key holds something else.
  const toml::table* table(const toml::table& root, std::string_view name) {
    const auto it = root.find(name);
    if (it == root.end()) return nullptr;
    if (!it->second.is_table()) {
      error_at(it->first.source(), std::string(name) + " must be a table, written [" +
                                       std::string(name) + "] (got " +
                                       describe_node(it->second) + ")");
      return nullptr;
    }
    return it->second.as_table();
  }

  // A string value with its key's position; nullopt when absent or invalid (then reported).
  std::optional<std::string> string(const toml::table* table, std::string_view table_name,
                                    std::string_view key, const char* missing_hint) {
    const std::string name = dotted(table_name, key);
    if (table == nullptr || table->find(key) == table->end()) {
      if (missing_hint != nullptr) {
        error("missing required key \"" + name + "\" (" + missing_hint + ")");
      }
      return std::nullopt;
    }
    const auto it = table->find(key);
    key_region_ = it->first.source();
    const std::optional<std::string> value = it->second.value_exact<std::string>();
    if (!value) {
      error_at(key_region_, name + " must be a string (got " + describe_node(it->second) + ")");
      return std::nullopt;
    }
    if (value->find('\0') != std::string::npos) {
      error_at(key_region_, name + " must not contain a NUL character");
      return std::nullopt;
    }
    origins[name] = at(key_region_);
    return value;
  }

  // A path value resolved against the config file's directory.
  std::optional<std::string> path(const toml::table* table, std::string_view table_name,
                                  std::string_view key, const char* missing_hint) {
    std::optional<std::string> value = string(table, table_name, key, missing_hint);
    if (!value) return std::nullopt;
    if (value->empty()) {
      error_at(key_region_, dotted(table_name, key) + " must not be empty: give a file path");
      return std::nullopt;
    }
    return resolve(*value);
  }

  std::string resolve(const std::string& value) const {
    const fs::path path(value);
    return (path.is_absolute() ? path : base_dir_ / path).lexically_normal().string();
  }

  void knob(const toml::table& knobs, const KnobField& field, AgentKnobs& out) {
    const auto it = knobs.find(field.spec.name);
    if (it == knobs.end()) return;
    const std::string name = std::string("knobs.") + field.spec.name;
    const std::optional<std::int64_t> value = it->second.value_exact<std::int64_t>();
    if (!value) {
      error_at(it->first.source(), std::string(field.spec.name) + " must be an integer (got " +
                                       describe_node(it->second) + ")");
      return;
    }
    if (*value < field.spec.min_value || *value > field.spec.max_value) {
      error_at(it->first.source(), std::string(field.spec.name) + " must be between " +
                                       std::to_string(field.spec.min_value) + " and " +
                                       std::to_string(field.spec.max_value) + " (got " +
                                       std::to_string(*value) + ")");
      return;
    }
    origins[name] = at(it->first.source());
    field.set(out, *value);
  }

  // Position of the most recently read string key, for follow-up checks on its value.
  const toml::source_region& last_key_region() const { return key_region_; }

 private:
  fs::path base_dir_;
  toml::source_region key_region_;
};

void load_knobs(Loader& loader, const toml::table* knobs, AgentKnobs& out) {
  if (knobs == nullptr) return;
  for (const KnobField& field : knob_fields()) loader.knob(*knobs, field, out);
  loader.reject_unknown(*knobs, "knobs", keys_of("knobs"));

  const auto region_of = [&](const char* key) { return knobs->find(key)->first.source(); };
  if (out.reconnect_backoff_max_ms < out.reconnect_backoff_initial_ms) {
    const char* key = knobs->contains("reconnect_backoff_max_ms") ? "reconnect_backoff_max_ms"
                                                                   : "reconnect_backoff_initial_ms";
    loader.error_at(region_of(key),
                    "reconnect_backoff_max_ms (" + std::to_string(out.reconnect_backoff_max_ms) +
                        ") must be at least reconnect_backoff_initial_ms (" +
                        std::to_string(out.reconnect_backoff_initial_ms) + ")");
  }
  if (out.probe_timeout_ms > out.probe_interval_ms) {
    const char* key =
        knobs->contains("probe_timeout_ms") ? "probe_timeout_ms" : "probe_interval_ms";
    loader.error_at(region_of(key), "probe_timeout_ms (" + std::to_string(out.probe_timeout_ms) +
                                        ") must not exceed probe_interval_ms (" +
                                        std::to_string(out.probe_interval_ms) + ")");
  }
}

void load_workloads(Loader& loader, const toml::table* workloads, AgentConfig& out) {
  if (workloads == nullptr) return;
  for (auto&& [key, node] : *workloads) {
    const std::string name(key.str());
    if (!is_plain_name(name, 64)) {
      loader.error_at(key.source(), "workload name \"" + name +
                                        "\" must be 1 to 64 letters, digits, '.', '_' or '-'");
      continue;
    }
    const std::optional<std::string> program = loader.path(workloads, "workloads", name, nullptr);
    if (program) out.workloads[name] = *program;
  }
}

void load_artifacts(Loader& loader, const toml::table* artifacts, AgentConfig& out) {
  ArtifactSettings& settings = out.artifacts;
  if (!out.work_dir.empty()) settings.cache_dir = (fs::path(out.work_dir) / "artifacts").string();
  if (artifacts == nullptr) return;
  loader.reject_unknown(*artifacts, "artifacts", keys_of("artifacts"));
  if (auto dir = loader.path(artifacts, "artifacts", "cache_dir", nullptr)) settings.cache_dir = *dir;
  if (auto store = loader.string(artifacts, "artifacts", "http_store", nullptr)) {
    const bool http = store->starts_with("http://") || store->starts_with("https://");
    if (!http || store->find_first_of(" \t\r\n") != std::string::npos || store->find('@') != std::string::npos) {
      loader.error_at(loader.last_key_region(),
                      "artifacts.http_store must be an http:// or https:// URL without spaces or credentials, e.g. "
                      "\"http://artifacts.example:8080/kiln\" (got \"" + *store + "\")");
    } else {
      while (store->ends_with("/")) store->pop_back();
      settings.http_store = *store;
    }
  }
  const auto integer = [&](const char* key, std::int64_t min, std::int64_t max, auto& field) {
    const auto it = artifacts->find(key);
    if (it == artifacts->end()) return;
    const std::optional<std::int64_t> value = it->second.value_exact<std::int64_t>();
    if (!value || *value < min || *value > max) {
      loader.error_at(it->first.source(), std::string("artifacts.") + key + " must be an integer between " +
                                              std::to_string(min) + " and " + std::to_string(max));
      return;
    }
    loader.origins[std::string("artifacts.") + key] = loader.at(it->first.source());
    field = static_cast<std::remove_reference_t<decltype(field)>>(*value);
  };
  integer("cache_limit_bytes", std::int64_t{1} << 20, std::int64_t{1} << 50, settings.cache_limit_bytes);
  integer("fetch_timeout_ms", 1000, 7LL * 24 * kHourMs, settings.fetch_timeout_ms);
}

void load_document(Loader& loader, const toml::table& root, AgentConfig& out) {
  loader.reject_unknown(root, "", keys_of(""));

  if (auto node_id = loader.string(&root, "", "node_id", "this node's name in the fleet, e.g. "
                                                         "node_id = \"n07\"")) {
    if (is_plain_name(*node_id, 64)) {
      out.node_id = *node_id;
    } else {
      loader.error_at(loader.last_key_region(),
                      "node_id must be 1 to 64 letters, digits, '.', '_' or '-' (got \"" +
                          *node_id + "\")");
    }
  }
  if (auto work_dir = loader.path(&root, "", "work_dir",
                                  "where jobs run and output is kept, e.g. "
                                  "work_dir = \"/var/lib/kiln\"")) {
    out.work_dir = *work_dir;
  }
  if (auto key = loader.path(&root, "", "secret_key_file",
                             "this agent's CURVE keypair file written by `kiln keygen`")) {
    out.agent_secret_key_file = *key;
  }
  if (auto revision = loader.string(&root, "", "hardware_revision", nullptr)) {
    if (is_plain_name(*revision, 32)) {
      out.hardware_revision_override = *revision;
    } else {
      loader.error_at(loader.last_key_region(),
                      "hardware_revision must be 1 to 32 letters, digits, '.', '_' or '-' "
                      "(got \"" + *revision + "\"); leave it out to use the driver's");
    }
  }

  if (auto address = loader.string(&root, "", "rendezvous_address", nullptr)) {
    const bool plain = !address->empty() && address->size() <= 255 &&
                       std::all_of(address->begin(), address->end(), [](char c) {
                         return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_' ||
                                c == ':';
                       });
    if (plain) {
      out.rendezvous_address = *address;
    } else {
      loader.error_at(loader.last_key_region(),
                      "rendezvous_address must be a host name or IP address of 1 to 255 letters, digits, '.', '-', "
                      "'_' or ':' (got \"" + *address + "\"); leave it out for the default");
    }
  }

  if (const auto labels = root.find("labels"); labels != root.end()) {
    const toml::array* list = labels->second.as_array();
    std::set<std::string> keys;
    for (std::size_t i = 0; list != nullptr && i < list->size(); ++i) {
      const std::optional<std::string> label = (*list)[i].value_exact<std::string>();
      if (!label || !protocol::is_label(*label)) {
        loader.error_at(labels->first.source(),
                        fmt::format("labels[{}] must be a string KEY=VALUE, each of 1 to 31 letters, digits, '.', '_' "
                                    "or '-', as \"pool=prod\" (got {})",
                                    i, label ? "\"" + *label + "\"" : describe_node((*list)[i])));
      } else if (!keys.insert(label->substr(0, label->find('='))).second) {
        loader.error_at(labels->first.source(), fmt::format("labels names \"{}\" twice; give each key one value",
                                                            label->substr(0, label->find('='))));
      } else if (label->starts_with("backend=")) {
        loader.error_at(labels->first.source(),
                        "labels has " + *label + ", but backend= is the driver's to declare (docs/driver-abi.md); "
                        "remove it");
      } else {
        out.labels.push_back(*label);
      }
    }
    if (list == nullptr) {
      loader.error_at(labels->first.source(), "labels must be an array of strings, as labels = [\"pool=prod\"] (got " +
                                                  describe_node(labels->second) + ")");
    } else if (list->size() >= protocol::kMaxLabels) {
      // One place is the driver's: its backend=KIND label.
      loader.error_at(labels->first.source(),
                      fmt::format("labels has {} entries; at most {}", list->size(), protocol::kMaxLabels - 1));
    }
    loader.origins["labels"] = loader.at(labels->first.source());
  }

  if (auto containment = loader.string(&root, "", "job_containment", nullptr)) {
    if (*containment == "auto") {
      out.job_containment = JobContainment::automatic;
    } else if (*containment == "cgroup") {
      out.job_containment = JobContainment::cgroup;
    } else if (*containment == "process-group") {
      out.job_containment = JobContainment::process_group;
    } else {
      loader.error_at(loader.last_key_region(), "job_containment must be \"auto\", \"cgroup\" or "
                                                "\"process-group\" (got \"" + *containment + "\")");
    }
  }
  if (auto cgroup_root = loader.path(&root, "", "cgroup_root", nullptr)) out.cgroup_root = *cgroup_root;
  if (auto level = loader.string(&root, "", "log_level", nullptr)) {
    const auto& levels = log_level_names();
    if (std::find(levels.begin(), levels.end(), *level) != levels.end()) {
      out.log_level = *level;
    } else {
      loader.error_at(loader.last_key_region(), "log_level \"" + *level + "\" is not one of " +
                                                    fmt::format("{}", fmt::join(levels, ", ")));
    }
  }

  const toml::table* coordinator = loader.table(root, "coordinator");
  if (coordinator != nullptr) loader.reject_unknown(*coordinator, "coordinator",
                                                    keys_of("coordinator"));
  if (coordinator == nullptr || coordinator->find("endpoint") == coordinator->end()) {
    loader.error("missing required key \"coordinator.endpoint\" (the coordinator's address, e.g. endpoint = "
                 "\"tcp://coordinator.example:5555\" under [coordinator], or a list of the active coordinator and "
                 "its standbys)");
  } else if (auto endpoints = config::coordinator_endpoints(loader.at(coordinator->find("endpoint")->first.source()),
                                                            *coordinator->get("endpoint"), "endpoint")) {
    out.coordinator_endpoint = endpoints->front();
    out.standby_endpoints.assign(endpoints->begin() + 1, endpoints->end());
  } else {
    loader.problems.add_located(coordinator->find("endpoint")->first.source().begin, endpoints.error().message);
  }
  if (auto key = loader.path(coordinator, "coordinator", "public_key_file",
                             "the coordinator's public key file, under [coordinator]")) {
    out.coordinator_public_key_file = *key;
  }

  const toml::table* driver = loader.table(root, "driver");
  if (driver != nullptr) loader.reject_unknown(*driver, "driver", keys_of("driver"));
  if (auto library = loader.path(driver, "driver", "library",
                                 "the chip driver backend, a shared library, under [driver]")) {
    out.driver_library_path = *library;
  }
  if (auto options = loader.string(driver, "driver", "options", nullptr)) {
    if (options->size() > 4096) {
      loader.error_at(loader.last_key_region(), "driver options must be at most 4096 bytes");
    } else {
      out.driver_options = *options;
    }
  }

  const toml::table* local_socket = loader.table(root, "local_socket");
  if (local_socket != nullptr) loader.reject_unknown(*local_socket, "local_socket",
                                                     keys_of("local_socket"));
  if (auto socket_path = loader.path(local_socket, "local_socket", "path", nullptr)) {
    out.local_socket_path = *socket_path;
  } else if (!out.work_dir.empty()) {
    out.local_socket_path = (fs::path(out.work_dir) / "agent.sock").string();
  }
  constexpr std::size_t max_socket_path_bytes = sizeof(sockaddr_un::sun_path) - 1;
  if (out.local_socket_path.size() > max_socket_path_bytes) {
    const std::string problem = "the local socket path " + out.local_socket_path + " is " +
                                std::to_string(out.local_socket_path.size()) +
                                " bytes; a Unix socket path must be at most " +
                                std::to_string(max_socket_path_bytes) +
                                ": set a shorter local_socket.path";
    if (local_socket != nullptr && local_socket->contains("path")) {
      loader.error_at(local_socket->find("path")->first.source(), problem);
    } else {
      loader.error(problem);
    }
  }
  if (auto group = loader.string(local_socket, "local_socket", "group", nullptr)) {
    if (is_plain_name(*group, 32)) {
      out.local_socket_group = *group;
    } else {
      loader.error_at(loader.last_key_region(),
                      "local_socket.group must be a group name (got \"" + *group + "\")");
    }
  }

  if (const toml::table* http = loader.table(root, "http")) {
    loader.reject_unknown(*http, "http", keys_of("http"));
    if (auto listen = loader.string(http, "http", "listen", "where /metrics is served, as in listen = \"127.0.0.1:9472\"")) {
      if (auto address = http::parse_listen_address(*listen); address) {
        out.http_listen = *listen;
      } else {
        loader.error_at(loader.last_key_region(), "http.listen " + address.error().message);
      }
    }
  }

  load_knobs(loader, loader.table(root, "knobs"), out.knobs);
  load_workloads(loader, loader.table(root, "workloads"), out);
  load_artifacts(loader, loader.table(root, "artifacts"), out);
}

// Where `key` was set, or the file for a key left at its default.
std::string origin_of(const AgentConfig& config, const std::string& key) {
  const auto it = config.key_origins.find(key);
  return it != config.key_origins.end() ? it->second : config.config_path;
}

std::string join_lines(const std::vector<std::string>& lines) {
  std::string out;
  for (const std::string& line : lines) {
    if (!out.empty()) out += "\n";
    out += line;
  }
  return out;
}

Result<std::string> read_config_file(const std::string& path) {
  return config::read_text_file(path, "the agent config", "pass the right file with --config PATH");
}

Result<AgentConfig> loaded(AgentConfigReading reading) {
  if (!reading.problems.empty()) return fail(Errc::config, join_lines(reading.problems));
  return std::move(reading.config);
}

}  // namespace

const std::vector<KnobSpec>& agent_knob_specs() {
  static const std::vector<KnobSpec> specs = [] {
    std::vector<KnobSpec> out;
    for (const KnobField& field : knob_fields()) out.push_back(field.spec);
    return out;
  }();
  return specs;
}

AgentConfigReading read_agent_config(const std::string& path) {
  auto text = read_config_file(path);
  if (!text) return {{}, {text.error().message}};
  return read_agent_config_text(*text, path);
}

AgentConfigReading read_agent_config_text(std::string_view text, const std::string& path) {
  auto parsed = config::parse_toml(text, path, "fix the file and run `kiln-agent check-config` again");
  if (!parsed) return {{}, {parsed.error().message}};
  std::error_code ec;
  const fs::path absolute = fs::absolute(path, ec).lexically_normal();
  if (ec) return {{}, {"cannot resolve the path of " + path + ": " + ec.message()}};

  AgentConfigReading reading;
  reading.config.config_path = absolute.string();
  Loader loader(path, absolute.parent_path());
  load_document(loader, *parsed, reading.config);
  reading.problems = loader.problems.sorted();
  reading.config.key_origins = std::move(loader.origins);
  return reading;
}

std::vector<std::string> coordinator_endpoints(const AgentConfig& config) {
  std::vector<std::string> endpoints{config.coordinator_endpoint};
  endpoints.insert(endpoints.end(), config.standby_endpoints.begin(), config.standby_endpoints.end());
  return endpoints;
}

Result<AgentConfig> load_agent_config(const std::string& path) {
  auto text = read_config_file(path);
  if (!text) return tl::unexpected(text.error());
  return agent_config_from_text(*text, path);
}

Result<AgentConfig> agent_config_from_text(std::string_view text, const std::string& path) {
  return loaded(read_agent_config_text(text, path));
}

Status check_agent_environment(const AgentConfig& config, KeyContents keys) {
  std::vector<std::string> problems;
  const auto where = [&](const std::string& key) { return origin_of(config, key); };
  // An empty path is one the file did not give, a problem reported with the file's.
  const auto check_file = [&](const std::string& key, const std::string& path, const char* what,
                              int access_mode, const char* remedy) -> bool {
    if (path.empty()) return false;
    struct stat info {};
    if (::stat(path.c_str(), &info) != 0) {
      problems.push_back(where(key) + ": " + key + ": " + what + " " + path + ": " +
                         std::strerror(errno) + "; " + remedy);
      return false;
    }
    if (!S_ISREG(info.st_mode)) {
      problems.push_back(where(key) + ": " + key + ": " + what + " " + path +
                         " is not a regular file");
      return false;
    }
    if (::access(path.c_str(), access_mode) != 0) {
      problems.push_back(where(key) + ": " + key + ": " + what + " " + path + " is not " +
                         (access_mode == X_OK ? "executable" : "readable") + " by this user");
      return false;
    }
    return true;
  };
  const auto check_key = [&](const std::string& key, const Status& read) {
    if (keys == KeyContents::read && !read) problems.push_back(where(key) + ": " + key + ": " + read.error().message);
  };

  if (check_file("coordinator.public_key_file", config.coordinator_public_key_file,
                 "coordinator public key", R_OK, "copy the coordinator's public key there or fix the path")) {
    check_key("coordinator.public_key_file",
              load_public_key_file(config.coordinator_public_key_file).map([](auto&&) {}));
  }
  if (check_file("secret_key_file", config.agent_secret_key_file, "secret key", R_OK,
                 "write a keypair with `kiln keygen` or fix the path")) {
    struct stat info {};
    if (::stat(config.agent_secret_key_file.c_str(), &info) == 0 && (info.st_mode & 077) != 0) {
      problems.push_back(where("secret_key_file") + ": secret_key_file: " +
                         config.agent_secret_key_file +
                         " may be read by group or others; run chmod 600 on it");
    } else {
      check_key("secret_key_file", load_secret_key_file(config.agent_secret_key_file).map([](auto&&) {}));
    }
  }
  check_file("driver.library", config.driver_library_path, "driver library", R_OK,
             "install the driver backend or fix the path");
  for (const auto& [name, program] : config.workloads) {
    check_file("workloads." + name, program, "workload program", X_OK,
               "install the workload or remove it from [workloads]");
  }

  if (!config.work_dir.empty()) {
    // The agent creates the work dir if missing, so its nearest existing ancestor must be a
    // writable directory.
    fs::path existing(config.work_dir);
    std::error_code ec;
    while (!existing.empty() && !fs::exists(existing, ec) && existing != existing.parent_path()) {
      existing = existing.parent_path();
    }
    if (!fs::is_directory(existing, ec)) {
      problems.push_back(where("work_dir") + ": work_dir: " + existing.string() + " is not a directory");
    } else if (::access(existing.c_str(), W_OK | X_OK) != 0) {
      problems.push_back(where("work_dir") + ": work_dir: " + existing.string() + " is not writable by this user");
    }
  }

  // The default socket lives in the work dir, which the agent creates.
  std::error_code ec;
  const fs::path socket_dir = fs::path(config.local_socket_path).parent_path();
  if (!config.local_socket_path.empty() && socket_dir != fs::path(config.work_dir) &&
      !fs::is_directory(socket_dir, ec)) {
    problems.push_back(where("local_socket.path") + ": local_socket.path: the directory " +
                       socket_dir.string() + " does not exist; create it or choose another path");
  }
  if (::getgrnam(config.local_socket_group.c_str()) == nullptr) {
    problems.push_back(where("local_socket.group") + ": local_socket.group: group \"" +
                       config.local_socket_group +
                       "\" does not exist; create it (groupadd --system " +
                       config.local_socket_group + ") or name an existing group");
  }

  if (!problems.empty()) return fail(Errc::config, join_lines(problems));
  return {};
}

Status check_agent_keys(const AgentConfig& config) {
  std::vector<std::string> problems;
  const auto problem = [&](const std::string& key, const Error& error) {
    problems.push_back(origin_of(config, key) + ": " + key + ": " + error.message);
  };
  if (auto keys = load_secret_key_file(config.agent_secret_key_file); !keys) problem("secret_key_file", keys.error());
  if (auto key = load_public_key_file(config.coordinator_public_key_file); !key) {
    problem("coordinator.public_key_file", key.error());
  }
  if (!problems.empty()) return fail(Errc::config, join_lines(problems));
  return {};
}

std::string describe_agent_config(const AgentConfig& config) {
  std::ostringstream out;
  const auto origin = [&](const std::string& key) {
    const auto it = config.key_origins.find(key);
    return it != config.key_origins.end() ? "  (" + it->second + ")" : std::string("  (default)");
  };
  const auto line = [&](const std::string& label, const std::string& value,
                        const std::string& key) {
    out << "  " << label << std::string(label.size() < 30 ? 30 - label.size() : 1, ' ') << value
        << (key.empty() ? "" : origin(key)) << "\n";
  };

  out << "agent config " << config.config_path << "\n";
  line("node_id", config.node_id, "node_id");
  line("work_dir", config.work_dir, "work_dir");
  line("secret_key_file", config.agent_secret_key_file, "secret_key_file");
  line("hardware_revision",
       config.hardware_revision_override ? *config.hardware_revision_override
                                         : std::string("reported by the driver"),
       config.hardware_revision_override ? "hardware_revision" : "");
  line("rendezvous_address", announced_rendezvous_address(config), "rendezvous_address");
  line("labels", config.labels.empty() ? std::string("none") : fmt::format("{}", fmt::join(config.labels, ", ")),
       config.labels.empty() ? "" : "labels");
  line("job_containment", std::string(to_string(config.job_containment)), "job_containment");
  line("cgroup_root", config.cgroup_root ? *config.cgroup_root : std::string("this process's own cgroup"),
       config.cgroup_root ? "cgroup_root" : "");
  line("coordinator.endpoint", config.coordinator_endpoint, "coordinator.endpoint");
  line("coordinator.public_key_file", config.coordinator_public_key_file,
       "coordinator.public_key_file");
  line("driver.library", config.driver_library_path, "driver.library");
  line("driver.options", "\"" + config.driver_options + "\"", "driver.options");
  line("local_socket.path", config.local_socket_path, "local_socket.path");
  line("local_socket.group", config.local_socket_group, "local_socket.group");
  line("artifacts.cache_dir", config.artifacts.cache_dir, "artifacts.cache_dir");
  line("artifacts.cache_limit_bytes", std::to_string(config.artifacts.cache_limit_bytes),
       "artifacts.cache_limit_bytes");
  line("artifacts.http_store", config.artifacts.http_store.empty() ? std::string("none") : config.artifacts.http_store,
       "artifacts.http_store");
  line("artifacts.fetch_timeout_ms", std::to_string(config.artifacts.fetch_timeout_ms), "artifacts.fetch_timeout_ms");
  line("http.listen", config.http_listen.empty() ? std::string("none: /metrics is not served") : config.http_listen,
       "http.listen");
  out << "knobs\n";
  for (const KnobField& field : knob_fields()) {
    const std::string name = field.spec.name;
    line(name, std::to_string(field.get(config.knobs)), "knobs." + name);
  }
  out << "workloads (" << config.workloads.size() << ")\n";
  if (config.workloads.empty()) out << "  none: this agent runs no jobs until some are listed\n";
  for (const auto& [name, program] : config.workloads) {
    line(name, program, "workloads." + name);
  }
  return out.str();
}

std::string announced_rendezvous_address(const AgentConfig& config) {
  if (config.rendezvous_address) return *config.rendezvous_address;
  // A coordinator on loopback means every agent runs on this one host.
  std::string_view host = config.coordinator_endpoint;
  if (host.starts_with("tcp://")) host.remove_prefix(6);
  host = host.substr(0, host.rfind(':'));
  if (host.starts_with("127.") || host == "localhost" || host == "[::1]") return "127.0.0.1";
  return local_hostname();
}

}  // namespace kiln::agent

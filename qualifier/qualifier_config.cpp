#include "qualifier/qualifier_config.h"

#include <unistd.h>

#include <filesystem>

#include <fmt/format.h>

#include "common/config/toml_errors.h"
#include "common/http/listen_address.h"

namespace kiln::qualifier {
namespace {

namespace fs = std::filesystem;

const std::vector<std::string_view> kQualifierKeys = {
    "name",         "coordinator", "coordinator_public_key_file", "secret_key_file", "timeout_ms",
    "model_set",    "workload_catalog", "bundle_dir", "golden_dir", "builder",
    "builder_args", "claim_ms",    "poll_interval_ms", "max_runs", "sim_driver", "cpu_driver", "artifacts",
    "reproducibility_sample", "risk_register", "watch_jobs"};
const std::vector<std::string_view> kScheduleKeys = {"nightly", "nightly_start", "nightly_deadline", "revisions",
                                                     "max_models",       "clock_offset_ms"};
const std::vector<std::string_view> kTicketKeys = {"dir", "webhook_config", "retry_backoff_ms",
                                                   "max_retry_backoff_ms"};
const std::vector<std::string_view> kReportKeys = {"directory"};
const std::vector<std::string_view> kFleetCheckKeys = {"models",          "min_nodes",    "min_samples_per_node",
                                                       "min_slowdown_percent", "outlier_mads", "min_slow_models", "wait_ms"};

std::string host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0 || name[0] == '\0') return "qualifier";
  return name;
}

class Reader {
 public:
  Reader(config::Problems& problems, const toml::table& table, fs::path base)
      : problems_(problems), table_(table), base_(std::move(base)) {}

  void text(const char* key, std::string& out) {
    const toml::node* node = table_.get(key);
    if (node == nullptr) return;
    if (!node->is_string()) return problems_.at(node->source(), fmt::format("{} must be a string", key));
    out = node->as_string()->get();
  }
  void path(const char* key, std::string& out) {
    text(key, out);
    if (!out.empty() && fs::path(out).is_relative()) out = (base_ / out).lexically_normal().string();
  }
  template <class I>
  void number(const char* key, I& out, std::int64_t min, std::int64_t max) {
    const toml::node* node = table_.get(key);
    if (node == nullptr) return;
    if (!node->is_integer() || node->as_integer()->get() < min || node->as_integer()->get() > max) {
      return problems_.at(node->source(), fmt::format("{} must be an integer from {} to {}", key, min, max));
    }
    out = static_cast<I>(node->as_integer()->get());
  }
  void flag(const char* key, bool& out) {
    const toml::node* node = table_.get(key);
    if (node == nullptr) return;
    if (!node->is_boolean()) return problems_.at(node->source(), fmt::format("{} must be true or false", key));
    out = node->as_boolean()->get();
  }
  void time_of_day(const char* key, int& minute) {
    std::string value;
    text(key, value);
    if (value.empty()) return;
    auto parsed = qualification::minute_of_day(value);
    if (!parsed) return problems_.at(table_.get(key)->source(), fmt::format("{}: {}", key, parsed.error().message));
    minute = *parsed;
  }
  void texts(const char* key, std::vector<std::string>& out) {
    const toml::node* node = table_.get(key);
    if (node == nullptr) return;
    const toml::array* array = node->as_array();
    if (array == nullptr) return problems_.at(node->source(), fmt::format("{} must be an array of strings", key));
    for (const auto& item : *array) {
      if (!item.is_string()) return problems_.at(item.source(), fmt::format("{} must be an array of strings", key));
      out.push_back(item.as_string()->get());
    }
  }
  std::string origin(const char* key) const {
    auto it = table_.find(key);
    return config::where(problems_.source(), it != table_.end() ? it->first.source() : table_.source());
  }
  void required(const char* key, const std::string& value, std::string_view what) {
    if (value.empty()) problems_.add(fmt::format("{} is required: {}", key, what));
  }

 private:
  config::Problems& problems_;
  const toml::table& table_;
  fs::path base_;
};

}  // namespace

Result<QualifierConfig> load_qualifier_config(const std::string& path) {
  auto text = config::read_text_file(path, "the qualifier config",
                                     "pass --config (default /etc/kiln/qualifier.toml; docs/operations.md)");
  if (!text) return fail(Errc::config, text.error().message);
  return qualifier_config_from_text(*text, path);
}

Result<QualifierConfig> qualifier_config_from_text(std::string_view text, const std::string& path) {
  auto root = config::parse_toml(text, path, "fix the file");
  if (!root) return fail(Errc::config, root.error().message);
  config::Problems problems(path);
  QualifierConfig config;
  const fs::path base = fs::absolute(path).parent_path();
  const toml::table* qualifier = (*root)["qualifier"].as_table();
  const toml::table* tickets = (*root)["tickets"].as_table();
  const toml::table* schedule = (*root)["schedule"].as_table();
  const toml::table* http = (*root)["http"].as_table();
  const toml::table* reports = (*root)["reports"].as_table();
  const toml::table* fleet_check = (*root)["fleet_check"].as_table();
  problems.unknown_keys(*root, "qualifier.toml", {"qualifier", "tickets", "schedule", "http", "reports", "fleet_check"});
  if (qualifier == nullptr) {
    problems.add("missing the [qualifier] table (coordinator, key files, model_set, bundle_dir, golden_dir)");
  } else {
    problems.unknown_keys(*qualifier, "[qualifier]", kQualifierKeys);
    Reader r(problems, *qualifier, base);
    r.text("name", config.name);
    if (const toml::node* coordinator = qualifier->get("coordinator")) {
      if (auto endpoints = config::coordinator_endpoints(r.origin("coordinator"), *coordinator, "coordinator")) {
        config.client.coordinator_endpoint = endpoints->front();
        config.client.standby_endpoints.assign(endpoints->begin() + 1, endpoints->end());
      } else {
        problems.add_located(coordinator->source().begin, endpoints.error().message);
      }
    }
    r.path("coordinator_public_key_file", config.client.coordinator_public_key_file);
    config.client.coordinator_public_key_file_origin = r.origin("coordinator_public_key_file");
    r.path("secret_key_file", config.client.secret_key_file);
    config.client.secret_key_file_origin = r.origin("secret_key_file");
    r.number("timeout_ms", config.client.timeout_ms, 100, 3600000);
    r.flag("watch_jobs", config.client.watch_jobs);
    r.path("model_set", config.model_set);
    r.path("risk_register", config.risk_register);
    r.path("workload_catalog", config.workload_catalog);
    r.path("bundle_dir", config.bundle_dir);
    r.path("golden_dir", config.golden_dir);
    std::string artifacts = "digest";
    r.text("artifacts", artifacts);
    if (artifacts == "digest" || artifacts == "shared_mount") {
      config.artifacts_by_digest = artifacts == "digest";
    } else {
      problems.at(qualifier->get("artifacts")->source(),
                  fmt::format("artifacts must be \"digest\" (agents fetch each job's files by SHA-256) or "
                              "\"shared_mount\" (every agent reads bundle_dir and golden_dir), not \"{}\"",
                              artifacts));
    }
    r.path("builder", config.builder);
    r.texts("builder_args", config.builder_args);
    r.path("sim_driver", config.sim_driver);
    r.path("cpu_driver", config.cpu_driver);
    r.number("claim_ms", config.claim_ms, 1000, 3600000);
    r.number("poll_interval_ms", config.poll_interval_ms, 50, 60000);
    r.number("max_runs", config.max_runs, 1, 64);
    r.number("reproducibility_sample", config.reproducibility_sample, 0, 100);
    r.required("coordinator_public_key_file", config.client.coordinator_public_key_file,
               "the coordinator's public key (coordinator.pub)");
    r.required("secret_key_file", config.client.secret_key_file, "the qualifier's own key (kiln keygen, role ci)");
    r.required("model_set", config.model_set, "the qualification set (TOML)");
    r.required("bundle_dir", config.bundle_dir, "the bundles' stack files (uploaded for each job)");
    r.required("golden_dir", config.golden_dir, "the models' golden references (uploaded for each job)");
  }
  if (tickets == nullptr) {
    problems.add("missing the [tickets] table; it needs dir, the ticket directory");
  } else {
    problems.unknown_keys(*tickets, "[tickets]", kTicketKeys);
    Reader r(problems, *tickets, base);
    r.path("dir", config.tickets_dir);
    r.path("webhook_config", config.webhook_config);
    r.number("retry_backoff_ms", config.delivery.first_backoff_ms, 50, 3600000);
    r.number("max_retry_backoff_ms", config.delivery.max_backoff_ms, 50, 86400000);
    if (config.delivery.max_backoff_ms < config.delivery.first_backoff_ms) {
      problems.add(fmt::format("[tickets] max_retry_backoff_ms ({}) is below retry_backoff_ms ({}); raise it",
                               config.delivery.max_backoff_ms, config.delivery.first_backoff_ms));
    }
    r.required("dir", config.tickets_dir, "the ticket directory (one JSON file per ticket)");
  }
  if (schedule != nullptr) {
    problems.unknown_keys(*schedule, "[schedule]", kScheduleKeys);
    Reader r(problems, *schedule, base);
    config.schedule.enabled = true;
    r.flag("nightly", config.schedule.enabled);
    r.time_of_day("nightly_start", config.schedule.start_minute);
    r.time_of_day("nightly_deadline", config.schedule.deadline_minute);
    if (schedule->contains("revisions")) config.schedule_revisions.clear();
    r.texts("revisions", config.schedule_revisions);
    if (config.schedule_revisions.empty()) {
      problems.add("[schedule] revisions must name the hardware revisions of the nightly's bundle, e.g. [\"a\", \"b\"]");
    }
    r.number("max_models", config.schedule_max_models, 0, 100000);
    r.number("clock_offset_ms", config.clock_offset_ms, -(INT64_C(1) << 50), INT64_C(1) << 50);
  }
  if (http != nullptr) {
    problems.unknown_keys(*http, "[http]", {"listen"});
    Reader r(problems, *http, base);
    r.text("listen", config.http_listen);
    if (config.http_listen.empty()) {
      problems.at(http->source(), "[http] needs listen: where /metrics is served, as in listen = \"127.0.0.1:9471\"");
    } else if (auto address = http::parse_listen_address(config.http_listen); !address) {
      problems.at(http->get("listen")->source(), "listen " + address.error().message);
    }
  }
  if (reports == nullptr && root->contains("reports")) {
    problems.at(root->get("reports")->source(), "reports must be a table: [reports] with directory = \"...\"");
  }
  if (reports != nullptr) {
    problems.unknown_keys(*reports, "[reports]", kReportKeys);
    Reader r(problems, *reports, base);
    r.path("directory", config.reports_dir);
    r.required("[reports] directory", config.reports_dir, "where each run's pages are written (or leave out [reports])");
  }
  if (fleet_check != nullptr) {
    problems.unknown_keys(*fleet_check, "[fleet_check]", kFleetCheckKeys);
    Reader r(problems, *fleet_check, base);
    qualification::FleetOutlierOptions& o = config.fleet_outliers;
    r.number("models", config.fleet_check_models, 0, 100);
    r.number("min_nodes", o.min_nodes, 3, 100000);
    r.number("min_samples_per_node", o.min_samples_per_node, 3, 100000);
    r.number("min_slowdown_percent", o.min_slowdown_percent, 1, 99);
    r.number("outlier_mads", o.outlier_mads, 0, 1000);
    r.number("min_slow_models", o.min_slow_models, 1, 100);
    r.number("wait_ms", config.fleet_check_wait_ms, 1000, 86400000);
  }
  if (config.name.empty()) config.name = host_name();
  if (auto ok = problems.status(); !ok) return tl::unexpected(ok.error());
  return config;
}

}  // namespace kiln::qualifier

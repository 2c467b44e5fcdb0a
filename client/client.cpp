#include "client/client.h"

#include <filesystem>

#include <fmt/format.h>
#include <zmq.hpp>

#include "common/config/toml_errors.h"
#include "common/transport/request_channel.h"

namespace kiln::cli {
namespace {

namespace fs = std::filesystem;

// Reads and watches: asking one twice changes nothing, so a follower may repeat it.
bool may_repeat(const protocol::Body& body) {
  return std::holds_alternative<protocol::GetJob>(body) || std::holds_alternative<protocol::ListJobs>(body) ||
         std::holds_alternative<protocol::ListNodes>(body) || std::holds_alternative<protocol::ListLeases>(body) ||
         std::holds_alternative<protocol::WatchLease>(body) || std::holds_alternative<protocol::WatchJobs>(body) ||
         std::holds_alternative<protocol::QueueWhy>(body) ||
         std::holds_alternative<protocol::ListQueue>(body) || std::holds_alternative<protocol::GetRecord>(body) ||
         std::holds_alternative<protocol::ListRecords>(body) || std::holds_alternative<protocol::Whoami>(body);
}

class ZmqClient final : public Client {
 public:
  ZmqClient(const ClientConfig& config, KeyPair keys, std::string server_key, Reconnect reconnect)
      : channel_(coordinator_endpoints(config), std::move(keys), std::move(server_key), config.timeout_ms,
                 std::move(reconnect)),
        timeout_ms_(config.timeout_ms),
        watch_jobs_(config.watch_jobs) {}

  bool watches_jobs() const override { return watch_jobs_; }

  Result<protocol::Body> request(protocol::Body body) override {
    // A watch_jobs is answered when a job changes or its wait passes: the reply timeout starts then.
    const auto* watch = std::get_if<protocol::WatchJobs>(&body);
    if (watch == nullptr) return channel_.request(body, may_repeat(body));
    channel_.set_timeout_ms(timeout_ms_ + watch->wait_ms);
    auto reply = channel_.request(body, true);
    channel_.set_timeout_ms(timeout_ms_);
    return reply;
  }

 private:
  transport::RequestChannel channel_;
  std::uint32_t timeout_ms_;
  bool watch_jobs_;
};

std::string resolve(const fs::path& base, const std::string& path) {
  if (path.empty() || fs::path(path).is_absolute()) return path;
  return (base / path).lexically_normal().string();
}

}  // namespace

std::vector<std::string> coordinator_endpoints(const ClientConfig& config) {
  std::vector<std::string> endpoints{config.coordinator_endpoint};
  endpoints.insert(endpoints.end(), config.standby_endpoints.begin(), config.standby_endpoints.end());
  return endpoints;
}

Result<ClientConfig> load_client_config(const std::string& path) {
  auto text = config::read_text_file(path, "the client config",
                                     "pass --config, set KILN_CONFIG, or create ~/.config/kiln/client.toml (see "
                                     "docs/operations.md)");
  if (!text) return fail(Errc::config, text.error().message);
  return client_config_from_text(*text, path);
}

Result<ClientConfig> client_config_from_text(std::string_view text, const std::string& path) {
  auto root = config::parse_toml(text, path, "fix the file");
  if (!root) return fail(Errc::config, root.error().message);
  if (auto ok = config::check_known_keys(path, *root, "client.toml",
                                         {"coordinator", "coordinator_public_key_file", "secret_key_file", "timeout_ms",
                                          "watch_jobs"});
      !ok) {
    return tl::unexpected(ok.error());
  }
  const fs::path base = fs::absolute(path).parent_path();
  ClientConfig config;
  for (const auto& [key, node] : *root) {
    const std::string k(key.str());
    const std::string at = config::where(path, key.source());
    if (k == "timeout_ms") {
      if (!node.is_integer() || node.as_integer()->get() < 100 || node.as_integer()->get() > 3600000) {
        return fail(Errc::config, fmt::format("{}: timeout_ms must be an integer from 100 to 3600000", at));
      }
      config.timeout_ms = static_cast<std::uint32_t>(node.as_integer()->get());
      continue;
    }
    if (k == "watch_jobs") {
      if (!node.is_boolean()) return fail(Errc::config, fmt::format("{}: watch_jobs must be true or false", at));
      config.watch_jobs = node.as_boolean()->get();
      continue;
    }
    if (k == "coordinator") {
      auto endpoints = config::coordinator_endpoints(at, node, k);
      if (!endpoints) return tl::unexpected(endpoints.error());
      config.coordinator_endpoint = endpoints->front();
      config.standby_endpoints.assign(endpoints->begin() + 1, endpoints->end());
      continue;
    }
    if (!node.is_string()) return fail(Errc::config, fmt::format("{}: {} must be a string", at, k));
    const std::string value = node.as_string()->get();
    if (k == "coordinator_public_key_file") {
      config.coordinator_public_key_file = resolve(base, value);
      config.coordinator_public_key_file_origin = at;
    } else {
      config.secret_key_file = resolve(base, value);
      config.secret_key_file_origin = at;
    }
  }
  if (config.coordinator_public_key_file.empty() || config.secret_key_file.empty()) {
    return fail(Errc::config, fmt::format("{}: coordinator_public_key_file and secret_key_file are required", path));
  }
  return config;
}

Result<std::unique_ptr<Client>> Client::connect(const ClientConfig& config, Reconnect reconnect) {
  // A key file that is missing or invalid is a configuration problem, whatever the file system said.
  const auto key_problem = [](const std::string& origin, const char* key, const Error& error) {
    return fail(Errc::config, fmt::format("{}{}{}: {}", origin, origin.empty() ? "" : ": ", key, error.message));
  };
  auto keys = load_secret_key_file(config.secret_key_file);
  if (!keys) return key_problem(config.secret_key_file_origin, "secret_key_file", keys.error());
  auto server_key = load_public_key_file(config.coordinator_public_key_file);
  if (!server_key) {
    return key_problem(config.coordinator_public_key_file_origin, "coordinator_public_key_file", server_key.error());
  }
  try {
    return std::unique_ptr<Client>(std::make_unique<ZmqClient>(config, std::move(*keys), std::move(*server_key),
                                                                               std::move(reconnect)));
  } catch (const zmq::error_t& e) {
    return fail(Errc::io, fmt::format("cannot connect to {}: {}; check the coordinator address",
                                      config.coordinator_endpoint, e.what()));
  }
}

}  // namespace kiln::cli

#include "coordinator/cli/client.h"

#include <chrono>
#include <filesystem>
#include <thread>

#include <fmt/format.h>
#include <zmq.hpp>

#include "common/config/endpoint.h"
#include "common/config/toml_errors.h"
#include "common/transport/zmq_transport.h"

namespace kiln::cli {
namespace {

namespace fs = std::filesystem;

// Reads and watches: asking one twice changes nothing, so a follower may repeat it.
bool may_repeat(const protocol::Body& body) {
  return std::holds_alternative<protocol::GetJob>(body) || std::holds_alternative<protocol::ListJobs>(body) ||
         std::holds_alternative<protocol::ListNodes>(body) || std::holds_alternative<protocol::ListLeases>(body) ||
         std::holds_alternative<protocol::WatchLease>(body) || std::holds_alternative<protocol::QueueWhy>(body) ||
         std::holds_alternative<protocol::ListQueue>(body) || std::holds_alternative<protocol::GetRecord>(body) ||
         std::holds_alternative<protocol::ListRecords>(body) || std::holds_alternative<protocol::Whoami>(body);
}

class ZmqClient final : public Client {
 public:
  ZmqClient(const ClientConfig& config, KeyPair keys, std::string server_key, Reconnect reconnect)
      : config_(config), keys_(std::move(keys)), server_key_(std::move(server_key)), reconnect_(std::move(reconnect)) {
    open();
  }

  Result<protocol::Body> request(protocol::Body body) override {
    if (!reconnect_.enabled || !answered_ || !may_repeat(body)) return exchange(body).reply;
    const auto since = std::chrono::steady_clock::now();
    std::uint32_t backoff_ms = reconnect_.initial_ms;
    while (true) {
      Exchange attempt = exchange(body);
      if (!attempt.connection_lost) return std::move(attempt.reply);
      const auto silent_ms =
          std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - since).count();
      if (silent_ms >= reconnect_.give_up_ms) {
        return fail(Errc::unavailable,
                    fmt::format("the coordinator at {} has not answered for {} s; what you followed is kept by "
                                "the coordinator: run the command again once it is back",
                                config_.coordinator_endpoint, silent_ms / 1000));
      }
      if (reconnect_.notice) {
        reconnect_.notice(fmt::format("the coordinator at {} is not answering ({}); reconnecting in {} ms",
                                      config_.coordinator_endpoint, attempt.reply.error().message, backoff_ms));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(backoff_ms));
      backoff_ms = std::min(2 * backoff_ms, reconnect_.max_ms);
      open();
    }
  }

 private:
  struct Exchange {
    Result<protocol::Body> reply;
    bool connection_lost = false;  // no reply can come on this connection: ask again on a new one
  };

  // A new connection: a new socket, so nothing queued on the old one is sent late.
  void open() {
    monitor_.reset();
    socket_ = zmq::socket_t(context_, zmq::socket_type::dealer);
    transport::configure_curve_client(socket_, keys_, server_key_, limits_.max_message_bytes);
    monitor_ = std::make_unique<transport::HandshakeMonitor>(context_, socket_,
                                                             fmt::format("client-{}", connections_++));
    socket_.connect(config_.coordinator_endpoint);
  }

  Exchange exchange(const protocol::Body& body) {
    const bool following = reconnect_.enabled && answered_;
    const std::uint64_t id = next_id_++;
    auto envelope = protocol::make_envelope(body, id);
    if (auto auth = monitor_->poll(); !auth) return {tl::unexpected(auth.error())};
    (void)monitor_->take_connection_lost();  // what happened before this request does not matter to it
    if (auto s = transport::send_envelope(socket_, nullptr, envelope, limits_); !s) {
      // A DEALER queues until connected; a full queue means the coordinator is unreachable.
      return {tl::unexpected(s.error()), following};
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(config_.timeout_ms);
    while (true) {
      if (auto auth = monitor_->poll(); !auth) return {tl::unexpected(auth.error())};
      if (following && monitor_->take_connection_lost()) {
        return {fail(Errc::unavailable, "the connection dropped"), true};
      }
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) {
        return {fail(Errc::timeout,
                     fmt::format("no answer from the coordinator at {} within {} ms; is it running, and is the "
                                 "address right?",
                                 config_.coordinator_endpoint, config_.timeout_ms)),
                following};
      }
      zmq::pollitem_t items[] = {{socket_.handle(), 0, ZMQ_POLLIN, 0},
                                 {monitor_->socket().handle(), 0, ZMQ_POLLIN, 0}};
      try {
        zmq::poll(items, 2, std::min<std::chrono::milliseconds>(left, std::chrono::milliseconds(100)));
      } catch (const zmq::error_t& e) {
        if (e.num() == EINTR) return {fail(Errc::io, "interrupted")};
        return {fail(Errc::io, e.what())};
      }
      if (!(items[0].revents & ZMQ_POLLIN)) continue;
      auto received = transport::receive(socket_, false);
      if (!received) continue;
      auto reply = protocol::decode(received->header, received->body, limits_);
      if (!reply) return {fail(reply.error().code, "the coordinator's reply was invalid: " + reply.error().message)};
      if (reply->header.corr != id) continue;  // a late reply to an earlier, timed-out request
      answered_ = true;
      if (auto* error = std::get_if<protocol::ErrorReply>(&reply->body)) {
        return {fail(errc_from_string(error->code).value_or(Errc::internal), error->message)};
      }
      return {std::move(reply->body)};
    }
  }

  ClientConfig config_;
  KeyPair keys_;
  std::string server_key_;
  Reconnect reconnect_;
  protocol::CodecLimits limits_;
  zmq::context_t context_;
  zmq::socket_t socket_;
  std::unique_ptr<transport::HandshakeMonitor> monitor_;
  std::uint64_t connections_ = 0;
  std::uint64_t next_id_ = 1;
  bool answered_ = false;  // the coordinator has answered once: from now on this client follows
};

std::string resolve(const fs::path& base, const std::string& path) {
  if (path.empty() || fs::path(path).is_absolute()) return path;
  return (base / path).lexically_normal().string();
}

}  // namespace

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
                                         {"coordinator", "coordinator_public_key_file", "secret_key_file", "timeout_ms"});
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
    if (!node.is_string()) return fail(Errc::config, fmt::format("{}: {} must be a string", at, k));
    const std::string value = node.as_string()->get();
    if (k == "coordinator") {
      if (auto problem = config::tcp_endpoint_problem(value, /*binds=*/false)) {
        return fail(Errc::config, fmt::format("{}: coordinator \"{}\" {}", at, value, *problem));
      }
      config.coordinator_endpoint = value;
    } else if (k == "coordinator_public_key_file") {
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

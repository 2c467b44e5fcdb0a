// A client session with the coordinator over the client endpoint: one DEALER socket with
// CURVE, request/reply matched by corr. Used by every program that talks to the coordinator as a
// client: the kiln command, the qualifier, the release desk, the demo and the tests.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "common/keys.h"
#include "common/protocol/codec.h"
#include "common/transport/reconnect.h"

namespace kiln::cli {

struct ClientConfig {
  std::string coordinator_endpoint = "tcp://127.0.0.1:7602";
  // The other coordinators sharing its store, tried in order when it is a standby or cannot be
  // reached (docs/operations.md, "A standby coordinator"): client.toml's coordinator = [...].
  std::vector<std::string> standby_endpoints;
  std::string coordinator_public_key_file;
  std::string secret_key_file;
  std::uint32_t timeout_ms = 10000;
  // false: jobs are followed by polling get_job, as with a coordinator older than watch_jobs
  // (client.toml's watch_jobs; for comparing the two, docs/performance.md).
  bool watch_jobs = true;
  // "file:line" of the key file settings, so a problem with a key file names where it was set.
  std::string coordinator_public_key_file_origin;
  std::string secret_key_file_origin;
};

// Every coordinator the client may talk to, in the order to try them.
std::vector<std::string> coordinator_endpoints(const ClientConfig& config);

// Reads client.toml: coordinator, coordinator_public_key_file, secret_key_file, timeout_ms, watch_jobs.
// A missing, unreadable or invalid key file is found by connect(), as an Errc::config error
// naming the line of client.toml that points at it.
Result<ClientConfig> load_client_config(const std::string& path);
// The same from the file's text; `path` names the file in errors and is the base of relative paths.
Result<ClientConfig> client_config_from_text(std::string_view text, const std::string& path);

// How a client keeps following what it watches across a coordinator restart: a read or a
// watch is asked again on a new connection, a submit, cancel or lease never (docs/protocol.md §5.6).
using Reconnect = transport::Reconnect;

class Client {
 public:
  static Result<std::unique_ptr<Client>> connect(const ClientConfig& config, Reconnect reconnect = {});
  virtual ~Client() = default;

  // Sends one request and waits for its reply. An ErrorReply from the coordinator comes back
  // as an Error with the coordinator's code and message.
  virtual Result<protocol::Body> request(protocol::Body body) = 0;
  // Whether jobs are followed by watch_jobs (JobWatcher) rather than by polling.
  virtual bool watches_jobs() const { return true; }
};

// The reply as the type a request expects; any other reply is an error naming both.
template <class T>
Result<T> expect_reply(Result<protocol::Body> reply) {
  if (!reply) return tl::unexpected(reply.error());
  if (auto* t = std::get_if<T>(&*reply)) return std::move(*t);
  return fail(Errc::bad_message, "the coordinator answered with '" + std::string(protocol::type_name(*reply)) +
                                     "' where '" + std::string(T::kType) + "' was expected");
}

}  // namespace kiln::cli

// coordinator.toml: endpoints, key files, the database, authorized keys with their roles,
// and the core's knobs. docs/operations.md is the reference.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/error.h"
#include "common/keys.h"
#include "common/protocol/messages.h"
#include "coordinator/core/knobs.h"
#include "records/risk_register.h"
#include "coordinator/store/store.h"

namespace kiln::coordinator {

struct AuthorizedKey {
  std::string name;  // an agent key's name is the node id it may register as
  protocol::Role role = protocol::Role::developer;
  std::string public_key;
};

struct CoordinatorConfig {
  std::string source_path;
  std::string agent_endpoint = "tcp://127.0.0.1:7601";
  std::string client_endpoint = "tcp://127.0.0.1:7602";
  std::string secret_key_file;
  std::string secret_key_file_origin;  // "file:line:column" of the key that names it
  std::string database = "kiln.db";  // the SQLite store's file
  // [store]: SQLite (database above) or PostgreSQL (docs/operations.md, "The store").
  StoreBackend store_backend = StoreBackend::sqlite;
  PostgresLocation postgres;
  std::string log_level = "info";
  std::size_t max_message_bytes = 1 << 20;
  // Content-addressed job artifacts (docs/protocol.md §14); empty: <database>.artifacts, or none
  // for an in-memory database.
  std::string artifact_dir;
  std::uint64_t max_artifact_bytes = 4ULL << 30;
  CoordinatorKnobs knobs;
  // [environments]: the environments repository whose branch the coordinator watches, so that
  // nodes converge on what their environment runs (docs/releases.md, "Convergence"); empty repo:
  // no convergence. The wave size is knobs.rollout_wave_size.
  std::string environments_repo;
  std::string environments_branch = "main";
  std::uint32_t environments_poll_interval_ms = 10000;
  // [http] listen: HOST:PORT where /metrics is served (docs/metrics.md); empty: no HTTP server.
  std::string http_listen;
  // [coordinator] risk_register: the register whose [[team]] approvers may waive their teams'
  // gates; the coordinator refuses every other key's waiver, and every waiver without one.
  // Loaded at start (load_coordinator_config_to_start), its problems among the file's.
  std::string risk_register;
  std::shared_ptr<const qualification::RiskRegister> waiver_register;
  // [[key]] in the order of the file. The ZAP handler finds a connecting key by its public key
  // and names it to ZeroMQ by its position here, so that each message received finds its key
  // by index (authorized_key_of), not by a 40-character public key.
  std::vector<AuthorizedKey> authorized_keys;
  std::unordered_map<std::string, std::size_t> key_index_by_public_key;
};

// Relative paths resolve against the file's directory. The error lists every problem of the
// file, one a line, each naming the file, the line and what to change.
Result<CoordinatorConfig> load_coordinator_config(const std::string& path);
// The same from the file's text; `path` names the file in errors and is the base of relative paths.
Result<CoordinatorConfig> coordinator_config_from_text(std::string_view text, const std::string& path);
// What kiln-coordinator and its check-config load: the file as above and, among its problems in
// the order of the file, those of the files it names that would stop the coordinator at start
// (the secret key missing, unreadable or open to others; the database's directory missing or
// not writable; the PostgreSQL password file missing or open to others). Every one of them is a configuration error (exit status 2).
Result<CoordinatorConfig> load_coordinator_config_to_start(const std::string& path);

// Where the store keeps its data, for logs and check-config: the SQLite file, or the PostgreSQL
// server and database (never a password).
std::string store_description(const CoordinatorConfig& config);

// The coordinator's keypair from secret_key_file; a problem (missing, unreadable, open
// permissions) names the file and line of the config that points at it.
Result<KeyPair> load_coordinator_keys(const CoordinatorConfig& config);

}  // namespace kiln::coordinator

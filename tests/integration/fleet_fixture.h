// Starts real kiln-coordinator, kiln-agent and kiln-qualifier processes on loopback for integration tests,
// each with its own keys, configs and simulated chips under a temporary directory, and
// stops them all when the fixture goes away.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "client/client.h"

namespace kiln::testing {

class ChildProcess {
 public:
  // stdout and stderr go to log_file, or stderr to error_file when one is given.
  ChildProcess(std::vector<std::string> argv, const std::filesystem::path& log_file,
               const std::filesystem::path& error_file = {});
  ~ChildProcess();
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  pid_t pid() const { return pid_; }
  void signal(int signo);
  // Waits for the process to exit; returns its wait status (also when running() reaped it
  // first), or -1 on timeout.
  int wait(std::chrono::milliseconds timeout);
  bool running();

 private:
  pid_t pid_ = -1;
  bool reaped_ = false;
  int status_ = 0;  // the wait status, once reaped
};

struct AgentSpec {
  AgentSpec(std::string node = "", std::string rev = "a", std::vector<std::string> node_labels = {})  // NOLINT(google-explicit-constructor)
      : node_id(std::move(node)), revision(std::move(rev)), labels(std::move(node_labels)) {}
  std::string node_id;
  std::string revision;
  std::vector<std::string> labels;  // agent.toml labels, KEY=VALUE
  bool cpu_backend = false;  // the CPU reference backend (one chip: the host) instead of the sim's chips
};

class Fleet {
 public:
  explicit Fleet(std::string name, int heartbeat_interval_ms = 200, int liveness_missed_beats = 3);
  ~Fleet();

  const std::filesystem::path& dir() const { return dir_; }
  std::string agent_endpoint() const { return "tcp://127.0.0.1:" + std::to_string(agent_port_); }
  std::string client_endpoint() const { return "tcp://127.0.0.1:" + std::to_string(client_port_); }
  bool coordinator_running() { return coordinator_ && coordinator_->running(); }

  // Makes a keypair NAME.key/.pub and authorizes it with ROLE on the coordinator.
  void add_key(const std::string& name, const std::string& role);
  // Makes a key that the coordinator does not know.
  void add_unknown_key(const std::string& name);

  void start_coordinator();
  void stop_coordinator(int signo);
  // Sends the running coordinator a signal and returns (SIGSTOP freezes it, SIGCONT resumes it).
  void signal_coordinator(int signo);
  // Keeps the coordinator's state in PostgreSQL at `url` (a libpq connection string) instead of
  // SQLite; call before start_coordinator.
  void use_postgres(const std::string& url) { postgres_url_ = url; }
  // A second coordinator on the same PostgreSQL store with ports of its own, logging to
  // standby.log; the agents, clients and qualifiers added after this list both coordinators.
  // Call after use_postgres and before add_agent, add_qualifier and client.
  void add_standby();
  void start_standby();
  void stop_standby(int signo);
  bool standby_running() { return standby_ && standby_->running(); }
  std::string standby_client_endpoint() const { return "tcp://127.0.0.1:" + std::to_string(standby_client_port_); }
  // More tables for coordinator.toml, e.g. "[environments]\nrepo = ...\n"; call before start_coordinator.
  void add_coordinator_tables(const std::string& toml) { coordinator_tables_ += toml; }
  // More lines of its [knobs] table, e.g. "ended_jobs_in_memory = 2\n"; call before start_coordinator.
  void add_coordinator_knobs(const std::string& toml) { coordinator_knobs_ += toml; }
  // More lines of its [coordinator] table, e.g. "risk_register = \"risks.toml\"\n"; call before start_coordinator.
  void add_coordinator_settings(const std::string& toml) { coordinator_settings_ += toml; }
  // extra_driver_options: appended to the sim driver's options, e.g. "self_test_time_scale=0.05";
  // extra_knobs: more lines of its [knobs], e.g. "job_dirs_max_bytes = 1048576\n"; extra_tables:
  // more tables of its agent.toml, e.g. "[http]\nlisten = \"127.0.0.1:9472\"\n".
  void add_agent(const AgentSpec& spec, const std::string& extra_driver_options = "",
                 const std::string& extra_knobs = "", const std::string& extra_tables = "");
  void start_agent(const std::string& node_id);
  void stop_agent(const std::string& node_id, int signo);
  std::filesystem::path agent_config(const std::string& node_id) const { return dir_ / (node_id + ".toml"); }

  // A kiln-qualifier NAME with its own key (role ci) and NAME.toml: the fleet directory's
  // models.toml, bundles/, golden/ and tickets/, claims of 3 s. `settings` ("key" -> TOML value)
  // replace or add [qualifier] settings, e.g. {"claim_ms", "5000"}; `extra_tables` are more tables
  // of NAME.toml. Call before start_coordinator.
  void add_qualifier(const std::string& name, const std::map<std::string, std::string>& settings = {},
                     const std::string& extra_tables = "");
  std::filesystem::path qualifier_config(const std::string& name) const { return dir_ / (name + ".toml"); }
  // Its log is log_of(NAME).
  void start_qualifier(const std::string& name);
  void stop_qualifier(const std::string& name, int signo);

  std::unique_ptr<cli::Client> client(const std::string& key_name, std::uint32_t timeout_ms = 5000);
  // Runs the kiln command with a client config for KEY; returns its exit code and output.
  int kiln(const std::string& key_name, const std::vector<std::string>& args, std::string* output = nullptr,
           std::chrono::seconds timeout = std::chrono::seconds(60));
  // The same with stdout and stderr apart, as a script reading --json sees them.
  int kiln_split(const std::string& key_name, const std::vector<std::string>& args, std::string* out,
                 std::string* err, std::chrono::seconds timeout = std::chrono::seconds(60));
  // Starts the kiln command and returns at once; its output goes to log_file.
  std::unique_ptr<ChildProcess> start_kiln(const std::string& key_name, const std::vector<std::string>& args,
                                           const std::filesystem::path& log_file);

  // Runs kiln-sim-chip on a node's simulated chips (inject, clear, show); returns its exit code.
  int sim_chip(const std::string& node_id, const std::vector<std::string>& args);

  // HOST:PORT of a loopback port free now, for a process's [http] listen.
  static std::string free_loopback_address();

  // Polls `done` every 50 ms until it holds or the timeout passes.
  static bool eventually(const std::function<bool()>& done, std::chrono::milliseconds timeout);

  std::string log_of(const std::string& process) const;

 private:
  void write_coordinator_config();
  void write_coordinator_config(const std::string& file, int agent_port, int client_port);
  // The value of a config's coordinator address: one, or both with a standby.
  std::string coordinators_toml(int port, int standby_port) const;
  std::string client_config(const std::string& key_name, std::uint32_t timeout_ms);

  std::string name_;
  std::filesystem::path dir_;
  int heartbeat_interval_ms_;
  int liveness_missed_beats_;
  int agent_port_ = 0;
  int client_port_ = 0;
  std::vector<std::pair<std::string, std::string>> keys_;  // name, role
  std::string coordinator_tables_;
  std::string coordinator_settings_;
  std::string coordinator_knobs_;
  std::string postgres_url_;
  std::map<std::string, AgentSpec> agents_;
  int standby_agent_port_ = 0;
  int standby_client_port_ = 0;
  std::unique_ptr<ChildProcess> coordinator_;
  std::unique_ptr<ChildProcess> standby_;
  std::map<std::string, std::unique_ptr<ChildProcess>> agent_processes_;
  std::map<std::string, std::unique_ptr<ChildProcess>> qualifier_processes_;
};

}  // namespace kiln::testing

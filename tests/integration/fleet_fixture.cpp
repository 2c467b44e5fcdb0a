#include "tests/integration/fleet_fixture.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/keys.h"
#include "common/process/cgroup.h"
#include "common/transport/loopback_ports.h"
#include "tests/support/text.h"

namespace kiln::testing {
namespace fs = std::filesystem;

ChildProcess::ChildProcess(std::vector<std::string> argv, const fs::path& log_file, const fs::path& error_file) {
  pid_ = ::fork();
  if (pid_ == 0) {
    int fd = ::open(log_file.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    ::dup2(fd, 1);
    ::dup2(error_file.empty() ? fd : ::open(error_file.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644), 2);
    std::vector<char*> args;
    for (auto& a : argv) args.push_back(a.data());
    args.push_back(nullptr);
    ::execv(args[0], args.data());
    std::perror("execv");
    ::_exit(127);
  }
}

ChildProcess::~ChildProcess() {
  if (running()) {
    signal(SIGTERM);
    if (wait(std::chrono::seconds(5)) < 0) {
      signal(SIGKILL);
      wait(std::chrono::seconds(5));
    }
  }
}

void ChildProcess::signal(int signo) {
  if (pid_ > 0 && !reaped_) ::kill(pid_, signo);
}

int ChildProcess::wait(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (running()) {
    if (std::chrono::steady_clock::now() > deadline) return -1;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return status_;
}

bool ChildProcess::running() {
  if (reaped_ || pid_ <= 0) return false;
  if (::waitpid(pid_, &status_, WNOHANG) == pid_) reaped_ = true;
  return !reaped_;
}

Fleet::Fleet(std::string name, int heartbeat_interval_ms, int liveness_missed_beats)
    : name_(std::move(name)),
      heartbeat_interval_ms_(heartbeat_interval_ms),
      liveness_missed_beats_(liveness_missed_beats) {
  dir_ = fs::temp_directory_path() / fmt::format("kiln-it-{}-{}", name_, ::getpid());
  fs::remove_all(dir_);
  fs::create_directories(dir_);
  const std::vector<int> ports = transport::free_loopback_ports(2);
  agent_port_ = ports[0];
  client_port_ = ports[1];
  auto keys = generate_keypair();
  KILN_ASSERT(keys.has_value(), "CURVE keys can be made");
  KILN_ASSERT(write_keypair((dir_ / "coordinator").string(), *keys).has_value(), "the test dir is writable");
}

Fleet::~Fleet() {
  qualifier_processes_.clear();
  agent_processes_.clear();
  // An agent killed for a test and never restarted leaves its cgroups (empty: their processes
  // died with it) under kiln-jobs; it logged where they are.
  const std::string marker = "a cgroup v2 directory per child under ";
  for (const auto& [node_id, spec] : agents_) {
    const std::string log = log_of(node_id);
    if (const std::size_t at = log.find(marker); at != std::string::npos) {
      const std::size_t start = at + marker.size();
      (void)remove_cgroup(log.substr(start, log.find('\n', start) - start), 0);
    }
  }
  coordinator_.reset();
  standby_.reset();
  if (!std::getenv("KILN_KEEP_TEST_DIRS")) fs::remove_all(dir_);
}

void Fleet::add_key(const std::string& name, const std::string& role) {
  add_unknown_key(name);
  keys_.emplace_back(name, role);
  write_coordinator_config();
}

void Fleet::add_unknown_key(const std::string& name) {
  auto keys = generate_keypair();
  KILN_ASSERT(keys.has_value(), "CURVE keys can be made");
  KILN_ASSERT(write_keypair((dir_ / name).string(), *keys).has_value(), "the test dir is writable");
}

void Fleet::write_coordinator_config() {
  write_coordinator_config("coordinator.toml", agent_port_, client_port_);
  if (standby_client_port_ != 0) write_coordinator_config("standby.toml", standby_agent_port_, standby_client_port_);
}

std::string Fleet::coordinators_toml(int port, int standby_port) const {
  if (standby_client_port_ == 0) return fmt::format("\"tcp://127.0.0.1:{}\"", port);
  return fmt::format("[\"tcp://127.0.0.1:{}\", \"tcp://127.0.0.1:{}\"]", port, standby_port);
}

void Fleet::add_standby() {
  KILN_ASSERT(!postgres_url_.empty(), "a standby shares a PostgreSQL store");
  const std::vector<int> ports = transport::free_loopback_ports(2);
  standby_agent_port_ = ports[0];
  standby_client_port_ = ports[1];
  write_coordinator_config();
}

void Fleet::start_standby() {
  write_coordinator_config();
  standby_ = std::make_unique<ChildProcess>(
      std::vector<std::string>{std::string(KILN_BIN_DIR) + "/kiln-coordinator", "--config",
                               (dir_ / "standby.toml").string()},
      dir_ / "standby.log");
}

void Fleet::stop_standby(int signo) {
  if (!standby_) return;
  standby_->signal(signo);
  standby_->wait(std::chrono::seconds(10));
  standby_.reset();
}

void Fleet::write_coordinator_config(const std::string& file, int agent_port, int client_port) {
  std::ofstream out(dir_ / file);
  out << fmt::format(
      "[coordinator]\nagent_endpoint = \"tcp://127.0.0.1:{}\"\nclient_endpoint = \"tcp://127.0.0.1:{}\"\n"
      "secret_key_file = \"coordinator.key\"\n{}log_level = \"debug\"\n{}\n"
      "[knobs]\nheartbeat_interval_ms = {}\nliveness_missed_beats = {}\njob_timeout_slack_ms = 5000\n{}",
      agent_port, client_port, postgres_url_.empty() ? "database = \"kiln.db\"\n" : "", coordinator_settings_,
      heartbeat_interval_ms_, liveness_missed_beats_, coordinator_knobs_);
  if (!postgres_url_.empty()) out << fmt::format("\n[store]\nbackend = \"postgresql\"\nurl = \"{}\"\n", postgres_url_);
  out << "\n" << coordinator_tables_;
  for (const auto& [name, role] : keys_) {
    out << fmt::format("\n[[keys]]\nname = \"{}\"\nrole = \"{}\"\npublic_key_file = \"{}.pub\"\n", name, role, name);
  }
}

void Fleet::start_coordinator() {
  write_coordinator_config();
  coordinator_ = std::make_unique<ChildProcess>(
      std::vector<std::string>{std::string(KILN_BIN_DIR) + "/kiln-coordinator", "--config",
                               (dir_ / "coordinator.toml").string()},
      dir_ / "coordinator.log");
}

void Fleet::signal_coordinator(int signo) {
  if (coordinator_) coordinator_->signal(signo);
}

void Fleet::stop_coordinator(int signo) {
  if (!coordinator_) return;
  coordinator_->signal(signo);
  coordinator_->wait(std::chrono::seconds(10));
  coordinator_.reset();
}

// probe_timeout_ms: generous, since a check that overruns fails the probe and quarantines the node;
// on a loaded 2-core CI machine a telemetry read has taken over a second.
void Fleet::add_agent(const AgentSpec& spec, const std::string& extra_driver_options, const std::string& extra_knobs,
                      const std::string& extra_tables) {
  add_key(spec.node_id, "agent");
  agents_[spec.node_id] = spec;
  std::ofstream out(agent_config(spec.node_id));
  if (!spec.labels.empty()) out << fmt::format("labels = [\"{}\"]\n", fmt::join(spec.labels, "\", \""));
  const std::string driver =
      spec.cpu_backend
          ? fmt::format("[driver]\nlibrary = \"{}/libkiln_cpu_driver.so\"\noptions = \"{}\"\n\n", KILN_LIB_DIR,
                        extra_driver_options)
          : fmt::format("[driver]\nlibrary = \"{}/libkiln_sim_driver.so\"\n"
                        "options = \"state_dir={}/sim-{};node_id={};hardware_revision={};seed=7{}\"\n\n",
                        KILN_LIB_DIR, dir_.string(), spec.node_id, spec.node_id, spec.revision,
                        extra_driver_options.empty() ? "" : ";" + extra_driver_options);
  out << fmt::format(
      "node_id = \"{0}\"\nwork_dir = \"work-{0}\"\nsecret_key_file = \"{0}.key\"\n\n"
      "[coordinator]\nendpoint = {1}\npublic_key_file = \"coordinator.pub\"\n\n{2}"
      "[local_socket]\npath = \"{3}/{0}.sock\"\ngroup = \"root\"\n\n"
      "[knobs]\nheartbeat_interval_ms = {4}\nliveness_missed_beats = {5}\nreconnect_backoff_initial_ms = 100\n"
      "reconnect_backoff_max_ms = 1000\nkill_grace_ms = 500\nprobe_interval_ms = 3000\nprobe_timeout_ms = 3000\n{7}\n"
      "[workloads]\nsmoke = \"{6}/kiln-workload-smoke\"\nsleep = \"/bin/sleep\"\n"
      "model = \"{6}/kiln-workload-model\"\nshell = \"/bin/sh\"\n",
      spec.node_id, coordinators_toml(agent_port_, standby_agent_port_), driver, dir_.string(),
      heartbeat_interval_ms_, liveness_missed_beats_, KILN_BIN_DIR, extra_knobs);
  out << "\n" << extra_tables;
}

void Fleet::start_agent(const std::string& node_id) {
  agent_processes_[node_id] = std::make_unique<ChildProcess>(
      std::vector<std::string>{std::string(KILN_BIN_DIR) + "/kiln-agent", "--config", agent_config(node_id).string()},
      dir_ / (node_id + ".log"));
}

void Fleet::stop_agent(const std::string& node_id, int signo) {
  auto it = agent_processes_.find(node_id);
  if (it == agent_processes_.end()) return;
  it->second->signal(signo);
  it->second->wait(std::chrono::seconds(10));
  agent_processes_.erase(it);
}

void Fleet::add_qualifier(const std::string& name, const std::map<std::string, std::string>& settings,
                          const std::string& extra_tables) {
  add_key(name, "ci");
  std::map<std::string, std::string> all = {
      {"name", fmt::format("\"{}\"", name)},
      {"coordinator", coordinators_toml(client_port_, standby_client_port_)},
      {"coordinator_public_key_file", "\"coordinator.pub\""},
      {"secret_key_file", fmt::format("\"{}.key\"", name)},
      {"timeout_ms", "3000"},
      {"model_set", "\"models.toml\""},
      {"bundle_dir", "\"bundles\""},
      {"golden_dir", "\"golden\""},
      {"claim_ms", "3000"},
      {"poll_interval_ms", "200"}};
  for (const auto& [key, value] : settings) all[key] = value;
  std::ofstream out(qualifier_config(name));
  out << "[qualifier]\n";
  for (const auto& [key, value] : all) out << key << " = " << value << "\n";
  out << "\n[tickets]\ndir = \"tickets\"\n\n" << extra_tables;
}

void Fleet::start_qualifier(const std::string& name) {
  qualifier_processes_[name] = std::make_unique<ChildProcess>(
      std::vector<std::string>{std::string(KILN_BIN_DIR) + "/kiln-qualifier", "--config",
                               qualifier_config(name).string()},
      dir_ / (name + ".log"));
}

void Fleet::stop_qualifier(const std::string& name, int signo) {
  auto it = qualifier_processes_.find(name);
  if (it == qualifier_processes_.end()) return;
  it->second->signal(signo);
  it->second->wait(std::chrono::seconds(30));
  qualifier_processes_.erase(it);
}

std::string Fleet::client_config(const std::string& key_name, std::uint32_t timeout_ms) {
  const fs::path path = dir_ / ("client-" + key_name + ".toml");
  std::ofstream(path) << fmt::format(
      "coordinator = {}\ncoordinator_public_key_file = \"coordinator.pub\"\n"
      "secret_key_file = \"{}.key\"\ntimeout_ms = {}\n",
      coordinators_toml(client_port_, standby_client_port_), key_name, timeout_ms);
  return path.string();
}

std::unique_ptr<cli::Client> Fleet::client(const std::string& key_name, std::uint32_t timeout_ms) {
  auto config = cli::load_client_config(client_config(key_name, timeout_ms));
  KILN_ASSERT(config.has_value(), "the fixture writes valid client configs");
  auto client = cli::Client::connect(*config);
  KILN_ASSERT(client.has_value(), "a client can be made from the fixture's keys");
  return std::move(*client);
}

int Fleet::kiln(const std::string& key_name, const std::vector<std::string>& args, std::string* output,
               std::chrono::seconds timeout) {
  return kiln_split(key_name, args, output, nullptr, timeout);
}

int Fleet::kiln_split(const std::string& key_name, const std::vector<std::string>& args, std::string* out,
                      std::string* err, std::chrono::seconds timeout) {
  const fs::path out_file = dir_ / "kiln-command.out";
  const fs::path err_file = err ? dir_ / "kiln-command.err" : fs::path();
  std::vector<std::string> argv{std::string(KILN_BIN_DIR) + "/kiln", "--config", client_config(key_name, 3000)};
  argv.insert(argv.end(), args.begin(), args.end());
  fs::remove(out_file);
  if (err) fs::remove(err_file);
  ChildProcess command(argv, out_file, err_file);
  int status = command.wait(timeout);
  if (out) *out = read_file(out_file);
  if (err) *err = read_file(err_file);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::unique_ptr<ChildProcess> Fleet::start_kiln(const std::string& key_name, const std::vector<std::string>& args,
                                                const fs::path& log_file) {
  std::vector<std::string> argv{std::string(KILN_BIN_DIR) + "/kiln", "--config", client_config(key_name, 3000)};
  argv.insert(argv.end(), args.begin(), args.end());
  return std::make_unique<ChildProcess>(argv, log_file);
}

std::string Fleet::free_loopback_address() {
  return "127.0.0.1:" + std::to_string(transport::free_loopback_ports(1).front());
}

bool Fleet::eventually(const std::function<bool()>& done, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return done();
}

int Fleet::sim_chip(const std::string& node_id, const std::vector<std::string>& args) {
  std::vector<std::string> argv{std::string(KILN_BIN_DIR) + "/kiln-sim-chip"};
  argv.insert(argv.end(), args.begin(), args.end());
  argv.push_back("--state-dir");
  argv.push_back((dir_ / ("sim-" + node_id)).string());
  ChildProcess tool(argv, dir_ / "kiln-sim-chip.log");
  int status = tool.wait(std::chrono::seconds(30));
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::string Fleet::log_of(const std::string& process) const { return read_file(dir_ / (process + ".log")); }

}  // namespace kiln::testing

#include <doctest/doctest.h>
#include <grp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>

#include "agent/host/agent_config.h"
#include "agent/host/containment.h"
#include "tests/support/temp_dir.h"
#include "tests/support/text.h"

namespace kiln::agent {
namespace {

using kiln::testing::TempDir;

// The required keys only; every test adds to it.
const std::string kMinimal = R"(node_id = "n07"
work_dir = "work"
secret_key_file = "keys/agent.key"

[coordinator]
endpoint = "tcp://coordinator.example:5555"
public_key_file = "keys/coordinator.pub"

[driver]
library = "/usr/lib/kiln/libkiln_driver_sim.so"
)";

std::string load_error(const TempDir& dir, const std::string& text) {
  const std::string path = dir.write("agent.toml", text);
  const Result<AgentConfig> config = load_agent_config(path);
  REQUIRE_MESSAGE(!config.has_value(), "expected the config to be refused");
  CHECK(config.error().code == Errc::config);
  return config.error().message;
}

using kiln::testing::contains;

}  // namespace

TEST_CASE("a complete agent.toml loads every field") {
  TempDir dir;
  const std::string path = dir.write("etc/agent.toml", R"(node_id = "n07"
work_dir = "/var/lib/kiln"
secret_key_file = "/etc/kiln/agent.key"
hardware_revision = "b"

[coordinator]
endpoint = "tcp://10.0.0.1:5555"
public_key_file = "/etc/kiln/coordinator.pub"

[driver]
library = "/usr/lib/kiln/libkiln_driver_sim.so"
options = "chips=8 seed=7"

[local_socket]
path = "/run/kiln/agent.sock"
group = "lab"

[knobs]
heartbeat_interval_ms = 250
liveness_missed_beats = 5
reconnect_backoff_initial_ms = 100
reconnect_backoff_max_ms = 10000
job_output_limit_bytes = 65536
default_job_timeout_ms = 600000
kill_grace_ms = 2000
probe_interval_ms = 30000
probe_timeout_ms = 10000
max_concurrent_jobs = 4

[workloads]
mlp = "/usr/lib/kiln/workloads/mlp"
smoke = "/usr/lib/kiln/workloads/smoke"
)");
  const Result<AgentConfig> config = load_agent_config(path);
  REQUIRE_MESSAGE(config.has_value(), config.error().describe());
  CHECK(config->config_path == path);
  CHECK(config->node_id == "n07");
  CHECK(config->work_dir == "/var/lib/kiln");
  CHECK(config->agent_secret_key_file == "/etc/kiln/agent.key");
  CHECK(config->hardware_revision_override == std::optional<std::string>("b"));
  CHECK(config->coordinator_endpoint == "tcp://10.0.0.1:5555");
  CHECK(config->coordinator_public_key_file == "/etc/kiln/coordinator.pub");
  CHECK(config->driver_library_path == "/usr/lib/kiln/libkiln_driver_sim.so");
  CHECK(config->driver_options == "chips=8 seed=7");
  CHECK(config->local_socket_path == "/run/kiln/agent.sock");
  CHECK(config->local_socket_group == "lab");
  CHECK(config->knobs.heartbeat_interval_ms == 250);
  CHECK(config->knobs.liveness_missed_beats == 5);
  CHECK(config->knobs.reconnect_backoff_initial_ms == 100);
  CHECK(config->knobs.reconnect_backoff_max_ms == 10000);
  CHECK(config->knobs.job_output_limit_bytes == 65536);
  CHECK(config->knobs.default_job_timeout_ms == 600000);
  CHECK(config->knobs.kill_grace_ms == 2000);
  CHECK(config->knobs.probe_interval_ms == 30000);
  CHECK(config->knobs.probe_timeout_ms == 10000);
  CHECK(config->knobs.max_concurrent_jobs == 4);
  REQUIRE(config->workloads.size() == 2);
  CHECK(config->workloads.at("mlp") == "/usr/lib/kiln/workloads/mlp");
  CHECK(config->key_origins.at("knobs.heartbeat_interval_ms") == path + ":19:1");

  const std::string text = describe_agent_config(*config);
  CHECK(contains(text, "n07"));
  CHECK(contains(text, "tcp://10.0.0.1:5555"));
  CHECK(contains(text, "250  (" + path + ":19:1)"));
  CHECK(contains(text, "/usr/lib/kiln/workloads/smoke"));
}

TEST_CASE("keys left out take their defaults, and the defaults are the documented ones") {
  TempDir dir;
  const Result<AgentConfig> config = load_agent_config(dir.write("agent.toml", kMinimal));
  REQUIRE_MESSAGE(config.has_value(), config.error().describe());
  CHECK(config->local_socket_group == "kiln");
  CHECK(config->local_socket_path == dir.file("work/agent.sock"));
  CHECK(!config->hardware_revision_override.has_value());
  CHECK(config->driver_options.empty());
  CHECK(config->workloads.empty());

  const AgentKnobs defaults;
  CHECK(config->knobs.heartbeat_interval_ms == defaults.heartbeat_interval_ms);
  CHECK(config->knobs.max_concurrent_jobs == defaults.max_concurrent_jobs);
  // The struct's defaults and the table that check-config and the docs print agree.
  const std::string text = describe_agent_config(*config);
  for (const KnobSpec& spec : agent_knob_specs()) {
    CAPTURE(spec.name);
    CHECK(spec.min_value <= spec.default_value);
    CHECK(spec.default_value <= spec.max_value);
    CHECK(contains(text, std::string(spec.name)));
  }
  CHECK(contains(text, "1000  (default)"));
  CHECK(contains(text, "1048576  (default)"));
  CHECK(contains(text, "3600000  (default)"));
  CHECK(contains(text, "none: this agent runs no jobs"));
}

TEST_CASE("relative paths resolve against the config file's directory") {
  TempDir dir;
  const std::string path =
      dir.write("etc/kiln/agent.toml",
                kMinimal + "\n[workloads]\nsmoke = \"../workloads/./smoke\"\n"
                           "abs = \"/opt/kiln/abs\"\n");
  const Result<AgentConfig> config = load_agent_config(path);
  REQUIRE_MESSAGE(config.has_value(), config.error().describe());
  const std::string base = dir.file("etc/kiln") + "/";
  CHECK(config->work_dir == base + "work");
  CHECK(config->agent_secret_key_file == base + "keys/agent.key");
  CHECK(config->coordinator_public_key_file == base + "keys/coordinator.pub");
  CHECK(config->workloads.at("smoke") == dir.file("etc/workloads/smoke"));
  CHECK(config->workloads.at("abs") == "/opt/kiln/abs");
}

TEST_CASE("a knob out of range names the file, the line and the accepted range") {
  TempDir dir;
  const std::string message = load_error(dir, kMinimal + "[knobs]\nheartbeat_interval_ms = 0\n");
  CHECK(message == dir.file("agent.toml") +
                       ":12:1: heartbeat_interval_ms must be between 50 and 60000 (got 0)");
}

TEST_CASE("each kind of bad value is refused with its position") {
  TempDir dir;
  const std::string file = dir.file("agent.toml");
  SUBCASE("a knob of the wrong type") {
    const std::string message =
        load_error(dir, kMinimal + "[knobs]\nkill_grace_ms = \"5s\"\n");
    CHECK(message == file + ":12:1: kill_grace_ms must be an integer (got string \"5s\")");
  }
  SUBCASE("a fractional knob") {
    const std::string message = load_error(dir, kMinimal + "[knobs]\nprobe_interval_ms = 1.5\n");
    CHECK(message == file + ":12:1: probe_interval_ms must be an integer (got float 1.5)");
  }
  SUBCASE("a value above the range") {
    const std::string message =
        load_error(dir, kMinimal + "[knobs]\n  max_concurrent_jobs = 1000\n");
    CHECK(message == file + ":12:3: max_concurrent_jobs must be between 1 and 64 (got 1000)");
  }
  SUBCASE("an endpoint that is not tcp://host:port") {
    std::string text = kMinimal;
    text.replace(text.find("tcp://coordinator.example:5555"), 30, "coordinator.example:5555");
    CHECK(contains(load_error(dir, text), file + ":6:1: endpoint \"coordinator.example:5555\" "
                                                 "must start with tcp://"));
    text = kMinimal;
    text.replace(text.find(":5555"), 5, ":99999");
    CHECK(contains(load_error(dir, text), file + ":6:1:"));
    text = kMinimal;
    text.replace(text.find(":5555"), 5, "");
    CHECK(contains(load_error(dir, text), "must name a port"));
  }
  SUBCASE("a node id with spaces") {
    std::string text = kMinimal;
    text.replace(0, 15, "node_id = \"n 7\"");
    CHECK(contains(load_error(dir, text), file + ":1:1: node_id must be 1 to 64 letters"));
  }
  SUBCASE("a string where a table belongs") {
    CHECK(contains(load_error(dir, "knobs = \"fast\"\n" + kMinimal),
                   file + ":1:1: knobs must be a table, written [knobs] (got string \"fast\")"));
  }
  SUBCASE("an empty path") {
    std::string text = kMinimal;
    text.replace(text.find("\"work\""), 6, "\"\"");
    CHECK(contains(load_error(dir, text), file + ":2:1: work_dir must not be empty"));
  }
  SUBCASE("a bad workload name") {
    CHECK(contains(load_error(dir, kMinimal + "[workloads]\n\"my job\" = \"/bin/true\"\n"),
                   file + ":12:1: workload name \"my job\" must be 1 to 64 letters"));
  }
  SUBCASE("a workload that is not a path") {
    CHECK(contains(load_error(dir, kMinimal + "[workloads]\nsmoke = 3\n"),
                   file + ":12:1: workloads.smoke must be a string (got 3)"));
  }
  SUBCASE("a socket path too long for a Unix socket") {
    CHECK(contains(load_error(dir, kMinimal + "[local_socket]\npath = \"/" +
                                       std::string(120, 's') + "\"\n"),
                   file + ":12:1: the local socket path"));
  }
  SUBCASE("knobs that contradict each other") {
    const std::string message =
        load_error(dir, kMinimal + "[knobs]\nreconnect_backoff_initial_ms = 5000\n"
                                   "reconnect_backoff_max_ms = 1000\n"
                                   "probe_interval_ms = 1000\nprobe_timeout_ms = 2000\n");
    CHECK(contains(message, file + ":13:1: reconnect_backoff_max_ms (1000) must be at least "
                                   "reconnect_backoff_initial_ms (5000)"));
    CHECK(contains(message, file + ":15:1: probe_timeout_ms (2000) must not exceed "
                                   "probe_interval_ms (1000)"));
  }
}

TEST_CASE("a missing required key is named with an example") {
  TempDir dir;
  std::string text = kMinimal;
  text.erase(text.find("endpoint"), text.find("public_key_file") - text.find("endpoint"));
  const std::string message = load_error(dir, text);
  CHECK(contains(message, dir.file("agent.toml") + ": missing required key "
                                                    "\"coordinator.endpoint\""));
  CHECK(contains(message, "tcp://"));

  const std::string empty = load_error(dir, "");
  for (const char* key : {"node_id", "work_dir", "secret_key_file", "coordinator.endpoint",
                          "coordinator.public_key_file", "driver.library"}) {
    CAPTURE(key);
    CHECK(contains(empty, "missing required key \"" + std::string(key) + "\""));
  }
}

TEST_CASE("unknown keys are errors, with a suggestion for a typo") {
  TempDir dir;
  const std::string file = dir.file("agent.toml");
  const std::string message =
      load_error(dir, kMinimal + "hearbeat = 1\n[knobs]\nheartbeat_interval = 1000\n"
                                 "[local_socket]\nmode = \"0660\"\n");
  CHECK(contains(message, file + ":11:1: unknown key \"hearbeat\" in [driver]"));
  CHECK(contains(message, file + ":13:1: unknown key \"heartbeat_interval\" in [knobs]; did you "
                                 "mean \"heartbeat_interval_ms\"?"));
  CHECK(contains(message, file + ":15:1: unknown key \"mode\" in [local_socket]; known keys "
                                 "here: path group"));

  CHECK(contains(load_error(dir, "heartbeat_interval_ms = 500\n" + kMinimal),
                 file + ":1:1: unknown key \"heartbeat_interval_ms\" at the top level; did you "
                        "mean \"heartbeat_interval_ms\" under [knobs]?"));
  CHECK(contains(load_error(dir, kMinimal + "[knobs]\nendpoint = \"tcp://a:1\"\n"),
                 file + ":12:1: unknown key \"endpoint\" in [knobs]; did you mean \"endpoint\" "
                        "under [coordinator]?"));
  CHECK(contains(load_error(dir, "nodeid = \"n1\"\n" + kMinimal),
                 file + ":1:1: unknown key \"nodeid\" at the top level; did you mean "
                        "\"node_id\"?"));
}

TEST_CASE("every problem in the file is reported at once, one per line") {
  TempDir dir;
  const std::string message = load_error(
      dir, kMinimal + "[knobs]\nheartbeat_interval_ms = 0\nmax_concurrent_jobs = 0\nbogus = 1\n");
  CHECK(std::count(message.begin(), message.end(), '\n') == 2);

  // In the order of the file, whatever order the loader checks them in.
  const std::string ordered = load_error(
      dir, "[knobs]\nmax_concurrent_jobs = 0\n[driver]\nlibrary = 3\n");
  const std::size_t knob = ordered.find(":2:1: max_concurrent_jobs");
  const std::size_t library = ordered.find(":4:1: driver.library must be a string");
  const std::size_t missing = ordered.find("missing required key \"node_id\"");
  REQUIRE(knob != std::string::npos);
  REQUIRE(library != std::string::npos);
  REQUIRE(missing != std::string::npos);
  CHECK(knob < library);
  CHECK(library < missing);
}

TEST_CASE("a TOML syntax error reports toml++'s position") {
  TempDir dir;
  const std::string message = load_error(dir, "node_id = \"n07\"\nwork_dir = /var/lib\n");
  CHECK(contains(message, dir.file("agent.toml") + ":2:12: not valid TOML: "));
  CHECK(contains(message, "kiln-agent check-config"));

  const std::string duplicate = load_error(dir, "node_id = \"a\"\nnode_id = \"b\"\n");
  CHECK(contains(duplicate, dir.file("agent.toml") + ":2:"));
}

TEST_CASE("a config file that cannot be read is an io error naming it") {
  const Result<AgentConfig> config = load_agent_config("/nonexistent/kiln/agent.toml");
  REQUIRE(!config.has_value());
  CHECK(config.error().code == Errc::io);
  CHECK(contains(config.error().message, "/nonexistent/kiln/agent.toml"));
  CHECK(contains(config.error().message, "No such file"));
}

TEST_CASE("check_agent_environment finds missing files, open secret keys and unknown groups") {
  TempDir dir;
  const group* own_group = ::getgrgid(::getgid());
  REQUIRE(own_group != nullptr);
  dir.write("keys/coordinator.pub", "public\n");
  const std::string secret = dir.write("keys/agent.key", "secret\n");
  const std::string driver = dir.write("libdriver.so", "");
  const std::string program = dir.write("bin/smoke", "#!/bin/sh\n");
  REQUIRE(::chmod(program.c_str(), 0755) == 0);
  REQUIRE(::chmod(secret.c_str(), 0600) == 0);
  std::string text = kMinimal + "[local_socket]\ngroup = \"" + own_group->gr_name +
                     "\"\n[workloads]\nsmoke = \"bin/smoke\"\n";
  text.replace(text.find("/usr/lib/kiln/libkiln_driver_sim.so"), 35, driver);
  const std::string path = dir.write("agent.toml", text);

  Result<AgentConfig> config = load_agent_config(path);
  REQUIRE_MESSAGE(config.has_value(), config.error().describe());
  const Status good = check_agent_environment(*config);
  CHECK_MESSAGE(good.has_value(), (good ? "" : good.error().message));

  REQUIRE(::chmod(secret.c_str(), 0644) == 0);
  REQUIRE(::chmod(program.c_str(), 0644) == 0);
  config->local_socket_group = "kiln-no-such-group";
  config->driver_library_path = dir.file("missing.so");
  const Status bad = check_agent_environment(*config);
  REQUIRE(!bad.has_value());
  const std::string& message = bad.error().message;
  CHECK(contains(message, path + ":3:1: secret_key_file: " + secret +
                              " may be read by group or others; run chmod 600 on it"));
  CHECK(contains(message, "driver.library: driver library " + dir.file("missing.so") +
                              ": No such file"));
  CHECK(contains(message, path + ":14:1: workloads.smoke: workload program " + program +
                              " is not executable"));
  CHECK(contains(message, "group \"kiln-no-such-group\" does not exist"));
}

}  // namespace kiln::agent

namespace kiln::agent {

TEST_CASE("job_containment: its three values, a bad one with its position, and what each chooses") {
  TempDir dir;
  const std::string file = dir.file("agent.toml");
  const auto load = [&](const std::string& extra) {
    Result<AgentConfig> config = load_agent_config(dir.write("agent.toml", extra + kMinimal));
    REQUIRE_MESSAGE(config.has_value(), config.error().describe());
    return *config;
  };
  CHECK(load("").job_containment == JobContainment::automatic);
  CHECK(load("job_containment = \"cgroup\"\n").job_containment == JobContainment::cgroup);
  CHECK(load("job_containment = \"process-group\"\n").job_containment == JobContainment::process_group);
  CHECK(contains(load_error(dir, "job_containment = \"systemd\"\n" + kMinimal),
                 file + ":1:1: job_containment must be \"auto\", \"cgroup\" or \"process-group\" (got \"systemd\")"));

  const Result<ContainmentChoice> groups = choose_containment(load("job_containment = \"process-group\"\n"));
  REQUIRE(groups.has_value());
  CHECK_FALSE(groups->cgroup);
  CHECK(contains(describe_containment(*groups), "process groups (job_containment = \"process-group\")"));

  // A root that is no cgroup v2 directory: "cgroup" refuses, "auto" falls back and says why.
  const std::string not_cgroup = "cgroup_root = \"" + dir.file("plain") + "\"\n";
  const Result<ContainmentChoice> forced = choose_containment(load("job_containment = \"cgroup\"\n" + not_cgroup));
  REQUIRE_FALSE(forced.has_value());
  CHECK(contains(forced.error().message, file + ": job_containment = \"cgroup\" but cgroup v2 cannot be used: "));
  CHECK(contains(forced.error().message, "is not a cgroup v2 directory"));
  CHECK(contains(forced.error().message, "set job_containment = \"auto\" or \"process-group\""));
  const Result<ContainmentChoice> fallback = choose_containment(load(not_cgroup));
  REQUIRE(fallback.has_value());
  CHECK_FALSE(fallback->cgroup);
  CHECK(contains(describe_containment(*fallback), "process groups only, because cgroup v2 cannot be used: "));
  // One directory per agent: the node and its work dir name it.
  CHECK(contains(fallback->why_not_cgroup, dir.file("plain") + "/kiln-jobs/n07-"));
}

}  // namespace kiln::agent

namespace kiln::agent {

TEST_CASE("labels: KEY=VALUE strings the hello announces; a malformed or repeated one is refused with its line") {
  TempDir dir;
  const std::string path = dir.write("agent.toml", "labels = [\"pool=prod\", \"rack=r12\"]\n" + kMinimal);
  const Result<AgentConfig> config = load_agent_config(path);
  REQUIRE_MESSAGE(config.has_value(), config.error().message);
  CHECK(config->labels == std::vector<std::string>{"pool=prod", "rack=r12"});
  CHECK(load_agent_config(dir.write("agent.toml", kMinimal))->labels.empty());

  const std::string file = dir.file("agent.toml");
  CHECK(load_error(dir, "labels = [\"pool\"]\n" + kMinimal) ==
        file + ":1:1: labels[0] must be a string KEY=VALUE, each of 1 to 31 letters, digits, '.', '_' or '-', as "
               "\"pool=prod\" (got \"pool\")");
  CHECK(contains(load_error(dir, "labels = [\"pool=a\", \"pool=b\"]\n" + kMinimal),
                 ":1:1: labels names \"pool\" twice; give each key one value"));
  CHECK(contains(load_error(dir, "labels = \"pool=prod\"\n" + kMinimal), ":1:1: labels must be an array of strings"));
}

}  // namespace kiln::agent

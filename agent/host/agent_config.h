// The agent's configuration, loaded from agent.toml. Every interval and limit the agent uses
// lives in AgentKnobs with a default and a valid range; docs/operations.md is the reference.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/enum_names.h"
#include "common/error.h"
#include "common/time.h"

namespace kiln::agent {

// One tunable with its default and accepted range, so the loader, check-config and the docs
// agree on the same numbers.
struct KnobSpec {
  const char* name;  // key in the [knobs] table
  std::int64_t default_value;
  std::int64_t min_value;
  std::int64_t max_value;
  const char* meaning;
};

// Every knob, in the order check-config prints them.
const std::vector<KnobSpec>& agent_knob_specs();

struct AgentKnobs {
  DurationMs heartbeat_interval_ms = 1000;
  std::int64_t liveness_missed_beats = 4;
  DurationMs reconnect_backoff_initial_ms = 500;
  DurationMs reconnect_backoff_max_ms = 30000;
  std::size_t job_output_limit_bytes = 1024 * 1024;
  DurationMs default_job_timeout_ms = kHourMs;
  DurationMs kill_grace_ms = 5000;
  DurationMs probe_interval_ms = kMinuteMs;
  DurationMs probe_timeout_ms = 30 * kSecondMs;
  std::int64_t max_concurrent_jobs = 8;
  // Job directory retention: finished jobs' directories older than the age go, then the oldest
  // while all of them take more than the bytes; never a running job's.
  DurationMs job_dir_max_age_ms = 7 * 24 * kHourMs;
  std::uint64_t job_dirs_max_bytes = 10ULL << 30;
  DurationMs job_dir_cleanup_interval_ms = 10 * kMinuteMs;
};

// How the agent keeps a job's processes from outliving it (docs/operations.md).
enum class JobContainment {
  automatic,      // "auto": a cgroup v2 directory when one is writable, else process groups
  cgroup,         // "cgroup": cgroup v2 or refuse to start
  process_group,  // "process-group": process groups only; a setsid() escapes them
};
constexpr EnumTable<JobContainment, 3> enum_names(JobContainment) {
  return {{
      {JobContainment::automatic, "auto"},
      {JobContainment::cgroup, "cgroup"},
      {JobContainment::process_group, "process-group"},
  }};
}

// Where a job's artifacts come from and are kept ([artifacts], docs/operations.md).
struct ArtifactSettings {
  std::string cache_dir;  // default <work_dir>/artifacts
  std::uint64_t cache_limit_bytes = 20ULL << 30;
  std::string http_store;  // http(s)://host[:port]/prefix, asked before the coordinator; empty: none
  DurationMs fetch_timeout_ms = 30 * kMinuteMs;  // all of one job's artifacts
};

struct AgentConfig {
  std::string config_path;  // absolute path of the file this was loaded from

  std::string node_id;
  std::string coordinator_endpoint;         // tcp://host:port
  // The other coordinators sharing its store, tried in turn when it stops answering or is a
  // standby ([coordinator] endpoint = [...]; docs/operations.md, "A standby coordinator").
  std::vector<std::string> standby_endpoints;
  std::string coordinator_public_key_file;  // the only key the agent accepts commands from
  std::string agent_secret_key_file;        // this agent's CURVE keypair file (mode 0600)
  std::string driver_library_path;          // chip backend loaded with dlopen
  std::string driver_options;               // passed to the backend as is
  std::string work_dir;
  std::string local_socket_path;            // for `kiln-agent diag` on the host
  std::string local_socket_group = "kiln";  // the only group that may open the local socket
  std::optional<std::string> hardware_revision_override;  // normally reported by the driver
  // The host name or address the ranks of a gang reach this node's workloads at; unset: the
  // loopback address when the coordinator is on loopback (one host), else the host name.
  std::optional<std::string> rendezvous_address;
  // key=value labels announced in hello: what an environment selects its nodes by
  // (environments/<env>.toml node_labels).
  std::vector<std::string> labels;
  JobContainment job_containment = JobContainment::automatic;
  std::string log_level = "info";  // of the agent's log on stderr
  // Replaces the agent's own cgroup v2 directory as the parent of kiln-jobs/; normally found
  // from /proc/self/mountinfo and /proc/self/cgroup.
  std::optional<std::string> cgroup_root;
  // Workload name -> absolute program path. The agent runs only these, by argv, never
  // through a shell.
  std::map<std::string, std::string> workloads;
  AgentKnobs knobs;
  ArtifactSettings artifacts;
  // [http] listen: HOST:PORT where /metrics is served (docs/metrics.md); empty: not served.
  std::string http_listen;

  // Dotted key ("knobs.kill_grace_ms") -> "file:line:column" where it was set. Keys absent
  // here took their default; check-config shows which.
  std::map<std::string, std::string> key_origins;
};

// agent.toml as far as it can be read, and every problem of the file in its order ("file:line:column:
// what is wrong"), for check-config, which then checks the files named by what was read.
struct AgentConfigReading {
  AgentConfig config;
  std::vector<std::string> problems;
};
AgentConfigReading read_agent_config(const std::string& path);
AgentConfigReading read_agent_config_text(std::string_view text, const std::string& path);

// Reads and validates agent.toml. Every problem found is reported (one per line) as
// "file:line:column: what is wrong", unknown keys included. Relative paths resolve against
// the directory of the config file.
// Every coordinator the agent may register with, in the order to try them.
std::vector<std::string> coordinator_endpoints(const AgentConfig& config);

Result<AgentConfig> load_agent_config(const std::string& path);
// The same from the file's text; `path` names the file in errors and is the base of relative paths.
Result<AgentConfig> agent_config_from_text(std::string_view text, const std::string& path);

// Checks what the file alone cannot tell: the key files, driver library and workload
// programs exist (the secret key not readable by group or others), the work dir is usable
// and the local socket's group exists; with KeyContents::read, also that the key files hold
// keys. Each problem is one line naming the config key. Paths left empty (the file did not
// give them) are not checked.
enum class KeyContents { unread, read };
Status check_agent_environment(const AgentConfig& config, KeyContents keys = KeyContents::unread);

// Reads the agent's keypair and the coordinator's public key as the agent does when it starts;
// a problem names the line of agent.toml that points at the file.
Status check_agent_keys(const AgentConfig& config);

// The address announced in hello: rendezvous_address, or its default (see AgentConfig).
std::string announced_rendezvous_address(const AgentConfig& config);

// The job_containment value as written in agent.toml.
inline std::string_view to_string(JobContainment value) { return enum_name(value); }

// A readable summary of what was loaded, for `kiln-agent check-config`.
std::string describe_agent_config(const AgentConfig& config);

}  // namespace kiln::agent

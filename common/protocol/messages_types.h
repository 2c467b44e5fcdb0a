// Protocol v1: the version, the bounds fields are held to, the enums and the nested records the
// messages share, and the two replies either peer sends (ok, error). docs/protocol.md is the
// normative description; common/protocol/messages.h gathers every message into one Body.
#pragma once

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/benchmark_settings.h"
#include "common/protocol/spec.h"

namespace kiln::protocol {

constexpr std::uint32_t kProtocolVersion = 1;
constexpr std::array<std::uint32_t, 1> kSupportedVersions = {1};

constexpr Str kIdentifier{1, 64};      // node ids, workload names, key names
constexpr Str kVersionString{0, 64};   // firmware, driver, agent versions
constexpr Str kRevision{1, 16};        // hardware revision ("a", "b")
constexpr Str kMessageText{0, 4096};   // human-readable explanations
constexpr Str kArgument{0, 4096};
constexpr Str kOutputTail{0, 65536};
constexpr Str kResultDocument{0, 262144};
constexpr Str kBundleId{0, 64};  // lowercase hex SHA-256, or empty
constexpr Str kSha256{64, 64};   // lowercase hex SHA-256
constexpr Str kArtifactName{1, 128};
constexpr Count kJobArtifacts{0, 32};
// A put_artifact or artifact_chunk carries at most this many bytes (and the message still fits
// the peers' max_message_bytes; see docs/protocol.md §2.3).
constexpr Bytes kArtifactChunk{16 << 20};
constexpr Range kU32{0, UINT32_MAX};
constexpr Range kU64{0, INT64_MAX};
constexpr Range kChipIndex{0, 63};
constexpr Range kTimeoutMs{1000, 7LL * 24 * 3600 * 1000};
constexpr Str kHostAddress{0, 255};  // a host name or IP address; empty: not given
// A node's label: KEY=VALUE (agent.toml labels; environments select nodes by them).
constexpr Str kLabel{3, 63};
constexpr std::uint32_t kMaxLabels = 32;
// KEY=VALUE, each 1 to 31 letters, digits, '.', '_' or '-'.
inline bool is_label(std::string_view label) {
  const auto eq = label.find('=');
  const auto plain = [](std::string_view part) {
    return !part.empty() && part.size() <= 31 && std::all_of(part.begin(), part.end(), [](char c) {
      return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-';
    });
  };
  return eq != std::string_view::npos && plain(label.substr(0, eq)) && plain(label.substr(eq + 1));
}
// A gang has at most one rank per node of a lease, and a lease at most 64 nodes.
constexpr std::int64_t kMaxGangSize = 64;

enum class Role { agent, ci, developer, ops, lab, admin };
constexpr EnumTable<Role, 6> enum_names(Role) {
  return {{
      {Role::agent, "agent"},
      {Role::ci, "ci"},
      {Role::developer, "developer"},
      {Role::ops, "ops"},
      {Role::lab, "lab"},
      {Role::admin, "admin"},
  }};
}

// Highest priority first.
enum class PriorityClass { release, presubmit, bisect, nightly, experiment };
constexpr EnumTable<PriorityClass, 5> enum_names(PriorityClass) {
  return {{
      {PriorityClass::release, "release"},
      {PriorityClass::presubmit, "presubmit"},
      {PriorityClass::bisect, "bisect"},
      {PriorityClass::nightly, "nightly"},
      {PriorityClass::experiment, "experiment"},
  }};
}

enum class JobState { queued, assigned, running, succeeded, failed, timed_out, cancelled, lost };
constexpr EnumTable<JobState, 8> enum_names(JobState) {
  return {{
      {JobState::queued, "queued"},
      {JobState::assigned, "assigned"},
      {JobState::running, "running"},
      {JobState::succeeded, "succeeded"},
      {JobState::failed, "failed"},
      {JobState::timed_out, "timed_out"},
      {JobState::cancelled, "cancelled"},
      {JobState::lost, "lost"},
  }};
}

constexpr bool is_terminal(JobState s) {
  return s != JobState::queued && s != JobState::assigned && s != JobState::running;
}

// How one attempt of a job ended, as the agent saw it.
enum class JobOutcome { succeeded, failed, timed_out, cancelled, failed_to_start };
constexpr EnumTable<JobOutcome, 5> enum_names(JobOutcome) {
  return {{
      {JobOutcome::succeeded, "succeeded"},
      {JobOutcome::failed, "failed"},
      {JobOutcome::timed_out, "timed_out"},
      {JobOutcome::cancelled, "cancelled"},
      {JobOutcome::failed_to_start, "failed_to_start"},
  }};
}

// draining: finishes what it runs, takes nothing new. quarantined: failed a health check;
// takes nothing new but diagnostics, and returns to up only by passing them.
enum class NodeState { up, draining, quarantined, lost };
constexpr EnumTable<NodeState, 4> enum_names(NodeState) {
  return {{
      {NodeState::up, "up"},
      {NodeState::draining, "draining"},
      {NodeState::quarantined, "quarantined"},
      {NodeState::lost, "lost"},
  }};
}

enum class HealthStatus { unknown, pass, warn, fail, skip };
constexpr EnumTable<HealthStatus, 5> enum_names(HealthStatus) {
  return {{
      {HealthStatus::unknown, "unknown"},
      {HealthStatus::pass, "pass"},
      {HealthStatus::warn, "warn"},
      {HealthStatus::fail, "fail"},
      {HealthStatus::skip, "skip"},
  }};
}

// Why a client quarantines a node, which decides what releases it (docs/health.md, "What
// releases a node"): wrong results (silent data corruption) only the level 3 compute self-test sees.
enum class QuarantineCause { other, wrong_results };
constexpr EnumTable<QuarantineCause, 2> enum_names(QuarantineCause) {
  return {{
      {QuarantineCause::other, "other"},
      {QuarantineCause::wrong_results, "wrong_results"},
  }};
}

// Workloads every agent provides itself; only some roles may run them (docs/protocol.md).
constexpr std::string_view kDiagWorkload = "kiln.diag";
constexpr std::string_view kInstallWorkload = "kiln.install";

constexpr bool is_maintenance_workload(std::string_view workload) {
  return workload == kDiagWorkload || workload == kInstallWorkload;
}

// ---- nested records ------------------------------------------------------------------

struct ChipInfo {
  std::uint32_t index = 0;
  std::string serial;
  std::string firmware_version;
  std::uint32_t numa_node = 0;
  bool healthy = true;

  template <class V>
  void visit(V& v) {
    v.field("index", index, kChipIndex);
    v.field("serial", serial, kIdentifier);
    v.field("firmware_version", firmware_version, kVersionString);
    v.field("numa_node", numa_node, Range{0, 1024});
    v.field("healthy", healthy);
  }
};

struct HostInfo {
  std::string hostname;
  std::uint32_t numa_nodes = 1;
  std::uint32_t cores = 1;
  std::uint32_t pci_devices = 0;

  template <class V>
  void visit(V& v) {
    v.field("hostname", hostname, Str{0, 255});
    v.field("numa_nodes", numa_nodes, Range{1, 1024});
    v.field("cores", cores, Range{1, 1 << 20});
    v.field("pci_devices", pci_devices, Range{0, 1 << 20});
  }
};

struct HealthCheck {
  std::string check;
  std::int32_t chip = -1;  // -1: the node as a whole
  HealthStatus status = HealthStatus::unknown;
  std::string reason_code;
  std::string category;
  std::string message;
  std::string recommended_action;

  template <class V>
  void visit(V& v) {
    v.field("check", check, kIdentifier);
    v.field("chip", chip, Range{-1, 63});
    v.field("status", status);
    v.field("reason_code", reason_code, Str{0, 64});
    v.field("category", category, Str{0, 32});
    v.field("message", message, kMessageText);
    v.field("recommended_action", recommended_action, kMessageText);
  }
};

// A file a job needs, named by its content: the agent fetches it by digest (docs/protocol.md §14),
// verifies it and puts it in the job's folder as artifacts/<name>; {artifact:<name>} in the
// job's args stands for that path.
struct ArtifactRef {
  std::string name;  // a file name: letters, digits, '.', '_', '-', not starting with '.'
  std::string sha256;
  std::uint64_t size_bytes = 0;

  template <class V>
  void visit(V& v) {
    v.field("name", name, kArtifactName);
    v.field("sha256", sha256, kSha256);
    v.field("size_bytes", size_bytes, kU64);
  }
};

// Warmup until steady, then timed repeats; repeats == 0 means the job is not a benchmark.
struct BenchmarkSpec {
  // Warmup defaults: kiln's one set (common/benchmark_settings.h).
  std::uint32_t repeats = 0;
  std::uint32_t warmup_min = static_cast<std::uint32_t>(kDefaultBenchmarkSettings.warmup_min);
  std::uint32_t warmup_max = static_cast<std::uint32_t>(kDefaultBenchmarkSettings.warmup_max);
  std::uint32_t steady_window = static_cast<std::uint32_t>(kDefaultBenchmarkSettings.steady_window);
  std::uint32_t steady_tolerance_ppm = kDefaultSteadyTolerancePpm;  // relative spread allowed in the window, in millionths

  template <class V>
  void visit(V& v) {
    v.field("repeats", repeats, Range{0, 10000});
    v.field("warmup_min", warmup_min, Range{0, 10000});
    v.field("warmup_max", warmup_max, Range{0, 10000});
    v.field("steady_window", steady_window, Range{1, 1000});
    v.field("steady_tolerance_ppm", steady_tolerance_ppm, Range{1, 1000000});
  }
};

// Where a rank of a gang finds the others (torch.distributed's environment): the agent passes
// it to the workload as RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT.
struct Rendezvous {
  std::uint32_t rank = 0;
  std::uint32_t world_size = 0;  // 0: the job is no gang's, and the rest is unset
  std::string master_address;    // rank 0's node's rendezvous_address
  std::uint32_t master_port = 0;

  template <class V>
  void visit(V& v) {
    v.field("rank", rank, Range{0, kMaxGangSize - 1});
    v.field("world_size", world_size, Range{0, kMaxGangSize});
    v.field("master_address", master_address, kHostAddress);
    v.field("master_port", master_port, Range{0, 65535});
  }
};

struct NodeSummary {
  std::string node_id;
  NodeState state = NodeState::up;
  HealthStatus health = HealthStatus::unknown;
  std::string health_detail;  // the failing or warning checks, for people
  std::string quarantine_reason;
  std::string quarantine_owner;
  std::string hardware_revision;
  std::uint32_t chips_total = 0;
  std::uint32_t chips_used = 0;
  std::uint64_t last_seen_ms_ago = 0;
  std::string agent_version;
  std::string driver_version;
  std::vector<ChipInfo> chips;
  HostInfo host;
  std::string rendezvous_address;  // from the node's hello: where the ranks of a gang reach it
  std::vector<std::string> labels;  // from the node's hello: key=value
  // Quarantined: the diagnostics level whose pass releases it, as its quarantine's cause needs;
  // 0 when it is not quarantined.
  std::uint32_t release_diag_level = 0;
  // Quarantined for wrong results alone: the job whose outputs were wrong, whose correct rerun
  // on the node (kiln recheck) also releases it; 0 otherwise.
  std::uint64_t wrong_results_job_id = 0;

  template <class V>
  void visit(V& v) {
    v.field("node_id", node_id, kIdentifier);
    v.field("state", state);
    v.field("health", health);
    v.field("health_detail", health_detail, kMessageText);
    v.field("quarantine_reason", quarantine_reason, kMessageText);
    v.field("quarantine_owner", quarantine_owner, Str{0, 64});
    v.field("hardware_revision", hardware_revision, kRevision);
    v.field("chips_total", chips_total, Range{0, 64});
    v.field("chips_used", chips_used, Range{0, 64});
    v.field("last_seen_ms_ago", last_seen_ms_ago, kU64);
    v.field("agent_version", agent_version, kVersionString);
    v.field("driver_version", driver_version, kVersionString);
    v.field("chips", chips, Count{0, 64});
    v.field("host", host);
    v.field("rendezvous_address", rendezvous_address, kHostAddress);
    v.field("labels", labels, Count{0, kMaxLabels}, kLabel);
    v.field("release_diag_level", release_diag_level, Optional{}, Range{0, 3});
    v.field("wrong_results_job_id", wrong_results_job_id, Optional{}, kU64);
  }
};

struct JobSummary {
  std::uint64_t job_id = 0;
  JobState state = JobState::queued;
  PriorityClass priority_class = PriorityClass::experiment;
  std::string workload;
  std::vector<std::string> args;
  std::uint32_t chips = 1;
  std::string hardware_revision;  // requested; empty = any
  std::string node_id;            // where it runs or ran; empty while queued
  std::vector<std::uint32_t> chip_indices;
  std::uint32_t attempt = 0;
  std::uint32_t max_attempts = 1;
  std::int32_t exit_code = 0;
  std::uint64_t duration_ms = 0;
  std::string submitted_by;
  std::string detail;  // why it ended as it did, for people
  std::string bundle_id;    // as submitted: with node, chips and seed, what reruns it
  std::string config_hash;
  // One rank of a gang (submit_gang): the gang's id is its rank 0's job id; 0 when the job is
  // no gang's.
  std::uint64_t gang_id = 0;
  std::uint32_t gang_rank = 0;
  std::uint32_t gang_size = 0;
  // Its node's quarantine reason when the node was quarantined at the attempt's dispatch or
  // before it ended: its result is no evidence about the stack (triage discards it). Empty
  // otherwise.
  std::string node_quarantined;
  // A recheck (recheck_node): this job reruns that job on its node, quarantined for that job's
  // wrong outputs; correct outputs release the node. 0 otherwise.
  std::uint64_t recheck_of_job_id = 0;

  template <class V>
  void visit(V& v) {
    v.field("job_id", job_id, kU64);
    v.field("state", state);
    v.field("priority_class", priority_class);
    v.field("workload", workload, kIdentifier);
    v.field("args", args, Count{0, 64}, kArgument);
    v.field("chips", chips, Range{1, 64});
    v.field("hardware_revision", hardware_revision, Str{0, 16});
    v.field("node_id", node_id, Str{0, 64});
    v.field("chip_indices", chip_indices, Count{0, 64}, kChipIndex);
    v.field("attempt", attempt, Range{0, 100});
    v.field("max_attempts", max_attempts, Range{1, 10});
    v.field("exit_code", exit_code, Range{INT32_MIN, INT32_MAX});
    v.field("duration_ms", duration_ms, kU64);
    v.field("submitted_by", submitted_by, Str{0, 64});
    v.field("detail", detail, kMessageText);
    v.field("bundle_id", bundle_id, kBundleId);
    v.field("config_hash", config_hash, kBundleId);
    v.field("gang_id", gang_id, kU64);
    v.field("gang_rank", gang_rank, Range{0, kMaxGangSize - 1});
    v.field("gang_size", gang_size, Range{0, kMaxGangSize});
    v.field("node_quarantined", node_quarantined, Optional{}, kMessageText);
    v.field("recheck_of_job_id", recheck_of_job_id, Optional{}, kU64);
  }
};

// ---- replies either side sends ----------------------------------------------------------

struct Ok {
  static constexpr std::string_view kType = "ok";
  std::string detail;

  template <class V>
  void visit(V& v) {
    v.field("detail", detail, kMessageText);
  }
};

// Either side, in reply to a message it could not accept.
struct ErrorReply {
  static constexpr std::string_view kType = "error";
  std::string code;  // one of kiln::Errc's names
  std::string message;
  std::vector<std::uint32_t> supported_versions;

  template <class V>
  void visit(V& v) {
    v.field("code", code, Str{1, 64});
    v.field("message", message, kMessageText);
    v.field("supported_versions", supported_versions, Count{0, 16}, Range{1, 1000});
  }
};

}  // namespace kiln::protocol

// Protocol v1: the messages of an agent's session with the coordinator (docs/protocol.md,
// "Agent session").
#pragma once

#include "common/protocol/messages_types.h"

namespace kiln::protocol {

// ---- agent session ---------------------------------------------------------------------

struct Hello {
  static constexpr std::string_view kType = "hello";
  std::string node_id;
  std::string hardware_revision;
  std::string agent_version;
  std::string driver_version;
  std::vector<std::uint32_t> protocol_versions;
  std::vector<ChipInfo> chips;
  HostInfo host;
  std::vector<std::uint64_t> running_jobs;
  // Jobs that ended while the agent had no session: their job_finished follows the welcome.
  std::vector<std::uint64_t> finished_jobs;
  // The workloads it runs besides the built-ins (kiln.diag, kiln.install): its [workloads].
  std::vector<std::string> workloads;
  // The host name or address other nodes reach this node's workloads at (a gang's rank 0 is
  // their rendezvous).
  std::string rendezvous_address;
  // key=value labels from its agent.toml: what an environment selects its nodes by.
  std::vector<std::string> labels;

  template <class V>
  void visit(V& v) {
    v.field("node_id", node_id, kIdentifier);
    v.field("hardware_revision", hardware_revision, kRevision);
    v.field("agent_version", agent_version, kVersionString);
    v.field("driver_version", driver_version, kVersionString);
    v.field("protocol_versions", protocol_versions, Count{1, 16}, Range{1, 1000});
    v.field("chips", chips, Count{0, 64});
    v.field("host", host);
    v.field("running_jobs", running_jobs, Count{0, 1024}, kU64);
    v.field("finished_jobs", finished_jobs, Count{0, 1024}, kU64);
    v.field("workloads", workloads, Count{0, 256}, kIdentifier);
    v.field("rendezvous_address", rendezvous_address, kHostAddress);
    v.field("labels", labels, Count{0, kMaxLabels}, kLabel);
  }
};

struct Welcome {
  static constexpr std::string_view kType = "welcome";
  std::uint32_t protocol_version = kProtocolVersion;
  std::uint32_t heartbeat_interval_ms = 1000;
  std::uint32_t liveness_missed_beats = 4;
  // Jobs the agent reported running that the coordinator no longer assigns to it: the
  // agent stops them.
  std::vector<std::uint64_t> cancel_jobs;

  template <class V>
  void visit(V& v) {
    v.field("protocol_version", protocol_version, Range{1, 1000});
    v.field("heartbeat_interval_ms", heartbeat_interval_ms, Range{50, 60000});
    v.field("liveness_missed_beats", liveness_missed_beats, Range{2, 100});
    v.field("cancel_jobs", cancel_jobs, Count{0, 1024}, kU64);
  }
};

struct Heartbeat {
  static constexpr std::string_view kType = "heartbeat";
  std::vector<std::uint64_t> running_jobs;

  template <class V>
  void visit(V& v) {
    v.field("running_jobs", running_jobs, Count{0, 1024}, kU64);
  }
};

struct JobStart {
  static constexpr std::string_view kType = "job_start";
  std::uint64_t job_id = 0;
  std::uint32_t attempt = 1;
  std::string workload;
  std::vector<std::string> args;
  std::vector<std::uint32_t> chip_indices;
  std::uint32_t timeout_ms = 60000;
  std::uint64_t seed = 0;
  BenchmarkSpec benchmark;
  Rendezvous rendezvous;  // world_size 0 for a job that is no gang's
  std::vector<ArtifactRef> artifacts;

  template <class V>
  void visit(V& v) {
    v.field("job_id", job_id, Range{1, INT64_MAX});
    v.field("attempt", attempt, Range{1, 100});
    v.field("workload", workload, kIdentifier);
    v.field("args", args, Count{0, 64}, kArgument);
    v.field("chip_indices", chip_indices, Count{1, 64}, kChipIndex);
    v.field("timeout_ms", timeout_ms, kTimeoutMs);
    v.field("seed", seed, kU64);
    v.field("benchmark", benchmark);
    v.field("rendezvous", rendezvous);
    v.field("artifacts", artifacts, kJobArtifacts);
  }
};

struct JobStarted {
  static constexpr std::string_view kType = "job_started";
  std::uint64_t job_id = 0;
  std::uint32_t attempt = 1;

  template <class V>
  void visit(V& v) {
    v.field("job_id", job_id, Range{1, INT64_MAX});
    v.field("attempt", attempt, Range{1, 100});
  }
};

struct JobFinished {
  static constexpr std::string_view kType = "job_finished";
  std::uint64_t job_id = 0;
  std::uint32_t attempt = 1;
  JobOutcome outcome = JobOutcome::succeeded;
  std::int32_t exit_code = 0;
  std::uint64_t duration_ms = 0;
  std::string output_tail;
  std::string result;  // the workload's result document (JSON text), may be empty
  std::string detail;

  template <class V>
  void visit(V& v) {
    v.field("job_id", job_id, Range{1, INT64_MAX});
    v.field("attempt", attempt, Range{1, 100});
    v.field("outcome", outcome);
    v.field("exit_code", exit_code, Range{INT32_MIN, INT32_MAX});
    v.field("duration_ms", duration_ms, kU64);
    v.field("output_tail", output_tail, kOutputTail);
    v.field("result", result, kResultDocument);
    v.field("detail", detail, kMessageText);
  }
};

// The coordinator has durably stored a job_finished; the agent may forget it.
struct JobFinishedAck {
  static constexpr std::string_view kType = "job_finished_ack";
  std::uint64_t job_id = 0;
  std::uint32_t attempt = 1;

  template <class V>
  void visit(V& v) {
    v.field("job_id", job_id, Range{1, INT64_MAX});
    v.field("attempt", attempt, Range{1, 100});
  }
};

struct JobCancel {
  static constexpr std::string_view kType = "job_cancel";
  std::uint64_t job_id = 0;
  std::string reason;

  template <class V>
  void visit(V& v) {
    v.field("job_id", job_id, Range{1, INT64_MAX});
    v.field("reason", reason, kMessageText);
  }
};

// Notice of preemption: the agent signals the workload (SIGUSR1) so it can checkpoint and exit
// within grace_ms; after that the coordinator cancels the job.
struct JobPreempt {
  static constexpr std::string_view kType = "job_preempt";
  std::uint64_t job_id = 0;
  std::uint32_t grace_ms = 300000;
  std::string reason;

  template <class V>
  void visit(V& v) {
    v.field("job_id", job_id, Range{1, INT64_MAX});
    v.field("grace_ms", grace_ms, Range{0, 24 * 3600 * 1000});
    v.field("reason", reason, kMessageText);
  }
};

// The agent's periodic health probes: a failing report quarantines the node.
struct HealthReport {
  static constexpr std::string_view kType = "health_report";
  HealthStatus verdict = HealthStatus::unknown;
  std::vector<HealthCheck> checks;
  // When the probes measured, on the agent's wall clock (ms since the epoch); 0: not known.
  // The coordinator ignores a failing report measured before the node last left quarantine.
  std::uint64_t measured_at_ms = 0;

  template <class V>
  void visit(V& v) {
    v.field("verdict", verdict);
    v.field("checks", checks, Count{0, 512});
    v.field("measured_at_ms", measured_at_ms, kU64);
  }
};

// A piece of a stored artifact, asked by an agent fetching a job's files. It needs no session
// (no hello): the agent's fetcher connects on its own with the agent's key.
struct GetArtifact {
  static constexpr std::string_view kType = "get_artifact";
  std::string sha256;
  std::uint64_t offset = 0;
  std::uint32_t max_bytes = 1 << 18;

  template <class V>
  void visit(V& v) {
    v.field("sha256", sha256, kSha256);
    v.field("offset", offset, kU64);
    v.field("max_bytes", max_bytes, Range{1, static_cast<std::int64_t>(kArtifactChunk.max_len)});
  }
};

// The bytes at `offset` (at most the asked max_bytes, fewer at the end or when the coordinator's
// message limit is smaller); size_bytes is the whole artifact's.
struct ArtifactChunk {
  static constexpr std::string_view kType = "artifact_chunk";
  std::string sha256;
  std::uint64_t size_bytes = 0;
  std::uint64_t offset = 0;
  std::string data;

  template <class V>
  void visit(V& v) {
    v.field("sha256", sha256, kSha256);
    v.field("size_bytes", size_bytes, kU64);
    v.field("offset", offset, kU64);
    v.field("data", data, kArtifactChunk);
  }
};

}  // namespace kiln::protocol

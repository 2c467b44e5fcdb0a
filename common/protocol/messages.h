// Protocol v1 messages. docs/protocol.md is the normative description; the field names,
// bounds and requiredness below are the same ones it lists. A message's body is a msgpack
// map keyed by these field names; `visit` is the single source of truth for both encoding
// and validation.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

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
constexpr Range kU32{0, UINT32_MAX};
constexpr Range kU64{0, INT64_MAX};
constexpr Range kChipIndex{0, 63};
constexpr Range kTimeoutMs{1000, 7LL * 24 * 3600 * 1000};

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

// Warmup until steady, then timed repeats; repeats == 0 means the job is not a benchmark.
struct BenchmarkSpec {
  std::uint32_t repeats = 0;
  std::uint32_t warmup_min = 3;
  std::uint32_t warmup_max = 50;
  std::uint32_t steady_window = 3;
  std::uint32_t steady_tolerance_ppm = 20000;  // relative spread allowed in the window, in millionths

  template <class V>
  void visit(V& v) {
    v.field("repeats", repeats, Range{0, 10000});
    v.field("warmup_min", warmup_min, Range{0, 10000});
    v.field("warmup_max", warmup_max, Range{0, 10000});
    v.field("steady_window", steady_window, Range{1, 1000});
    v.field("steady_tolerance_ppm", steady_tolerance_ppm, Range{1, 1000000});
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
  }
};

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

// ---- clients ---------------------------------------------------------------------------

struct Whoami {
  static constexpr std::string_view kType = "whoami";
  template <class V>
  void visit(V&) {}
};

struct WhoamiReply {
  static constexpr std::string_view kType = "whoami_reply";
  std::string key_name;
  Role role = Role::developer;
  std::uint32_t protocol_version = kProtocolVersion;
  std::string coordinator_version;

  template <class V>
  void visit(V& v) {
    v.field("key_name", key_name, kIdentifier);
    v.field("role", role);
    v.field("protocol_version", protocol_version, Range{1, 1000});
    v.field("coordinator_version", coordinator_version, kVersionString);
  }
};

struct SubmitJob {
  static constexpr std::string_view kType = "submit_job";
  std::string workload;
  std::vector<std::string> args;
  std::uint32_t chips = 1;
  std::string hardware_revision;  // empty = any
  std::string node_id;            // empty = any node
  std::uint32_t timeout_ms = 600000;
  PriorityClass priority_class = PriorityClass::experiment;
  std::uint32_t max_attempts = 2;
  std::uint64_t seed = 0;
  BenchmarkSpec benchmark;
  std::string bundle_id;    // the stack bundle it runs (its content hash); empty: none named
  std::string config_hash;  // SHA-256 of the job's canonical config, from the submitter

  template <class V>
  void visit(V& v) {
    v.field("workload", workload, kIdentifier);
    v.field("args", args, Count{0, 64}, kArgument);
    v.field("chips", chips, Range{1, 64});
    v.field("hardware_revision", hardware_revision, Str{0, 16});
    v.field("node_id", node_id, Str{0, 64});
    v.field("timeout_ms", timeout_ms, kTimeoutMs);
    v.field("priority_class", priority_class);
    v.field("max_attempts", max_attempts, Range{1, 10});
    v.field("seed", seed, kU64);
    v.field("benchmark", benchmark);
    v.field("bundle_id", bundle_id, kBundleId);
    v.field("config_hash", config_hash, kBundleId);
  }
};

struct JobAccepted {
  static constexpr std::string_view kType = "job_accepted";
  std::uint64_t job_id = 0;

  template <class V>
  void visit(V& v) {
    v.field("job_id", job_id, Range{1, INT64_MAX});
  }
};

struct ListNodes {
  static constexpr std::string_view kType = "list_nodes";
  template <class V>
  void visit(V&) {}
};

struct NodeList {
  static constexpr std::string_view kType = "node_list";
  std::vector<NodeSummary> nodes;

  template <class V>
  void visit(V& v) {
    v.field("nodes", nodes, Count{0, 4096});
  }
};

struct ListJobs {
  static constexpr std::string_view kType = "list_jobs";
  std::uint32_t limit = 50;
  bool active_only = false;

  template <class V>
  void visit(V& v) {
    v.field("limit", limit, Range{1, 1000});
    v.field("active_only", active_only);
  }
};

struct JobList {
  static constexpr std::string_view kType = "job_list";
  std::vector<JobSummary> jobs;

  template <class V>
  void visit(V& v) {
    v.field("jobs", jobs, Count{0, 1000});
  }
};

struct GetJob {
  static constexpr std::string_view kType = "get_job";
  std::uint64_t job_id = 0;

  template <class V>
  void visit(V& v) {
    v.field("job_id", job_id, Range{1, INT64_MAX});
  }
};

struct JobDetail {
  static constexpr std::string_view kType = "job_detail";
  JobSummary job;
  std::string output_tail;
  std::string result;

  template <class V>
  void visit(V& v) {
    v.field("job", job);
    v.field("output_tail", output_tail, kOutputTail);
    v.field("result", result, kResultDocument);
  }
};

struct CancelJob {
  static constexpr std::string_view kType = "cancel_job";
  std::uint64_t job_id = 0;

  template <class V>
  void visit(V& v) {
    v.field("job_id", job_id, Range{1, INT64_MAX});
  }
};

// Stop (drain = true) or resume (drain = false) dispatching new work to a node.
struct DrainNode {
  static constexpr std::string_view kType = "drain_node";
  std::string node_id;
  bool drain = true;
  std::string reason;

  template <class V>
  void visit(V& v) {
    v.field("node_id", node_id, kIdentifier);
    v.field("drain", drain);
    v.field("reason", reason, kMessageText);
  }
};

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

// ---- leases (docs/protocol.md, "Leases") ----------------------------------------------

// pending: queued in the scheduler. granted: holds its chips. preempting: under a preemption
// notice until grace_deadline_ms, then revoked and queued again keeping its age. ended: gone.
enum class LeaseState { pending, granted, preempting, ended };
constexpr EnumTable<LeaseState, 4> enum_names(LeaseState) {
  return {{
      {LeaseState::pending, "pending"},
      {LeaseState::granted, "granted"},
      {LeaseState::preempting, "preempting"},
      {LeaseState::ended, "ended"},
  }};
}

// status: nothing new before the watch's wait ran out (progress while pending).
enum class LeaseEventKind { status, granted, preempt_notice, requeued, ended };
constexpr EnumTable<LeaseEventKind, 5> enum_names(LeaseEventKind) {
  return {{
      {LeaseEventKind::status, "status"},
      {LeaseEventKind::granted, "granted"},
      {LeaseEventKind::preempt_notice, "preempt_notice"},
      {LeaseEventKind::requeued, "requeued"},
      {LeaseEventKind::ended, "ended"},
  }};
}

struct LeasePlacement {
  std::string node_id;
  std::vector<std::uint32_t> chip_indices;

  template <class V>
  void visit(V& v) {
    v.field("node_id", node_id, kIdentifier);
    v.field("chip_indices", chip_indices, Count{1, 64}, kChipIndex);
  }
};

// Times are the coordinator's wall clock in milliseconds since the Unix epoch; 0 = not (yet).
struct LeaseSummary {
  std::uint64_t lease_id = 0;
  LeaseState state = LeaseState::pending;
  PriorityClass priority_class = PriorityClass::experiment;
  std::string owner;  // the key that requested it
  std::uint32_t chips = 0;
  std::uint32_t nodes = 0;
  std::string hardware_revision;  // requested; empty = any
  std::uint64_t duration_ms = 0;
  std::vector<LeasePlacement> placement;
  std::uint64_t requested_at_ms = 0;
  std::uint64_t granted_at_ms = 0;
  std::uint64_t expires_at_ms = 0;
  std::uint64_t grace_deadline_ms = 0;
  std::vector<std::uint64_t> job_ids;  // jobs submitted into it that are queued or running
  std::string detail;                  // why it is pending, under notice or ended, for people
  std::uint64_t event_seq = 0;         // seq of its latest lease_event: watch from here

  template <class V>
  void visit(V& v) {
    v.field("lease_id", lease_id, Range{1, INT64_MAX});
    v.field("state", state);
    v.field("priority_class", priority_class);
    v.field("owner", owner, Str{0, 64});
    v.field("chips", chips, Range{0, 64});
    v.field("nodes", nodes, Range{0, 64});
    v.field("hardware_revision", hardware_revision, Str{0, 16});
    v.field("duration_ms", duration_ms, kU64);
    v.field("placement", placement, Count{0, 64});
    v.field("requested_at_ms", requested_at_ms, kU64);
    v.field("granted_at_ms", granted_at_ms, kU64);
    v.field("expires_at_ms", expires_at_ms, kU64);
    v.field("grace_deadline_ms", grace_deadline_ms, kU64);
    v.field("job_ids", job_ids, Count{0, 1024}, kU64);
    v.field("detail", detail, kMessageText);
    v.field("event_seq", event_seq, kU64);
  }
};

// Chips held for a developer without a workload: `chips` (1, 2, 4 or 8) on one node, or
// `nodes` whole nodes (then chips = 0). Developers may only ask for class experiment.
struct RequestLease {
  static constexpr std::string_view kType = "request_lease";
  std::uint32_t chips = 8;
  std::uint32_t nodes = 0;
  std::string hardware_revision;  // empty = any
  std::uint64_t duration_ms = 3600000;
  PriorityClass priority_class = PriorityClass::experiment;
  // A window booked ahead (a release qualification): not granted before this time, and the
  // nodes are held for it meanwhile (ms since the epoch; 0 = as soon as possible).
  std::uint64_t start_at_ms = 0;

  template <class V>
  void visit(V& v) {
    v.field("chips", chips, Range{0, 64});
    v.field("nodes", nodes, Range{0, 64});
    v.field("hardware_revision", hardware_revision, Str{0, 16});
    v.field("duration_ms", duration_ms, Range{60000, 7LL * 24 * 3600 * 1000});
    v.field("priority_class", priority_class);
    v.field("start_at_ms", start_at_ms, kU64);
  }
};

// Reply to request_lease when the chips were granted at once.
struct LeaseGranted {
  static constexpr std::string_view kType = "lease_granted";
  LeaseSummary lease;

  template <class V>
  void visit(V& v) {
    v.field("lease", lease);
  }
};

// Reply to request_lease when it has to wait: why, and when it is expected to start.
struct LeasePending {
  static constexpr std::string_view kType = "lease_pending";
  LeaseSummary lease;
  std::string explanation;
  std::uint64_t expected_start_ms = 0;  // 0: no eligible capacity in sight

  template <class V>
  void visit(V& v) {
    v.field("lease", lease);
    v.field("explanation", explanation, kMessageText);
    v.field("expected_start_ms", expected_start_ms, kU64);
  }
};

// Ends a lease (pending or granted) and cancels the jobs running in it. Replied to with ok.
struct ReleaseLease {
  static constexpr std::string_view kType = "release_lease";
  std::uint64_t lease_id = 0;

  template <class V>
  void visit(V& v) {
    v.field("lease_id", lease_id, Range{1, INT64_MAX});
  }
};

struct ListLeases {
  static constexpr std::string_view kType = "list_leases";
  bool include_ended = false;  // also the most recently ended ones

  template <class V>
  void visit(V& v) {
    v.field("include_ended", include_ended);
  }
};

struct LeaseList {
  static constexpr std::string_view kType = "lease_list";
  std::vector<LeaseSummary> leases;

  template <class V>
  void visit(V& v) {
    v.field("leases", leases, Count{0, 1000});
  }
};

// Long poll: answered with the first lease_event whose seq is above after_seq, or with a
// status event (seq unchanged) once wait_ms passes without one.
struct WatchLease {
  static constexpr std::string_view kType = "watch_lease";
  std::uint64_t lease_id = 0;
  std::uint64_t after_seq = 0;
  std::uint32_t wait_ms = 5000;

  template <class V>
  void visit(V& v) {
    v.field("lease_id", lease_id, Range{1, INT64_MAX});
    v.field("after_seq", after_seq, kU64);
    v.field("wait_ms", wait_ms, Range{0, 60000});
  }
};

struct LeaseEvent {
  static constexpr std::string_view kType = "lease_event";
  std::uint64_t seq = 0;  // events of one lease are numbered from 1
  LeaseEventKind kind = LeaseEventKind::status;
  std::string message;
  LeaseSummary lease;  // the lease as it is now

  template <class V>
  void visit(V& v) {
    v.field("seq", seq, kU64);
    v.field("kind", kind);
    v.field("message", message, kMessageText);
    v.field("lease", lease);
  }
};

// Runs a job inside a granted lease of the caller's, on chips of that lease.
struct SubmitInLease {
  static constexpr std::string_view kType = "submit_in_lease";
  std::uint64_t lease_id = 0;
  SubmitJob job;

  template <class V>
  void visit(V& v) {
    v.field("lease_id", lease_id, Range{1, INT64_MAX});
    v.field("job", job);
  }
};

// Why a job or a lease (exactly one of the two ids is non-zero) is pending.
struct QueueWhy {
  static constexpr std::string_view kType = "queue_why";
  std::uint64_t job_id = 0;
  std::uint64_t lease_id = 0;

  template <class V>
  void visit(V& v) {
    v.field("job_id", job_id, kU64);
    v.field("lease_id", lease_id, kU64);
  }
};

struct QueueExplanation {
  static constexpr std::string_view kType = "queue_explanation";
  bool pending = false;
  std::string state;  // the job's or lease's state name
  std::vector<std::string> reasons;
  std::uint64_t expected_start_ms = 0;  // 0: not pending, or no eligible capacity in sight
  std::string text;                     // the whole explanation in one sentence, for people

  template <class V>
  void visit(V& v) {
    v.field("pending", pending);
    v.field("state", state, Str{0, 32});
    v.field("reasons", reasons, Count{0, 64}, kMessageText);
    v.field("expected_start_ms", expected_start_ms, kU64);
    v.field("text", text, kMessageText);
  }
};

// The queue as the scheduler would start it (kiln queue): every queued job and pending lease,
// in priority order, each with why it waits and when it is expected to start.
struct ListQueue {
  static constexpr std::string_view kType = "list_queue";
  std::uint32_t limit = 200;

  template <class V>
  void visit(V& v) {
    v.field("limit", limit, Range{1, 1000});
  }
};

// One waiting job or lease (exactly one of the two ids is non-zero).
struct QueueEntry {
  std::uint64_t job_id = 0;
  std::uint64_t lease_id = 0;
  PriorityClass priority_class = PriorityClass::experiment;
  std::string owner;     // who submitted the job or requested the lease
  std::string workload;  // the job's workload; empty for a lease
  std::uint32_t chips = 0;  // chips on one node (0 when nodes > 0)
  std::uint32_t nodes = 0;  // whole nodes (0: chips on one node)
  std::string hardware_revision;  // empty: any
  std::string node_id;            // the node it is pinned to; empty: any
  std::uint64_t queued_at_ms = 0;  // when it joined the queue (its age)
  std::vector<std::string> reasons;
  std::uint64_t expected_start_ms = 0;  // 0: no eligible capacity in sight

  template <class V>
  void visit(V& v) {
    v.field("job_id", job_id, kU64);
    v.field("lease_id", lease_id, kU64);
    v.field("priority_class", priority_class);
    v.field("owner", owner, Str{0, 64});
    v.field("workload", workload, Str{0, 64});
    v.field("chips", chips, Range{0, 64});
    v.field("nodes", nodes, Range{0, 64});
    v.field("hardware_revision", hardware_revision, Str{0, 16});
    v.field("node_id", node_id, Str{0, 64});
    v.field("queued_at_ms", queued_at_ms, kU64);
    v.field("reasons", reasons, Count{0, 64}, kMessageText);
    v.field("expected_start_ms", expected_start_ms, kU64);
  }
};

// `more`: the queue is longer than the limit asked for.
struct QueueList {
  static constexpr std::string_view kType = "queue_list";
  std::vector<QueueEntry> entries;
  bool more = false;

  template <class V>
  void visit(V& v) {
    v.field("entries", entries, Count{0, 1000});
    v.field("more", more);
  }
};

// ---- qualification records ---------------------------------------------------------------

// What the coordinator keeps for qualification (docs/qualification.md): merged changes, built
// bundles (key = content hash), the accepted baseline bundle per hardware revision (key = the
// revision) and qualification run reports (key = run id). Changes and bundles are immutable.
// run_request: a run asked of the qualifier; run_claim: which qualifier drives it, until when.
enum class RecordKind { change, bundle, baseline, qualification_run, run_request, run_claim };
constexpr EnumTable<RecordKind, 6> enum_names(RecordKind) {
  return {{
      {RecordKind::change, "change"},
      {RecordKind::bundle, "bundle"},
      {RecordKind::baseline, "baseline"},
      {RecordKind::qualification_run, "qualification_run"},
      {RecordKind::run_request, "run_request"},
      {RecordKind::run_claim, "run_claim"},
  }};
}

constexpr Str kRecordKey{1, 128};
constexpr Str kRecordDocument{2, 786432};  // a JSON object; below the 1 MiB message limit

struct PutRecord {
  static constexpr std::string_view kType = "put_record";
  RecordKind kind = RecordKind::change;
  std::string key;
  std::string document;

  template <class V>
  void visit(V& v) {
    v.field("kind", kind);
    v.field("key", key, kRecordKey);
    v.field("document", document, kRecordDocument);
  }
};

struct GetRecord {
  static constexpr std::string_view kType = "get_record";
  RecordKind kind = RecordKind::change;
  std::string key;

  template <class V>
  void visit(V& v) {
    v.field("kind", kind);
    v.field("key", key, kRecordKey);
  }
};

// Records of one kind in the order they were first written, after `after_seq`.
struct ListRecords {
  static constexpr std::string_view kType = "list_records";
  RecordKind kind = RecordKind::change;
  std::uint32_t limit = 1000;
  std::uint64_t after_seq = 0;

  template <class V>
  void visit(V& v) {
    v.field("kind", kind);
    v.field("limit", limit, Range{1, 10000});
    v.field("after_seq", after_seq, kU64);
  }
};

struct RecordEntry {
  static constexpr std::string_view kType = "record_entry";
  RecordKind kind = RecordKind::change;
  std::string key;
  std::string document;
  std::uint64_t seq = 0;  // order of first write, from 1
  std::int64_t updated_at_ms = 0;
  std::string written_by;  // the key that wrote it last

  template <class V>
  void visit(V& v) {
    v.field("kind", kind);
    v.field("key", key, kRecordKey);
    v.field("document", document, kRecordDocument);
    v.field("seq", seq, kU64);
    v.field("updated_at_ms", updated_at_ms, Range{0, INT64_MAX});
    v.field("written_by", written_by, Str{0, 64});
  }
};

// `more`: the list stopped early (limit or size); ask again after the last seq.
struct RecordList {
  static constexpr std::string_view kType = "record_list";
  std::vector<RecordEntry> records;
  bool more = false;

  template <class V>
  void visit(V& v) {
    v.field("records", records, Count{0, 10000});
    v.field("more", more);
  }
};

// Takes a node out of service until it passes diagnostics (docs/protocol.md §9.7), as a failed
// health probe does: qualification's hardware triage sends it for a node that failed a test
// another node of its revision passed.
struct QuarantineNode {
  static constexpr std::string_view kType = "quarantine_node";
  std::string node_id;
  std::string reason;
  std::string owner;  // who must look: "lab"

  template <class V>
  void visit(V& v) {
    v.field("node_id", node_id, kIdentifier);
    v.field("reason", reason, Str{1, 4096});
    v.field("owner", owner, Str{1, 64});
  }
};

using Body = std::variant<Hello, Welcome, Heartbeat, JobStart, JobStarted, JobFinished,
                          JobFinishedAck, JobCancel, JobPreempt, HealthReport, Whoami, WhoamiReply, SubmitJob, JobAccepted,
                          ListNodes, NodeList, ListJobs, JobList, GetJob, JobDetail, CancelJob,
                          DrainNode, Ok, ErrorReply, RequestLease, LeaseGranted, LeasePending,
                          ReleaseLease, ListLeases, LeaseList, WatchLease, LeaseEvent, SubmitInLease,
                          QueueWhy, QueueExplanation, PutRecord, GetRecord, ListRecords, RecordEntry, RecordList,
                          QuarantineNode, ListQueue, QueueList>;

std::string_view type_name(const Body& body);

}  // namespace kiln::protocol

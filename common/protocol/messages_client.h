// Protocol v1: what clients (kiln, the qualifier) ask of the coordinator and its answers: jobs,
// nodes, leases and the queue (docs/protocol.md, "Clients" and "Leases").
#pragma once

#include "common/protocol/messages_types.h"

namespace kiln::protocol {

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
  std::vector<ArtifactRef> artifacts;  // files fetched by digest; the args name them {artifact:NAME}

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
    v.field("artifacts", artifacts, kJobArtifacts);
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
  // Optional: changes whenever a node's record does (registered, lost, health, quarantine,
  // drain); a watch_jobs with it is answered when it no longer holds. 0 from an older coordinator.
  std::uint64_t revision = 0;

  template <class V>
  void visit(V& v) {
    v.field("nodes", nodes, Count{0, 4096});
    v.field("revision", revision, Optional{}, kU64);
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
  // The submit_job as the coordinator accepted it (seed, timeout, benchmark settings and artifacts
  // included): what `kiln rerun` submits again.
  SubmitJob submission;

  template <class V>
  void visit(V& v) {
    v.field("job", job);
    v.field("output_tail", output_tail, kOutputTail);
    v.field("result", result, kResultDocument);
    v.field("submission", submission);
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

// One piece of an artifact's upload, at `offset` of its `size_bytes`; the coordinator checks the
// whole file's SHA-256 against `sha256` once the last byte arrived. An empty `data` at offset 0
// asks how much the coordinator already holds (artifact_progress), so an upload resumes.
struct PutArtifact {
  static constexpr std::string_view kType = "put_artifact";
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

// How much of the artifact the coordinator holds: the next put_artifact starts at
// received_bytes; complete once all of it arrived and its digest matched.
struct ArtifactProgress {
  static constexpr std::string_view kType = "artifact_progress";
  std::string sha256;
  std::uint64_t size_bytes = 0;
  std::uint64_t received_bytes = 0;
  bool complete = false;

  template <class V>
  void visit(V& v) {
    v.field("sha256", sha256, kSha256);
    v.field("size_bytes", size_bytes, kU64);
    v.field("received_bytes", received_bytes, kU64);
    v.field("complete", complete);
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

// ---- following jobs, leases and nodes (docs/protocol.md, "watch_jobs") -----------------

// A job as a watcher last saw it: its state and attempt.
struct WatchedJob {
  std::uint64_t job_id = 0;
  JobState state = JobState::queued;
  std::uint32_t attempt = 0;

  template <class V>
  void visit(V& v) {
    v.field("job_id", job_id, Range{1, INT64_MAX});
    v.field("state", state);
    v.field("attempt", attempt, Range{0, 1000});
  }
};

// A lease as a watcher last saw it: its state (pending for one not seen yet).
struct WatchedLease {
  std::uint64_t lease_id = 0;
  LeaseState state = LeaseState::pending;

  template <class V>
  void visit(V& v) {
    v.field("lease_id", lease_id, Range{1, INT64_MAX});
    v.field("state", state);
  }
};

// Long poll over jobs, leases and the node list (docs/protocol.md, "watch_jobs"): answered with
// job_events at once when wait_ms is 0 (every listed job and lease as it is now), when a listed
// job's state or attempt or a listed lease's state differs from the one given, or when
// nodes_revision is not 0 and the node list's revision differs from it; otherwise parked until
// one of them changes, or until wait_ms passes (answered with nothing changed). A watcher sends
// what it saw, so a watch asked again after a restart is whole at once.
struct WatchJobs {
  static constexpr std::string_view kType = "watch_jobs";
  std::vector<WatchedJob> jobs;
  std::uint32_t wait_ms = 0;
  std::vector<WatchedLease> leases;   // optional, default none
  std::uint64_t nodes_revision = 0;   // optional, default 0: the node list is not followed

  template <class V>
  void visit(V& v) {
    v.field("jobs", jobs, Count{0, 1000});
    v.field("wait_ms", wait_ms, Range{0, 600000});
    v.field("leases", leases, Optional{}, Count{0, 1000});
    v.field("nodes_revision", nodes_revision, Optional{}, kU64);
  }
};

struct JobEvents {
  static constexpr std::string_view kType = "job_events";
  std::vector<JobSummary> jobs;  // the listed jobs that changed, as they are now
  // Listed jobs this coordinator does not hold: ended and let go of (get_job reads them back
  // from the store), or never accepted (get_job says so).
  std::vector<std::uint64_t> unknown_job_ids;
  std::vector<LeaseSummary> leases;               // optional: the listed leases that changed, as they are now
  std::vector<std::uint64_t> unknown_lease_ids;   // optional: listed leases it does not hold (ended long ago)
  // Optional: the node list's revision as the reply was sent; 0 from a coordinator older than it
  // (which reads neither `leases` nor `nodes_revision` of a watch).
  std::uint64_t nodes_revision = 0;

  template <class V>
  void visit(V& v) {
    v.field("jobs", jobs, Count{0, 1000});
    v.field("unknown_job_ids", unknown_job_ids, Count{0, 1000}, Range{1, INT64_MAX});
    v.field("leases", leases, Optional{}, Count{0, 1000});
    v.field("unknown_lease_ids", unknown_lease_ids, Optional{}, Count{0, 1000}, Range{1, INT64_MAX});
    v.field("nodes_revision", nodes_revision, Optional{}, kU64);
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

// The ranks of one gang, run together in a lease of whole nodes, one rank per node: job i is
// rank i. Accepted or refused as a whole.
struct SubmitGang {
  static constexpr std::string_view kType = "submit_gang";
  std::uint64_t lease_id = 0;
  std::vector<SubmitJob> jobs;

  template <class V>
  void visit(V& v) {
    v.field("lease_id", lease_id, Range{1, INT64_MAX});
    v.field("jobs", jobs, Count{1, kMaxGangSize});
  }
};

// The gang's job ids, by rank; the first is the gang's id.
struct GangAccepted {
  static constexpr std::string_view kType = "gang_accepted";
  std::vector<std::uint64_t> job_ids;

  template <class V>
  void visit(V& v) {
    v.field("job_ids", job_ids, Count{1, kMaxGangSize}, Range{1, INT64_MAX});
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

// ---- environments (kiln envs) ---------------------------------------------------------

// Desired against actual for every environment of the environments repository the coordinator
// watches (docs/releases.md, "Convergence"). Read-only, for every role.
struct ListEnvironments {
  static constexpr std::string_view kType = "list_environments";
  template <class V>
  void visit(V&) {}
};

// One node of an environment: what it should run, what it runs, and where its convergence is.
struct NodeConvergence {
  std::string node_id;
  // in_sync, drifted (waits for its turn), converging (its install job is queued or runs),
  // failed (its install failed; the node is quarantined), unavailable (not registered, lost or
  // quarantined: nothing is installed on it), unknown (not registered yet)
  std::string state;
  std::string desired_firmware;
  std::string actual_firmware;  // the chips' firmware versions, "1.0.0" or "1.0.0 (6), 2.0.0 (2)"
  std::string desired_driver;   // empty: the bundle pins no driver
  std::string actual_driver;
  std::uint64_t install_job_id = 0;
  std::string detail;

  template <class V>
  void visit(V& v) {
    v.field("node_id", node_id, kIdentifier);
    v.field("state", state, Str{1, 32});
    v.field("desired_firmware", desired_firmware, kVersionString);
    v.field("actual_firmware", actual_firmware, kMessageText);
    v.field("desired_driver", desired_driver, kVersionString);
    v.field("actual_driver", actual_driver, kVersionString);
    v.field("install_job_id", install_job_id, kU64);
    v.field("detail", detail, kMessageText);
  }
};

struct EnvironmentConvergence {
  std::string name;
  std::string bundle_id;  // empty: nothing promoted yet
  // idle (nothing to do), canary (one node first), waves (the rest, wave_size at a time),
  // converged, halted (a node failed: nothing more is installed for this bundle), blocked (the
  // rollout cannot start: `detail` says why)
  std::string rollout;
  std::string detail;
  std::vector<NodeConvergence> nodes;

  template <class V>
  void visit(V& v) {
    v.field("name", name, kIdentifier);
    v.field("bundle_id", bundle_id, kBundleId);
    v.field("rollout", rollout, Str{1, 32});
    v.field("detail", detail, kMessageText);
    v.field("nodes", nodes, Count{0, 10000});
  }
};

struct EnvironmentList {
  static constexpr std::string_view kType = "environment_list";
  std::string repository;  // what the coordinator watches; empty: no [environments] configured
  std::string commit;      // the commit read last; empty: none read yet
  std::string problem;     // why the newest state could not be read (the last good one stays)
  std::vector<EnvironmentConvergence> environments;

  template <class V>
  void visit(V& v) {
    v.field("repository", repository, kMessageText);
    v.field("commit", commit, Str{0, 64});
    v.field("problem", problem, kMessageText);
    v.field("environments", environments, Count{0, 256});
  }
};

}  // namespace kiln::protocol

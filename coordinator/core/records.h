// What the coordinator keeps about nodes, jobs and developer leases, durably. The store saves these records
// as JSON documents built from their visit(), so the stored form uses protocol field names.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/protocol/messages.h"
#include "common/time.h"

namespace kiln::coordinator {

struct NodeRecord {
  protocol::NodeSummary summary;
  bool draining = false;
  std::string drain_reason;
  std::int64_t last_seen_ms = 0;
  // Flapping: quarantines since flap_window_start_ms (a window of knobs.flap_window_ms).
  std::uint32_t recent_quarantines = 0;
  std::int64_t flap_window_start_ms = 0;
  // When the diagnostics that last released the node from quarantine started, on the wall clock
  // health reports are stamped with (0: never released): a failing probe measured before it is
  // stale, also after a coordinator restart.
  std::int64_t released_from_quarantine_wall_ms = 0;

  template <class V>
  void visit(V& v) {
    v.field("summary", summary);
    v.field("draining", draining);
    v.field("drain_reason", drain_reason, protocol::kMessageText);
    v.field("last_seen_ms", last_seen_ms, protocol::Range{0, INT64_MAX});
    v.field("recent_quarantines", recent_quarantines, protocol::Range{0, 1000000});
    v.field("flap_window_start_ms", flap_window_start_ms, protocol::Range{0, INT64_MAX});
    v.field("released_from_quarantine_wall_ms", released_from_quarantine_wall_ms, protocol::Range{0, INT64_MAX});
  }
};

struct JobRecord {
  protocol::JobSummary summary;
  std::string requested_node_id;  // empty: any node that fits
  std::uint64_t rerun_of = 0;      // the job that failed on a node later quarantined
  std::uint64_t rerun_job_id = 0;  // this job's rerun on a healthy node, if any
  std::uint32_t timeout_ms = 0;
  std::uint64_t seed = 0;
  protocol::BenchmarkSpec benchmark;
  std::string output_tail;
  std::string result;
  std::int64_t submitted_at_ms = 0;
  std::int64_t started_at_ms = 0;   // when the current attempt was dispatched
  std::int64_t finished_at_ms = 0;
  bool cancel_requested = false;
  // Why it was asked to stop (by whom, or which rank of its gang ended it): its record says so
  // once it has stopped.
  std::string cancel_reason;
  // The developer lease it runs inside (kiln submit --lease); 0: it is its own scheduler request.
  std::uint64_t lease_id = 0;
  // Attempts that ended in preemption: they do not count against max_attempts.
  std::uint32_t preemptions = 0;
  std::vector<protocol::ArtifactRef> artifacts;  // fetched by digest by the agent that runs it
  // A recheck (JobSummary recheck_of_job_id): the chips of its node the job it reruns had, where
  // it runs again; empty otherwise.
  std::vector<std::uint32_t> recheck_chips;

  template <class V>
  void visit(V& v) {
    v.field("summary", summary);
    v.field("requested_node_id", requested_node_id, protocol::Str{0, 64});
    v.field("rerun_of", rerun_of, protocol::kU64);
    v.field("rerun_job_id", rerun_job_id, protocol::kU64);
    v.field("timeout_ms", timeout_ms, protocol::kTimeoutMs);
    v.field("seed", seed, protocol::kU64);
    v.field("benchmark", benchmark);
    v.field("output_tail", output_tail, protocol::kOutputTail);
    v.field("result", result, protocol::kResultDocument);
    v.field("submitted_at_ms", submitted_at_ms, protocol::Range{0, INT64_MAX});
    v.field("started_at_ms", started_at_ms, protocol::Range{0, INT64_MAX});
    v.field("finished_at_ms", finished_at_ms, protocol::Range{0, INT64_MAX});
    v.field("cancel_requested", cancel_requested);
    v.field("cancel_reason", cancel_reason, protocol::kMessageText);
    v.field("lease_id", lease_id, protocol::kU64);
    v.field("preemptions", preemptions, protocol::Range{0, 100});
    v.field("artifacts", artifacts, protocol::kJobArtifacts);
    v.field("recheck_chips", recheck_chips, protocol::Optional{}, protocol::Count{0, 64}, protocol::kChipIndex);
  }
};

// A developer lease (kiln lease): what the developer asked for and what it holds, enough to
// queue it again keeping its age or to hold its chips again after a coordinator restart.
struct LeaseRecord {
  protocol::LeaseSummary summary;
  // When it was requested, on the coordinator's clock: its age in the scheduler's queue.
  std::int64_t requested_at_ms = 0;
  // A window booked ahead: not granted before this time (0: as soon as possible).
  std::uint64_t start_at_ms = 0;

  template <class V>
  void visit(V& v) {
    v.field("summary", summary);
    v.field("requested_at_ms", requested_at_ms, protocol::Range{0, INT64_MAX});
    v.field("start_at_ms", start_at_ms, protocol::kU64);
  }
};

// Everything the store gives back at start-up.
struct Snapshot {
  std::vector<NodeRecord> nodes;
  std::vector<JobRecord> jobs;
  std::vector<protocol::RecordEntry> records;  // qualification records (record_book.h)
  std::vector<LeaseRecord> leases;
};

}  // namespace kiln::coordinator

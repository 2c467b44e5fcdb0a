// What a waiting command says while it waits (`smoke --wait`, `nightly --wait`, `result --wait`,
// `diag`, `rerun`, `lease`): what is pending and why (the scheduler's reasons, who holds the chips
// it waits for), how long so far, and what is expected. The texts are pure, from the coordinator's
// listings; ProgressLine shows them, as one updating line on a terminal and as plain lines
// elsewhere.
#pragma once

#include <cstdint>
#include <map>
#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "common/protocol/messages.h"
#include "common/text/progress_line.h"
#include "common/time.h"

namespace kiln::cli {

class Client;

// What the coordinator said about the fleet at one moment, as a waiting command reads it.
struct FleetSnapshot {
  std::map<std::uint64_t, protocol::JobSummary> jobs;     // by job id
  std::map<std::uint64_t, protocol::QueueEntry> queued_jobs;    // by job id
  std::map<std::uint64_t, protocol::QueueEntry> queued_leases;  // by lease id
  std::vector<protocol::LeaseSummary> leases;
  std::map<std::string, std::string> revision_of_node;
  TimeMs now_ms = 0;
};

// Who holds the chips of `revision` (empty: any) that a queued request waits for: running jobs
// and granted leases, most chips first, e.g. "lease L3 (experiment, dev, 16 chips, ends 14:05),
// job 12 (nightly, mlp-bf16 on n01)". Empty when nothing holds any.
std::string holders_text(const FleetSnapshot& fleet, const std::string& revision, const std::string& node_id);

// One job: "job 14 queued: <reasons>; held by ...; expected to start 14:05 (in 3m)", or
// "job 14 running on n01 (chips 0,1)", or "job 14 succeeded". No ages that tick: a status
// changes when the wait does (ProgressLine prints the time so far).
std::string job_status_text(const FleetSnapshot& fleet, std::uint64_t job_id);

// One lease that waits: "lease L5 (2 whole nodes of revision a) queued: <reasons>; held by ...;
// expected ...".
std::string lease_status_text(const FleetSnapshot& fleet, std::uint64_t lease_id);

// A running qualification run, from its report (docs/cli.md `run ID`): how many models have a
// verdict, and each job it waits for with job_status_text, the queued ones first.
std::vector<std::string> run_status_lines(const nlohmann::json& report, const FleetSnapshot& fleet);

// The fleet as the coordinator lists it now, for these texts; best effort (a listing that fails
// leaves its part empty).
FleetSnapshot read_fleet(Client& client, TimeMs now_ms);

}  // namespace kiln::cli

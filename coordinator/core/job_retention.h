// Which jobs the coordinator holds in memory. Every result stays in the store for good, but a
// coordinator that held every job it ever ran would grow without bound and read all of them
// at each start (a standby taking over included): it holds the active jobs, the newest ended
// ones ([knobs] ended_jobs_in_memory), and the ended ones it still decides by: the newest install
// a rollout asked of each node, and the failed CI jobs it would rerun should their node be
// quarantined within [knobs] quarantine_rerun_window_ms. An older job a client names is read
// back from the store (action::RecallJob). The stores select the same jobs at start in SQL
// (Store::load_live).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "common/time.h"
#include "coordinator/core/records.h"

namespace kiln::coordinator {

// Install jobs of a rollout are submitted under this key name, so any job says whether a
// rollout asked for it.
inline constexpr std::string_view kRolloutSubmitter = "rollout";

// The node a rollout asked this install of, or "" for any other job.
std::string rollout_install_node(const JobRecord& job);

// Whether an ended job is one a quarantine of its node reruns on a healthy node (a CI job that
// failed or timed out, not itself a rerun, not rerun yet, in no lease, on any node), within the
// window from its end.
bool may_be_rerun(const JobRecord& job);

// What a coordinator starting up takes of every stored job: the active ones, the newest
// `ended_jobs_in_memory` ended ones (by id), the newest rollout install of each node, and the
// jobs that may be rerun that ended at or after `reruns_since_ms`; in id order. The stores do the
// same in SQL; the simulation and the tests' harness use this.
std::vector<JobRecord> jobs_held_at_start(std::vector<JobRecord> stored, std::size_t ended_jobs_in_memory,
                                          TimeMs reruns_since_ms);

}  // namespace kiln::coordinator

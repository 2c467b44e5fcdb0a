// A model run on several whole nodes: a lease of those nodes (all or nothing), then a gang in it,
// a rank per node, whose results count as one. The run driver runs gangs this way, and a rerun of
// a multi-node measurement runs the same ranks again the same way.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/protocol/messages.h"
#include "qualification/run_types.h"

namespace kiln::qualification::shell {

// What node `rank` of a gang runs: its own seed, and a config hash of its own.
protocol::SubmitJob rank_job(const protocol::SubmitJob& job, int rank);

// The lease a gang of `nodes` ranks of `job` waits for: whole nodes of `revision`, long enough
// for the job's timeout and a margin to submit and collect.
protocol::RequestLease gang_lease(const protocol::SubmitJob& job, int nodes, const std::string& revision);

// The lease a request_lease reply names (granted or pending); 0 when there is none.
std::uint64_t lease_id_of(const protocol::Body& reply);

// The ranks' results as one: it ran and is correct when every node's did and was; a sample is
// the nodes' throughputs of the same iteration added up.
JobResult combine_ranks(std::uint64_t tag, std::vector<JobResult> ranks);

}  // namespace kiln::qualification::shell

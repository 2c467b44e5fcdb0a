// Ids on the command line: jobs are `42` or `J42`, leases `L3` (or `3` where only a lease fits);
// and the priority class of --class.
#pragma once

#include <cstdint>
#include <string>

#include "common/error.h"
#include "common/protocol/messages.h"

namespace kiln::cli {

Result<std::uint64_t> parse_job_id(const std::string& text);
Result<std::uint64_t> parse_lease_id(const std::string& text);

// A job or a lease, told apart by the L prefix (`kiln queue 42`, `kiln queue L3`).
struct JobOrLease {
  std::uint64_t job_id = 0;
  std::uint64_t lease_id = 0;
};
Result<JobOrLease> parse_job_or_lease_id(const std::string& text);

// release, presubmit, bisect, nightly or experiment.
Result<protocol::PriorityClass> parse_priority_class(const std::string& name);

}  // namespace kiln::cli

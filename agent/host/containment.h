// Which containment the agent's children get: a cgroup v2 directory of the agent's own, or
// process groups only (docs/operations.md, "Job containment").
#pragma once

#include <string>

#include "agent/host/agent_config.h"
#include "common/error.h"

namespace kiln::agent {

struct ContainmentChoice {
  bool cgroup = false;
  // With cgroup: the directory the agent owns alone; each child's cgroup is made in it.
  // <own cgroup or cgroup_root>/kiln-jobs/<node_id>-<hash of work_dir>, so two agents on one
  // host (or two test fleets) never kill each other's children.
  std::string cgroup_dir;
  std::string why_not_cgroup;  // with process groups under "auto": what kept cgroups out
};

// Decides and prepares (creates the directory) from job_containment: "cgroup" errors when
// cgroup v2 cannot be used, "auto" falls back to process groups and says why.
Result<ContainmentChoice> choose_containment(const AgentConfig& config);

// What choose_containment would choose, for check-config: a directory it had to make for
// that is removed again.
Result<ContainmentChoice> check_containment(const AgentConfig& config);

// One line for logs and check-config.
std::string describe_containment(const ContainmentChoice& choice);

}  // namespace kiln::agent

// kiln-agent's imperative shell: the DEALER socket to the coordinator (CURVE, pinned to the
// coordinator's key), the chip driver, the process runner and the clock, around the pure
// AgentCore.
#pragma once

#include <atomic>
#include <memory>

#include "agent/core/agent_core.h"
#include "agent/host/agent_config.h"
#include "common/error.h"

namespace kiln::drivers {
class Driver;
}

namespace kiln::agent {

// What this node reports at registration: chips and firmware from the driver, the host
// from hwloc, the revision from the driver unless the config overrides it.
Result<AgentIdentity> discover_identity(const AgentConfig& config, drivers::Driver& driver);

class AgentShell {
 public:
  static Result<std::unique_ptr<AgentShell>> create(AgentConfig config);
  virtual ~AgentShell() = default;

  // Serves until `stop` becomes true; running jobs are stopped when the shell is destroyed.
  virtual Status run(const std::atomic<bool>& stop) = 0;
};

}  // namespace kiln::agent

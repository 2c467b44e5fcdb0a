// kiln-agent's imperative shell: the DEALER socket to the coordinator (CURVE, pinned to the
// coordinator's key), the chip driver, the process runner and the clock, around the pure
// AgentCore.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>

#include "agent/core/agent_core.h"
#include "agent/host/agent_config.h"
#include "common/error.h"

namespace kiln::agent {

// The serial reported for a chip that could not be read.
inline constexpr std::string_view kUnknownSerial = "unknown";

struct DiscoveredIdentity {
  AgentIdentity identity;
  // Chips reported unhealthy because they could not be read, and why.
  std::map<std::uint32_t, std::string> unhealthy_chips;
};

// What this node reports at registration: chips and firmware from the driver, the host
// from hwloc, the revision from the driver unless the config overrides it. Every driver call
// runs in a kiln-agent-check process under knobs.probe_timeout_ms: a chip that does not
// answer is reported unhealthy (serial "unknown") and the others serve. Errors when the
// driver itself cannot be read or no chip gives a revision.
Result<DiscoveredIdentity> discover_identity(const AgentConfig& config);

class AgentShell {
 public:
  static Result<std::unique_ptr<AgentShell>> create(AgentConfig config);
  virtual ~AgentShell() = default;

  // Serves until `stop` becomes true; running jobs are stopped when the shell is destroyed.
  virtual Status run(const std::atomic<bool>& stop) = 0;
};

}  // namespace kiln::agent

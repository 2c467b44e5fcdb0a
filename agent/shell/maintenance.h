// The agent's maintenance commands: probes, diagnostics and installs. Each runs in a child
// process of the agent (a wedged chip can only hang that child, which the agent's deadline
// kills), as `kiln-agent probe|diag|install`, the same commands ops and lab engineers type.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <set>
#include <string>
#include <vector>

#include "common/health/check_result.h"
#include "agent/host/agent_config.h"
#include "common/protocol/messages.h"

namespace kiln::agent {

protocol::HealthReport to_health_report(const std::vector<kiln::health::CheckResult>& results);

// `kiln-agent probe`: the cheap telemetry probes, on every chip but `unprobed_chips`. Prints
// the report (text, or the protocol's health_report as JSON); exit 0 pass or warn, 1 fail, 2
// could not run.
int run_probe_command(const AgentConfig& config, const std::set<std::uint32_t>& unprobed_chips, bool json,
                      std::ostream& out, std::ostream& err);

// Writes a built-in job's result document where the agent asked for it (KILN_RESULT_FILE).
bool write_result_file(const std::string& path, const std::string& document, std::ostream& err);

}  // namespace kiln::agent

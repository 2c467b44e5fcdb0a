// `kiln-agent status`: what the running agent is doing right now, asked on its local socket.
// The agent answers with the JSON document of AgentStatus; the command prints it as is
// (--json) or as text. docs/operations.md lists the fields.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/time.h"

namespace kiln::agent {

struct StatusJob {
  std::uint64_t job_id = 0;
  std::uint32_t attempt = 0;
  std::string workload;
  std::vector<std::uint32_t> chips;
  DurationMs elapsed_ms = 0;
};

struct StatusChip {
  std::uint32_t index = 0;
  bool healthy = true;
  // job, diagnostics (a kiln.diag job or a local request), install (a kiln.install job),
  // probe (being read by the health probe, which holds no chip) or idle.
  std::string owner = "idle";
  std::string held_by;  // what holds it, e.g. "job 42 attempt 1 (smoke)"; empty when idle
};

struct StatusProbe {
  bool running = false;
  std::optional<DurationMs> last_started_ms_ago;
  std::string last_verdict;  // pass, warn or fail; empty before the first one ended
};

struct AgentStatus {
  std::string node_id;
  std::string coordinator_endpoint;
  std::string session;  // disconnected, registering or registered
  std::optional<DurationMs> coordinator_last_heard_ms_ago;
  std::vector<StatusChip> chips;
  std::vector<StatusJob> jobs;      // the coordinator's jobs, kiln.diag among them
  std::vector<StatusJob> installs;  // kiln.install jobs
  bool local_diagnostics = false;   // diagnostics asked on the local socket run now
  StatusProbe probe;
};

// The JSON document the agent sends, and the text `kiln-agent status` prints from it.
std::string status_to_json(const AgentStatus& status);
// An error when `document` is not one the agent sends.
std::optional<std::string> status_text(const std::string& document);

}  // namespace kiln::agent

// Every interval and limit of the coordinator's core, with units in the names. Loaded from
// the [knobs] table of coordinator.toml; simulations push them to extremes.
#pragma once

#include <cstddef>
#include <cstdint>

namespace kiln::coordinator {

struct CoordinatorKnobs {
  std::uint32_t heartbeat_interval_ms = 1000;
  // Paranoid Pirate: a node silent this many heartbeat intervals is lost.
  std::uint32_t liveness_missed_beats = 4;
  std::size_t max_queued_jobs = 10000;
  std::size_t max_jobs_listed = 1000;
  // An attempt still running this long after its own timeout (which the agent enforces) is
  // failed by the coordinator: the agent is alive but has lost track of it.
  std::uint32_t job_timeout_slack_ms = 30000;
  // A quarantined node returns to service only after diagnostics of at least this level pass.
  std::uint32_t quarantine_release_min_diag_level = 2;

  std::int64_t liveness_timeout_ms() const {
    return static_cast<std::int64_t>(heartbeat_interval_ms) * liveness_missed_beats;
  }
};

}  // namespace kiln::coordinator

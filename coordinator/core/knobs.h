// Every interval and limit of the coordinator's core, with units in the names. Loaded from
// the [knobs] and [scheduler] tables of coordinator.toml; simulations push them to extremes.
#pragma once

#include <cstddef>
#include <cstdint>

#include "coordinator/scheduler/knobs.h"

namespace kiln::coordinator {

struct CoordinatorKnobs {
  std::uint32_t heartbeat_interval_ms = 1000;
  // Paranoid Pirate: a node silent this many heartbeat intervals is lost.
  std::uint32_t liveness_missed_beats = 4;
  // After a coordinator start, nodes recovered from the store have this long to register
  // before they are lost and their jobs failed over: their agents may be in reconnect backoff
  // (the agent's reconnect_backoff_max_ms, 30 s by default, after its liveness timeout).
  std::int64_t restart_grace_ms = 40000;
  std::size_t max_queued_jobs = 10000;
  std::size_t max_jobs_listed = 1000;
  // Ended jobs held in memory besides the active ones (job_retention.h): the newest, so that
  // `kiln jobs` lists from memory; an older one a client names is read back from the store.
  // The coordinator's memory and the time it takes to start (or a standby to take over) grow
  // with it, not with the store's history.
  std::size_t ended_jobs_in_memory = 2000;
  // An attempt still running this long after its own timeout (which the agent enforces) is
  // failed by the coordinator: the agent is alive but has lost track of it.
  std::uint32_t job_timeout_slack_ms = 30000;
  // A quarantined node returns to service only after diagnostics of at least this level pass.
  std::uint32_t quarantine_release_min_diag_level = 2;
  // A node quarantined again within this window of its first quarantine is flapping: it
  // returns only after level 3 diagnostics.
  std::int64_t flap_window_ms = 24LL * 3600 * 1000;
  // CI jobs that failed on a node up to this long before it was quarantined are rerun on a
  // healthy node of the same revision: the failure may have been the node's.
  std::int64_t quarantine_rerun_window_ms = 3600 * 1000;
  // Developer leases: at most this many pending or granted at once, and this many ended ones
  // kept for `kiln leases` and late watchers.
  std::size_t max_active_leases = 1000;
  std::size_t max_ended_leases_kept = 200;
  // Open `kiln lease` watches (long polls) at once; more are answered at once.
  std::size_t max_lease_watches = 1000;
  // Parked `watch_jobs` long polls at once, and of one client connection; more are refused.
  std::size_t max_job_watches = 4096;
  std::size_t max_job_watches_per_client = 64;
  // A gang's rank 0 listens for its peers on rendezvous_port_first + (gang id modulo
  // rendezvous_port_count) of its node: every rank computes the same port, and two gangs on one
  // node (one ending, the next starting) get different ones.
  std::uint32_t rendezvous_port_first = 29500;
  std::uint32_t rendezvous_port_count = 1000;
  // A rollout installs on one node first, then on this many at a time ([environments] wave_size).
  std::uint32_t rollout_wave_size = 4;
  // The [scheduler] table: classes, quotas, preemption grace, reservations.
  scheduler::SchedulerKnobs scheduler;

  std::int64_t liveness_timeout_ms() const {
    return static_cast<std::int64_t>(heartbeat_interval_ms) * liveness_missed_beats;
  }
};

}  // namespace kiln::coordinator

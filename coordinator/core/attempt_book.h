// One state machine per job for the coordinator's side of its attempts (as TigerBeetle keeps one
// status per object): the phase of the current attempt with the data that phase needs, and an
// earlier attempt that may still be stopping on a node. Phases change only through
// AttemptBook::to, which asserts the transition is one the job state machine has.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "common/enum_names.h"
#include "common/time.h"
#include "coordinator/scheduler/types.h"

namespace kiln::coordinator {

enum class AttemptPhase {
  waiting,         // queued: for the scheduler, or for chips of its developer lease
  start_deferred,  // chips given; job_start waits until an earlier attempt there has stopped
  dispatched,      // job_start sent: assigned, then running
  under_notice,    // dispatched and told to checkpoint and exit before its grace deadline
  revoked,         // the grace ended and the scheduler revoked it; it is queued again next
};
constexpr EnumTable<AttemptPhase, 5> enum_names(AttemptPhase) {
  return {{
      {AttemptPhase::waiting, "waiting"},
      {AttemptPhase::start_deferred, "start_deferred"},
      {AttemptPhase::dispatched, "dispatched"},
      {AttemptPhase::under_notice, "under_notice"},
      {AttemptPhase::revoked, "revoked"},
  }};
}

inline std::string_view to_string(AttemptPhase value) { return enum_name(value); }

// An attempt told to stop (revoked, failed over, or left behind by a restarted agent) that may
// still run on its node: the next attempt starts there only once it is gone.
struct StoppingAttempt {
  std::string node_id;
  std::uint32_t attempt = 0;
  TimeMs since_ms = 0;
};

struct JobAttempt {
  AttemptPhase phase = AttemptPhase::waiting;
  // The chips it holds as a scheduler lease of its own (not those of its developer lease).
  std::optional<scheduler::LeaseId> own_lease;
  TimeMs grace_deadline_ms = 0;  // under_notice: when the core revokes it
  std::optional<StoppingAttempt> earlier_stopping;
};

class AttemptBook {
 public:
  // The record of a job; a job without one is waiting, with nothing held and nothing stopping.
  JobAttempt& of(std::uint64_t job_id) { return attempts_[job_id]; }
  AttemptPhase phase(std::uint64_t job_id) const;
  bool in(std::uint64_t job_id, AttemptPhase phase) const { return this->phase(job_id) == phase; }
  std::optional<scheduler::LeaseId> own_lease(std::uint64_t job_id) const;
  const std::optional<StoppingAttempt>& earlier_stopping(std::uint64_t job_id) const;
  // The one place a phase changes. Going back to waiting drops the chips the attempt held (the
  // caller has ended or handed on its lease); leaving under_notice drops the grace deadline.
  void to(std::uint64_t job_id, AttemptPhase next);
  // The job no longer waits for an earlier attempt to stop.
  void earlier_stopped(std::uint64_t job_id);
  // The job's request is gone from the scheduler (it ended, or an attempt was lost): nothing of
  // its attempts is kept.
  void forget(std::uint64_t job_id) { attempts_.erase(job_id); }
  // The job whose own lease this is, if any.
  std::optional<std::uint64_t> holder_of(scheduler::LeaseId lease) const;
  const std::map<std::uint64_t, JobAttempt>& all() const { return attempts_; }

 private:
  void prune(std::uint64_t job_id);

  std::map<std::uint64_t, JobAttempt> attempts_;
};

bool attempt_transition_allowed(AttemptPhase from, AttemptPhase to);

}  // namespace kiln::coordinator

#include "coordinator/core/attempt_book.h"

#include <fmt/format.h>

#include "common/error.h"

namespace kiln::coordinator {

bool attempt_transition_allowed(AttemptPhase from, AttemptPhase to) {
  using P = AttemptPhase;
  switch (from) {
    case P::waiting: return to == P::start_deferred || to == P::dispatched;
    // A start deferred under a preemption notice gives its chips back at once (nothing ran).
    case P::start_deferred: return to == P::dispatched || to == P::waiting;
    case P::dispatched: return to == P::under_notice || to == P::revoked || to == P::waiting;
    // A second notice (the same demand after a restart) keeps the phase; a notice the core could
    // not act on at its deadline is left to the scheduler's own revocation.
    case P::under_notice:
      return to == P::under_notice || to == P::revoked || to == P::waiting || to == P::dispatched;
    case P::revoked: return to == P::waiting;
  }
  return false;
}

AttemptPhase AttemptBook::phase(std::uint64_t job_id) const {
  auto it = attempts_.find(job_id);
  return it == attempts_.end() ? AttemptPhase::waiting : it->second.phase;
}

std::optional<scheduler::LeaseId> AttemptBook::own_lease(std::uint64_t job_id) const {
  auto it = attempts_.find(job_id);
  return it == attempts_.end() ? std::nullopt : it->second.own_lease;
}

const std::optional<StoppingAttempt>& AttemptBook::earlier_stopping(std::uint64_t job_id) const {
  static const std::optional<StoppingAttempt> kNone;
  auto it = attempts_.find(job_id);
  return it == attempts_.end() ? kNone : it->second.earlier_stopping;
}

void AttemptBook::to(std::uint64_t job_id, AttemptPhase next) {
  JobAttempt& attempt = attempts_[job_id];
  KILN_ASSERT(attempt_transition_allowed(attempt.phase, next),
              fmt::format("job {}: no transition from {} to {}", job_id, to_string(attempt.phase), to_string(next))
                  .c_str());
  if (next != AttemptPhase::under_notice) attempt.grace_deadline_ms = 0;
  if (next == AttemptPhase::waiting) attempt.own_lease.reset();
  attempt.phase = next;
  prune(job_id);
}

void AttemptBook::earlier_stopped(std::uint64_t job_id) {
  auto it = attempts_.find(job_id);
  if (it == attempts_.end()) return;
  it->second.earlier_stopping.reset();
  prune(job_id);
}

std::optional<std::uint64_t> AttemptBook::holder_of(scheduler::LeaseId lease) const {
  for (const auto& [id, attempt] : attempts_) {
    if (attempt.own_lease == lease) return id;
  }
  return std::nullopt;
}

void AttemptBook::prune(std::uint64_t job_id) {
  auto it = attempts_.find(job_id);
  if (it != attempts_.end() && it->second.phase == AttemptPhase::waiting && !it->second.own_lease &&
      !it->second.earlier_stopping) {
    attempts_.erase(it);
  }
}

}  // namespace kiln::coordinator

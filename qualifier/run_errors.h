// What the qualifier does with a run it cannot carry out: which errors leave the run to be driven
// again later (and when), and which end it with the error verdict; and the runs someone cancelled
// (kiln run cancel), which it ends the same way. A run is never retried in a hot loop, and a
// client waiting for a run that cannot be carried out gets its answer.
#pragma once

#include <chrono>
#include <map>
#include <mutex>
#include <string>

#include "common/error.h"
#include "common/time.h"

namespace kiln::qualifier {

// The coordinator did not answer or is busy, or the claim was lost, or the qualifier is stopping:
// the run is driven again (by this qualifier or another), its jobs taken up. Any other error is
// the run's own (its request cannot be carried out, or it broke): it ends with the error verdict.
bool driven_again_after(const Error& error);

// The cancels recorded, read by the main loop and asked by the runs' threads.
class RunCancels {
 public:
  void add(const std::string& run_id, const std::string& cancelled_by);
  // Who cancelled the run, or empty.
  std::string by(const std::string& run_id) const;

 private:
  mutable std::mutex mutex_;
  std::map<std::string, std::string> cancelled_by_;
};

// When a run whose driving stopped on an error may be taken up again: after the poll interval,
// then twice as long after each failure in a row, up to kMaxRetryMs.
class RetryBackoff {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr DurationMs kMaxRetryMs = 60000;

  explicit RetryBackoff(DurationMs first_ms) : first_ms_(first_ms) {}
  void failed(const std::string& run_id, Clock::time_point now);
  void forget(const std::string& run_id) { waits_.erase(run_id); }
  bool may_try(const std::string& run_id, Clock::time_point now) const;

 private:
  struct Wait {
    DurationMs wait_ms = 0;
    Clock::time_point next;
  };
  DurationMs first_ms_;
  std::map<std::string, Wait> waits_;
};

}  // namespace kiln::qualifier

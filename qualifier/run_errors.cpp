#include "qualifier/run_errors.h"

#include <algorithm>

namespace kiln::qualifier {

bool driven_again_after(const Error& error) {
  switch (error.code) {
    case Errc::timeout:
    case Errc::io:
    case Errc::unavailable:
    case Errc::standby:
    case Errc::conflict: return true;
    default: return false;
  }
}

void RunCancels::add(const std::string& run_id, const std::string& cancelled_by) {
  std::lock_guard lock(mutex_);
  cancelled_by_.emplace(run_id, cancelled_by.empty() ? "an unnamed key" : cancelled_by);
}

std::string RunCancels::by(const std::string& run_id) const {
  std::lock_guard lock(mutex_);
  auto it = cancelled_by_.find(run_id);
  return it == cancelled_by_.end() ? std::string() : it->second;
}

void RetryBackoff::failed(const std::string& run_id, Clock::time_point now) {
  Wait& wait = waits_[run_id];
  wait.wait_ms = wait.wait_ms == 0 ? first_ms_ : std::min(kMaxRetryMs, wait.wait_ms * 2);
  wait.next = now + std::chrono::milliseconds(wait.wait_ms);
}

bool RetryBackoff::may_try(const std::string& run_id, Clock::time_point now) const {
  auto it = waits_.find(run_id);
  return it == waits_.end() || now >= it->second.next;
}

}  // namespace kiln::qualifier

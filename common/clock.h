// The real clocks as kiln's plain milliseconds (common/time.h), for the shells only: the pure
// cores take `now` as an argument.
#pragma once

#include <chrono>
#include <cstdint>

#include "common/time.h"

namespace kiln {

// Milliseconds since the Unix epoch: times people read and times they set.
inline TimeMs wall_clock_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Milliseconds on the monotonic clock: deadlines, timeouts and liveness.
inline TimeMs monotonic_clock_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Microseconds on the monotonic clock: the latencies a process reports of itself.
inline std::int64_t monotonic_clock_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace kiln

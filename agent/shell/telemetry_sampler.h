// Reads the chips' telemetry in the background: the chips of running benchmarks every interval,
// so each sample can be flagged when a chip throttled, and every chip now and then for /metrics.
// It has its own driver handle on its own thread: a wedged chip stalls only this thread, never
// the agent's loop.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "agent/bench/bench.h"
#include "agent/metrics/agent_metrics.h"
#include "common/time.h"

namespace kiln::agent {

class TelemetrySampler {
 public:
  TelemetrySampler(std::string driver_library, std::string driver_options, DurationMs interval_ms);
  ~TelemetrySampler();
  TelemetrySampler(const TelemetrySampler&) = delete;
  TelemetrySampler& operator=(const TelemetrySampler&) = delete;

  // Chips to watch; an empty set pauses sampling.
  void watch(const std::set<std::uint32_t>& chips);
  // Also reads each of `chips` every `every_ms`, keeping its latest reading (for /metrics).
  void follow(const std::set<std::uint32_t>& chips, DurationMs every_ms);
  // The latest reading of each followed chip that answered.
  std::map<std::uint32_t, ChipSample> latest() const;
  // Readings of `chips` taken between from_ms and to_ms (wall clock, ms since the epoch).
  std::vector<bench::TelemetrySample> readings(const std::vector<std::uint32_t>& chips, TimeMs from_ms,
                                               TimeMs to_ms) const;

 private:
  // Shared with the thread, which may outlive this object while stuck in a wedged chip.
  struct State {
    std::mutex mutex;
    std::set<std::uint32_t> chips;
    std::deque<bench::TelemetrySample> readings;
    std::set<std::uint32_t> followed;
    DurationMs follow_every_ms = 0;
    std::map<std::uint32_t, ChipSample> latest;
    std::atomic<bool> stop{false};
  };
  static void run(std::shared_ptr<State> state, std::string driver_library, std::string driver_options,
                  DurationMs interval_ms);

  std::shared_ptr<State> state_;
};

}  // namespace kiln::agent

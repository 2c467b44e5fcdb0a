#include "agent/shell/telemetry_sampler.h"

#include <chrono>
#include <thread>

#include "common/clock.h"
#include "drivers/loader.h"

namespace kiln::agent {
namespace {

constexpr std::size_t kMaxReadings = 200000;  // about an hour of 8 chips at 200 ms

}  // namespace

TelemetrySampler::TelemetrySampler(std::string driver_library, std::string driver_options, DurationMs interval_ms)
    : state_(std::make_shared<State>()) {
  std::thread(run, state_, std::move(driver_library), std::move(driver_options), interval_ms).detach();
}

TelemetrySampler::~TelemetrySampler() { state_->stop = true; }

void TelemetrySampler::watch(const std::set<std::uint32_t>& chips) {
  std::lock_guard lock(state_->mutex);
  state_->chips = chips;
}

std::vector<bench::TelemetrySample> TelemetrySampler::readings(const std::vector<std::uint32_t>& chips,
                                                               TimeMs from_ms, TimeMs to_ms) const {
  std::lock_guard lock(state_->mutex);
  std::vector<bench::TelemetrySample> out;
  const std::set<std::uint32_t> wanted(chips.begin(), chips.end());
  for (const auto& r : state_->readings) {
    if (r.at_ms >= from_ms && r.at_ms <= to_ms && wanted.count(r.chip)) out.push_back(r);
  }
  return out;
}

void TelemetrySampler::run(std::shared_ptr<State> state, std::string driver_library, std::string driver_options,
                           DurationMs interval_ms) {
  auto driver = drivers::Driver::load(driver_library, driver_options);
  if (!driver) return;  // the agent itself loaded it; a failure here only loses the flags
  while (!state->stop) {
    std::set<std::uint32_t> chips;
    {
      std::lock_guard lock(state->mutex);
      chips = state->chips;
    }
    for (std::uint32_t chip : chips) {
      auto t = (*driver)->chip_telemetry(chip);
      if (!t) continue;
      std::lock_guard lock(state->mutex);
      state->readings.push_back(
          bench::TelemetrySample{wall_clock_ms(), chip, t->throttled, t->temperature_c, t->power_w, t->clock_mhz});
      if (state->readings.size() > kMaxReadings) state->readings.pop_front();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(interval_ms));
  }
}

}  // namespace kiln::agent

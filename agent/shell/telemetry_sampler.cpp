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

void TelemetrySampler::follow(const std::set<std::uint32_t>& chips, DurationMs every_ms) {
  std::lock_guard lock(state_->mutex);
  state_->followed = chips;
  state_->follow_every_ms = every_ms;
}

std::map<std::uint32_t, ChipSample> TelemetrySampler::latest() const {
  std::lock_guard lock(state_->mutex);
  return state_->latest;
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
  if (!driver) return;  // the agent itself loaded it; a failure here only loses the flags and /metrics' chips
  TimeMs next_follow_ms = 0;
  while (!state->stop) {
    std::set<std::uint32_t> chips;
    std::set<std::uint32_t> followed;
    {
      std::lock_guard lock(state->mutex);
      chips = state->chips;
      if (state->follow_every_ms > 0 && monotonic_clock_ms() >= next_follow_ms) {
        followed = state->followed;
        next_follow_ms = monotonic_clock_ms() + state->follow_every_ms;
      }
    }
    for (std::uint32_t chip : followed) {
      auto t = (*driver)->chip_telemetry(chip);
      if (!t) continue;
      ChipSample sample{wall_clock_ms(), t->temperature_c, t->power_w, t->clock_mhz, t->ecc_corrected,
                        t->ecc_uncorrected, t->throttled, std::nullopt, std::nullopt, std::nullopt};
      if (auto activity = (*driver)->chip_activity(chip)) {
        sample.utilization = activity->utilization;
        sample.thermal_throttle = activity->thermal_throttle;
        sample.power_throttle = activity->power_throttle;
      }
      std::lock_guard lock(state->mutex);
      state->latest[chip] = sample;
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

// Time inside kiln's pure cores is a plain number of milliseconds on a clock the shell
// chooses: the monotonic clock in the real shell, simulated time in simulations.
#pragma once

#include <cstdint>

namespace kiln {

using TimeMs = std::int64_t;
using DurationMs = std::int64_t;

constexpr DurationMs kSecondMs = 1000;
constexpr DurationMs kMinuteMs = 60 * kSecondMs;
constexpr DurationMs kHourMs = 60 * kMinuteMs;

}  // namespace kiln

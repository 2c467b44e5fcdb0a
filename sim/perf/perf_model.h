// The simulated chip's performance and noise model: what a benchmark on a sim chip measures.
// Pure and seeded; used by the simulated workloads and by kiln-bench-detection.
#pragma once

#include <span>

#include "common/error.h"
#include "common/stats/rng.h"

namespace kiln::sim {

using Rng = kiln::stats::Rng;

// A throttled chip (thermal or power cap) runs at this share of its speed.
inline constexpr double kThrottledSpeedFactor = 0.6;

// Expected steady-state throughput: the model's base rate, scaled by the stack bundle (a
// regression is a factor below 1), the chip's own speed (device-to-device variation of a few
// percent) and throttling.
double steady_throughput(double base, double bundle_factor, double chip_speed_factor, bool throttled);

struct PerfNoiseModel {
  double relative_sigma = 0.01;          // run-to-run noise of one timed iteration
  double outlier_probability = 0.02;     // an iteration hit by something else on the host
  double outlier_slowdown_min = 0.05;    // such an iteration takes 5% .. 25% longer
  double outlier_slowdown_max = 0.25;
  int warmup_iterations_to_steady = 20;  // caches, compilation, clocks settle by then
  double warmup_initial_slowdown = 0.30; // iteration 0 takes 30% longer

  // One timed iteration's throughput. The warmup slowdown decays quadratically to zero at
  // warmup_iterations_to_steady; noise is multiplicative and normal; an outlier divides the
  // throughput by 1 + a uniform slowdown. Always positive.
  double sample_throughput(double steady_throughput, int iteration_index, Rng& rng) const;

  // Mean slowdown of an iteration from warmup alone (0 once steady).
  double warmup_slowdown(int iteration_index) const;
};

Status validate(const PerfNoiseModel& model);

// "Warm up until steady": the agent runs iterations until the last `window` samples lie within
// `tolerance` of each other ((max - min) / median) and their median has not moved by more than
// `drift_tolerance` from the window before. The range test alone passes on the tail of a ramp
// that is smaller than the noise; the drift test catches that tail, which otherwise leaks a
// slowdown of a few percent into the first measured repeats. Gives up after max_iterations.
struct SteadyStateOptions {
  int window = 5;
  double tolerance = 0.03;
  double drift_tolerance = 0.01;
  int max_iterations = 200;
};

bool warmup_is_steady(std::span<const double> samples, const SteadyStateOptions& options);

}  // namespace kiln::sim

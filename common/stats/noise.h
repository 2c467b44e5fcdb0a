// A model's run-to-run benchmark noise, estimated from its recorded baseline samples: how many
// repeats the sequential gate (sequential_gate.h) plans for it.
//
// Each batch is one benchmark process (one job's baseline side): its samples are taken relative
// to the batch's median, so chip-to-chip and night-to-night level differences do not count as
// noise (the gate measures baseline and candidate interleaved on one chip, where they cancel).
// The pooled relative deviations give a robust scale (1.4826 * MAD); deviations beyond
// `outlier_cutoff` robust standard deviations are outliers (a slow iteration hit by something
// else on the host) and are counted apart; the standard deviation of the rest is the noise. With
// few samples the estimate leans on a prior, and the plan uses an upper bound of it, because
// under-estimating the noise costs detection while over-estimating it only costs repeats.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "common/error.h"

namespace kiln::stats {

struct NoiseOptions {
  double prior_relative_sigma = 0.02;  // assumed for a model without records: the noisy end of real chips
  double prior_weight_samples = 5;     // the prior counts as this many samples
  double floor_relative_sigma = 0.002; // below this a timer's resolution, not the chip, is measured
  double outlier_cutoff = 3.5;         // robust standard deviations beyond which a sample is an outlier
  double upper_bound_z = 1.0;          // plan on the estimate plus this many of its standard errors
};

Status validate(const NoiseOptions& options);

struct NoiseEstimate {
  double relative_sigma = 0;           // what the plan uses: shrunk to the prior, upper bound, floored
  double measured_relative_sigma = 0;  // the samples' own, outliers left out (0 without samples)
  double outlier_fraction = 0;         // of the pooled samples
  std::size_t samples = 0;             // in batches of at least 2
  std::size_t batches = 0;
};

// Batches with fewer than 2 samples say nothing about spread and are left out; no usable batch
// gives the prior. Fails on a non-finite or non-positive sample (throughputs and times are positive).
Result<NoiseEstimate> estimate_noise(std::span<const std::vector<double>> batches, const NoiseOptions& options);

// The estimate for a known noise level (a simulation, a planner's what-if): no samples, no prior.
NoiseEstimate known_noise(double relative_sigma, double outlier_fraction = 0);

}  // namespace kiln::stats

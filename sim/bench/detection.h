// Monte Carlo of the nightly performance gate on the simulated chip's noise model: how often
// a sustained drop is caught, and how often an unchanged model is falsely called a regression.
#pragma once

#include <cstdint>
#include <vector>

#include "common/stats/perf_gate.h"
#include "sim/perf/perf_model.h"

namespace kiln::sim {

struct DetectionBenchOptions {
  std::uint64_t seed = 1;
  int nights = 10000;                // Monte Carlo trials per repeat count
  int models_per_night = 60;         // the nightly qualification set
  int dropping_models_per_night = 1; // the hardest case for BH: one true regression
  double drop = 0.02;                // sustained relative throughput drop of those models
  double chip_speed_sigma = 0.03;    // device-to-device variation (both sides share a chip)
  PerfNoiseModel noise;
  SteadyStateOptions steady;
  stats::PerfGateOptions gate;
};

struct Proportion {
  long events = 0;
  long trials = 0;
  double rate() const { return trials > 0 ? static_cast<double>(events) / static_cast<double>(trials) : 0; }
  double wilson_low(double z = 1.96) const;  // 95% Wilson score interval by default
  double wilson_high(double z = 1.96) const;
};

struct DetectionRow {
  int repeats = 0;                   // per side, first comparison of a model
  Proportion detection;              // dropping model-nights reported as confirmed regression
  Proportion false_alarm;            // unchanged model-nights reported as regression
  Proportion first_stage_flag_null;  // unchanged model-nights the first stage flagged (pre-rerun)
  long drop_missed_no_change = 0;    // how misses ended, for the dropping models
  long drop_missed_inconclusive = 0;
  long drop_missed_unconfirmed = 0;
  long null_inconclusive = 0;        // unchanged models left inconclusive after all rounds
  double mean_measured_per_side = 0; // repeats per side per model-night, rounds and rerun included
  double mean_extra_rounds = 0;      // per model-night
};

// One row: `options.nights` simulated nights with `repeats` per side. Deterministic for the seed.
DetectionRow run_detection(const DetectionBenchOptions& options, int repeats);

// The sequential rule: no Benjamini-Hochberg family and no rerun, so every model-night stands
// alone and the dropping and unchanged ones are simulated apart, as many as each needs.
struct SequentialBenchOptions {
  std::uint64_t seed = 1;
  long drop_trials = 5000;   // model-nights with the sustained drop, per noise level
  long null_trials = 50000;  // unchanged model-nights, per noise level
  double drop = 0.02;
  double target_power = 0.99;  // the oracle's: the detection the rule must reach
  int history_batches = 10;  // the model's recorded baseline samples: this many earlier jobs ...
  int history_repeats = 10;  // ... of this many timed repeats each
  double chip_speed_sigma = 0.03;
  PerfNoiseModel noise;  // relative_sigma is set per row
  SteadyStateOptions steady;
  stats::PerfGateOptions gate;  // rule sequential
};

struct SequentialRow {
  double sigma = 0;                 // the noise model's run-to-run noise
  double oracle_repeats = 0;        // per side: the z-test that knows sigma, same power and false alarms
  Proportion detection;             // dropping model-nights reported as a regression
  Proportion false_alarm;           // unchanged model-nights reported as a regression
  double mean_repeats_drop = 0;     // measured per side per dropping model-night
  double mean_repeats_null = 0;     // ... per unchanged model-night
  double mean_looks_drop = 0;
  double mean_looks_null = 0;
  double mean_estimated_sigma = 0;  // what the plans used
  double mean_max_repeats = 0;      // the plans' maximum per side
};

// One row at run-to-run noise `sigma`: every model's noise is estimated from its simulated
// history, its plan made from that, and its night run through the sequential RunPerfGate.
// Deterministic for the seed.
SequentialRow run_sequential_detection(const SequentialBenchOptions& options, double sigma);

}  // namespace kiln::sim

#include "sim/bench/detection.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "common/stats/rng.h"

namespace kiln::sim {
namespace {

using stats::GateRequest;
using stats::RunPerfGate;
using stats::Verdict;

// One benchmark process on one chip: warm up until steady (bounded), then time `repeats`
// iterations. Every batch of repeats is a fresh process, so it warms up again.
std::vector<double> measure(const DetectionBenchOptions& options, double steady, int repeats, Rng& rng) {
  std::vector<double> warmup;
  int iteration = 0;
  while (iteration < options.steady.max_iterations && !warmup_is_steady(warmup, options.steady)) {
    warmup.push_back(options.noise.sample_throughput(steady, iteration, rng));
    ++iteration;
  }
  std::vector<double> measured;
  measured.reserve(static_cast<std::size_t>(repeats));
  for (int k = 0; k < repeats; ++k) {
    measured.push_back(options.noise.sample_throughput(steady, iteration, rng));
    ++iteration;
  }
  return measured;
}

struct ModelSetup {
  double base = 0;
  double candidate_factor = 1;
};

// Baseline and candidate interleaved on one chip, as the agent measures them.
void measure_pair(const DetectionBenchOptions& options, const ModelSetup& model, int repeats, Rng& rng,
                  RunPerfGate& gate, std::size_t index, double chip_speed, long& measured_per_side) {
  const std::vector<double> baseline =
      measure(options, steady_throughput(model.base, 1.0, chip_speed, false), repeats, rng);
  const std::vector<double> candidate =
      measure(options, steady_throughput(model.base, model.candidate_factor, chip_speed, false), repeats, rng);
  measured_per_side += repeats;
  gate.add_samples(index, baseline, candidate);
}

}  // namespace

double Proportion::wilson_low(double z) const {
  if (trials == 0) return 0;
  const double n = static_cast<double>(trials);
  const double p = rate();
  const double centre = p + z * z / (2 * n);
  const double spread = z * std::sqrt(p * (1 - p) / n + z * z / (4 * n * n));
  return std::max(0.0, (centre - spread) / (1 + z * z / n));
}

double Proportion::wilson_high(double z) const {
  if (trials == 0) return 1;
  const double n = static_cast<double>(trials);
  const double p = rate();
  const double centre = p + z * z / (2 * n);
  const double spread = z * std::sqrt(p * (1 - p) / n + z * z / (4 * n * n));
  return std::min(1.0, (centre + spread) / (1 + z * z / n));
}

DetectionRow run_detection(const DetectionBenchOptions& options, int repeats) {
  DetectionRow row;
  row.repeats = repeats;
  const auto models = static_cast<std::size_t>(options.models_per_night);
  const auto dropping = static_cast<std::size_t>(options.dropping_models_per_night);
  const std::uint64_t row_seed = stats::derive_seed(options.seed, static_cast<std::uint64_t>(repeats));
  long measured_per_side = 0;
  long extra_rounds = 0;

  for (int night = 0; night < options.nights; ++night) {
    const std::uint64_t night_seed = stats::derive_seed(row_seed, static_cast<std::uint64_t>(night));
    Rng rng(stats::derive_seed(night_seed, 0));
    RunPerfGate gate(models, options.gate, stats::derive_seed(night_seed, 1));

    std::vector<ModelSetup> setups(models);
    std::vector<double> chip_speed(models);
    for (std::size_t m = 0; m < models; ++m) {
      setups[m].base = rng.uniform(100.0, 5000.0);
      setups[m].candidate_factor = m < dropping ? 1.0 - options.drop : 1.0;
      chip_speed[m] = 1.0 + options.chip_speed_sigma * rng.normal();
      measure_pair(options, setups[m], repeats, rng, gate, m, chip_speed[m], measured_per_side);
    }
    while (!gate.finished()) {
      const std::vector<GateRequest> requests = gate.evaluate();
      for (const GateRequest& request : requests) {
        if (request.kind == GateRequest::Kind::confirmation_rerun) {
          // The rerun goes to another healthy node: another chip.
          chip_speed[request.model] = 1.0 + options.chip_speed_sigma * rng.normal();
        } else {
          ++extra_rounds;
        }
        measure_pair(options, setups[request.model], request.repeats_per_side, rng, gate, request.model,
                     chip_speed[request.model], measured_per_side);
      }
    }

    const auto outcomes = gate.outcomes();
    for (std::size_t m = 0; m < models; ++m) {
      const stats::ModelGateOutcome& outcome = outcomes[m];
      const bool reported = outcome.verdict == Verdict::regression;
      const bool first_stage_flag = reported || outcome.regression_unconfirmed;
      if (m < dropping) {
        ++row.detection.trials;
        if (reported) {
          ++row.detection.events;
        } else if (outcome.regression_unconfirmed) {
          ++row.drop_missed_unconfirmed;
        } else if (outcome.verdict == Verdict::inconclusive) {
          ++row.drop_missed_inconclusive;
        } else {
          ++row.drop_missed_no_change;
        }
      } else {
        ++row.false_alarm.trials;
        ++row.first_stage_flag_null.trials;
        if (reported) ++row.false_alarm.events;
        if (first_stage_flag) ++row.first_stage_flag_null.events;
        if (outcome.verdict == Verdict::inconclusive) ++row.null_inconclusive;
      }
    }
  }
  const double model_nights = static_cast<double>(options.nights) * static_cast<double>(models);
  row.mean_measured_per_side = static_cast<double>(measured_per_side) / model_nights;
  row.mean_extra_rounds = static_cast<double>(extra_rounds) / model_nights;
  return row;
}

SequentialRow run_sequential_detection(const SequentialBenchOptions& options, double sigma) {
  SequentialRow row;
  row.sigma = sigma;
  const stats::SequentialOptions& targets = options.gate.sequential;
  row.oracle_repeats = stats::oracle_repeats_per_side(sigma, options.drop, targets.false_alarm, options.target_power);
  DetectionBenchOptions measuring;
  measuring.noise = options.noise;
  measuring.noise.relative_sigma = sigma;
  measuring.steady = options.steady;
  const std::uint64_t row_seed = stats::derive_seed(options.seed, static_cast<std::uint64_t>(sigma * 1e6));
  long repeats_drop = 0;
  long repeats_null = 0;
  long looks_drop = 0;
  long looks_null = 0;
  double sigma_sum = 0;
  double max_sum = 0;
  const long trials = options.drop_trials + options.null_trials;

  for (long trial = 0; trial < trials; ++trial) {
    const bool dropping = trial < options.drop_trials;
    const std::uint64_t trial_seed = stats::derive_seed(row_seed, static_cast<std::uint64_t>(trial));
    Rng rng(stats::derive_seed(trial_seed, 0));
    const ModelSetup model{rng.uniform(100.0, 5000.0), dropping ? 1.0 - options.drop : 1.0};

    // The recorded baseline samples: earlier nights' jobs, each on some chip.
    std::vector<std::vector<double>> history;
    for (int b = 0; b < options.history_batches; ++b) {
      const double chip = 1.0 + options.chip_speed_sigma * rng.normal();
      history.push_back(measure(measuring, steady_throughput(model.base, 1.0, chip, false), options.history_repeats, rng));
    }
    auto noise = stats::estimate_noise(history, options.gate.noise);
    KILN_ASSERT(noise.has_value(), "simulated throughputs are positive and finite");
    stats::SequentialPlan plan = stats::plan_sequential(*noise, targets);
    sigma_sum += plan.noise.relative_sigma;
    max_sum += plan.max_repeats_per_side();

    const double chip = 1.0 + options.chip_speed_sigma * rng.normal();
    RunPerfGate gate(options.gate, stats::derive_seed(trial_seed, 1), {plan});
    long measured = 0;
    measure_pair(measuring, model, plan.repeats_per_look, rng, gate, 0, chip, measured);
    while (!gate.finished()) {
      for (const GateRequest& request : gate.evaluate()) {
        measure_pair(measuring, model, request.repeats_per_side, rng, gate, 0, chip, measured);
      }
    }
    const stats::ModelGateOutcome& outcome = gate.outcomes()[0];
    const bool reported = outcome.verdict == Verdict::regression;
    if (dropping) {
      ++row.detection.trials;
      row.detection.events += reported ? 1 : 0;
      repeats_drop += measured;
      looks_drop += outcome.looks_taken;
    } else {
      ++row.false_alarm.trials;
      row.false_alarm.events += reported ? 1 : 0;
      repeats_null += measured;
      looks_null += outcome.looks_taken;
    }
  }
  auto mean = [](long total, long count) { return count > 0 ? static_cast<double>(total) / static_cast<double>(count) : 0.0; };
  row.mean_repeats_drop = mean(repeats_drop, options.drop_trials);
  row.mean_repeats_null = mean(repeats_null, options.null_trials);
  row.mean_looks_drop = mean(looks_drop, options.drop_trials);
  row.mean_looks_null = mean(looks_null, options.null_trials);
  row.mean_estimated_sigma = trials > 0 ? sigma_sum / static_cast<double>(trials) : 0;
  row.mean_max_repeats = trials > 0 ? max_sum / static_cast<double>(trials) : 0;
  return row;
}

}  // namespace kiln::sim

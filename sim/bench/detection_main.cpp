// kiln-bench-detection: detection power and false alarms of the nightly performance gate,
// by Monte Carlo on the simulated chip's noise model. See docs/qualification.md.
#include <chrono>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "sim/bench/detection.h"
#include "common/version.h"

namespace {

using kiln::sim::DetectionBenchOptions;
using kiln::sim::DetectionRow;
using kiln::sim::Proportion;

std::string percent(double value, int decimals) { return fmt::format("{:.{}f}%", 100 * value, decimals); }

nlohmann::json proportion_json(const Proportion& p) {
  return {{"events", p.events}, {"trials", p.trials}, {"rate", p.rate()},
          {"wilson95_low", p.wilson_low()}, {"wilson95_high", p.wilson_high()}};
}

// The sequential rule's rows: detection, false alarms and repeats against the oracle's.
int run_sequential(kiln::sim::SequentialBenchOptions options, const std::vector<double>& sigmas, bool json) {
  using kiln::sim::SequentialRow;
  const auto& targets = options.gate.sequential;
  if (!json) {
    std::cout << fmt::format(
        "kiln-bench-detection --rule sequential  seed={}  per noise level: {} model-nights with a sustained {} drop, "
        "{} unchanged\n",
        options.seed, options.drop_trials, percent(options.drop, 1), options.null_trials);
    std::cout << fmt::format(
        "noise: outliers {} of iterations ({}-{} slower), warmup to steady, chip variation {}; each model's noise "
        "estimated from {} recorded baseline jobs of {} repeats\n",
        percent(options.noise.outlier_probability, 1), percent(options.noise.outlier_slowdown_min, 0),
        percent(options.noise.outlier_slowdown_max, 0), percent(options.chip_speed_sigma, 1),
        options.history_batches, options.history_repeats);
    std::cout << fmt::format(
        "rule: group-sequential Mann-Whitney, up to {} looks, HSD({}) alpha / HSD({}) beta spending, designed for "
        "{} power; targets: detection >= {} of a {} drop, false alarms <= {} per model-night\n",
        targets.max_looks, targets.efficacy_spending_gamma, targets.futility_spending_gamma,
        percent(targets.power, 1), percent(options.target_power, 0), percent(targets.min_effect, 0),
        percent(targets.false_alarm, 1));
    std::cout << fmt::format(
        "oracle: one-sided z-test knowing sigma, n = 2 ((z_alpha + z_beta) sigma / drop)^2 per side at the targets\n\n");
    std::cout << fmt::format("{:>6}  {:>9} {:>19}  {:>11} {:>19}  {:>7}  {:>9} {:>6}  {:>9} {:>6}  {:>7} {:>6}\n",
                             "noise", "detection", "(95% Wilson)", "false alarm", "(95% Wilson)", "oracle",
                             "reps drop", "ratio", "reps null", "ratio", "sigma^", "max");
    std::cout.flush();
  }
  nlohmann::json rows = nlohmann::json::array();
  const auto started = std::chrono::steady_clock::now();
  for (double sigma : sigmas) {
    const SequentialRow row = kiln::sim::run_sequential_detection(options, sigma);
    const double ratio_drop = row.mean_repeats_drop / row.oracle_repeats;
    const double ratio_null = row.mean_repeats_null / row.oracle_repeats;
    if (json) {
      rows.push_back({{"sigma", row.sigma},
                      {"oracle_repeats_per_side", row.oracle_repeats},
                      {"detection", proportion_json(row.detection)},
                      {"false_alarm_per_model_night", proportion_json(row.false_alarm)},
                      {"mean_repeats_per_side_drop", row.mean_repeats_drop},
                      {"mean_repeats_per_side_unchanged", row.mean_repeats_null},
                      {"ratio_to_oracle_drop", ratio_drop},
                      {"ratio_to_oracle_unchanged", ratio_null},
                      {"mean_looks_drop", row.mean_looks_drop},
                      {"mean_looks_unchanged", row.mean_looks_null},
                      {"mean_estimated_sigma", row.mean_estimated_sigma},
                      {"mean_max_repeats_per_side", row.mean_max_repeats}});
      continue;
    }
    std::cout << fmt::format(
        "{:>6}  {:>9} [{:>7}, {:>7}]  {:>11} [{:>7}, {:>7}]  {:>7.1f}  {:>9.1f} {:>5.2f}x  {:>9.1f} {:>5.2f}x  {:>7} "
        "{:>6.1f}\n",
        percent(sigma, 1), percent(row.detection.rate(), 2), percent(row.detection.wilson_low(), 2),
        percent(row.detection.wilson_high(), 2), percent(row.false_alarm.rate(), 3),
        percent(row.false_alarm.wilson_low(), 3), percent(row.false_alarm.wilson_high(), 3), row.oracle_repeats,
        row.mean_repeats_drop, ratio_drop, row.mean_repeats_null, ratio_null, percent(row.mean_estimated_sigma, 2),
        row.mean_max_repeats);
    std::cout.flush();
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  if (json) {
    nlohmann::json out;
    out["rule"] = "sequential";
    out["seed"] = options.seed;
    out["drop"] = options.drop;
    out["drop_trials"] = options.drop_trials;
    out["null_trials"] = options.null_trials;
    out["history_batches"] = options.history_batches;
    out["history_repeats"] = options.history_repeats;
    out["noise"] = {{"outlier_probability", options.noise.outlier_probability},
                    {"outlier_slowdown_min", options.noise.outlier_slowdown_min},
                    {"outlier_slowdown_max", options.noise.outlier_slowdown_max},
                    {"chip_speed_sigma", options.chip_speed_sigma}};
    out["targets"] = {{"false_alarm", targets.false_alarm},
                      {"detection", options.target_power},
                      {"design_power", targets.power},
                      {"min_effect", targets.min_effect},
                      {"max_looks", targets.max_looks},
                      {"min_repeats_per_look", targets.min_repeats_per_look},
                      {"max_repeats_per_side", targets.max_repeats_per_side}};
    out["rows"] = rows;
    out["seconds"] = seconds;
    std::cout << out.dump(2) << "\n";
  } else {
    std::cout << fmt::format(
        "\ndetection: dropping model-nights reported as a regression; false alarm: unchanged model-nights reported "
        "as a regression. reps: measured repeats per side per model-night (all looks), and its ratio to the "
        "oracle's. sigma^: the noise the plans used (estimated, shrunk, upper bound); max: the plans' most per side. "
        "{:.1f} s; reproduce with --seed {} --drop-trials {} --null-trials {}\n",
        seconds, options.seed, options.drop_trials, options.null_trials);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  DetectionBenchOptions options;
  // The report-only bootstrap interval does not change any verdict; skipping it keeps the run short.
  options.gate.bootstrap_for_report = false;
  std::vector<int> repeats = {5, 7, 10, 15, 20};
  bool json = false;
  std::string rule = "sequential";
  kiln::sim::SequentialBenchOptions sequential;
  std::vector<double> sigmas = {0.01, 0.02, 0.03};

  CLI::App app{"Monte Carlo of the nightly performance gate on the sim noise model: detection "
               "probability of a sustained drop and false alarms per model-night"};
  app.set_version_flag("--version", kiln::version_text("kiln-bench-detection"));
  app.add_option("--rule", rule,
                 "the gate to simulate: sequential (the nightly's: repeats from measured noise) or fixed "
                 "(a fixed first measurement, BH, extra rounds, confirmation rerun)")
      ->check(CLI::IsMember({"sequential", "fixed"}));
  app.add_option("--sigmas", sigmas, "sequential: run-to-run noise levels, one row each")
      ->check(CLI::Range(0.001, 0.2));
  app.add_option("--drop-trials", sequential.drop_trials, "sequential: model-nights with the drop per noise level")
      ->check(CLI::Range(0, 10'000'000));
  app.add_option("--null-trials", sequential.null_trials, "sequential: unchanged model-nights per noise level")
      ->check(CLI::Range(0, 10'000'000));
  app.add_option("--history-jobs", sequential.history_batches,
                 "sequential: recorded baseline jobs per model the noise is estimated from")
      ->check(CLI::Range(0, 1000));
  app.add_option("--history-repeats", sequential.history_repeats, "sequential: timed repeats per recorded job")
      ->check(CLI::Range(1, 1000));
  app.add_option("--outliers", options.noise.outlier_probability, "share of iterations that are slow outliers")
      ->check(CLI::Range(0.0, 0.5));
  app.add_option("--seed", options.seed, "seed of the whole run (printed; reruns reproduce it)");
  app.add_option("--trials", options.nights, "simulated nights per repeat count")->check(CLI::Range(1, 10'000'000));
  app.add_option("--repeats", repeats, "repeats per side to evaluate")->check(CLI::Range(2, 1000));
  app.add_option("--drop", options.drop, "sustained relative throughput drop of the dropping model")
      ->check(CLI::Range(0.0, 0.5));
  app.add_option("--models", options.models_per_night, "models per night")->check(CLI::Range(1, 10'000));
  app.add_option("--dropping-models", options.dropping_models_per_night, "models per night with the drop")
      ->check(CLI::Range(0, 10'000));
  app.add_option("--sigma", options.noise.relative_sigma, "run-to-run noise of one iteration")
      ->check(CLI::Range(0.0, 0.2));
  app.add_option("--confidence", options.gate.ci_confidence, "gate: interval confidence")
      ->check(CLI::Range(0.5, 0.999999));
  app.add_option("--fdr-q", options.gate.fdr_q, "gate: Benjamini-Hochberg q")->check(CLI::Range(0.0001, 0.5));
  app.add_option("--alpha", options.gate.alpha, "gate: alpha of the confirmation rerun")
      ->check(CLI::Range(0.0001, 0.5));
  app.add_option("--point-fraction", options.gate.min_point_effect_fraction,
                 "gate: share of the minimum effect the point estimate must pass")
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--extra-rounds", options.gate.max_extra_rounds, "gate: extra rounds per stage")
      ->check(CLI::Range(0, 20));
  app.add_option("--extra-repeats", options.gate.extra_repeats_per_round, "gate: repeats per side per extra round")
      ->check(CLI::Range(1, 1000));
  bool bootstrap_interval = false;
  app.add_flag("--bootstrap-interval", bootstrap_interval,
               "gate: decide on the percentile bootstrap interval instead of the rank interval (slow)");
  app.add_flag("--json", json, "print one JSON object instead of the table");
  CLI11_PARSE(app, argc, argv);
  if (bootstrap_interval) options.gate.interval_method = kiln::stats::IntervalMethod::bootstrap;
  if (rule == "sequential") {
    sequential.seed = options.seed;
    sequential.drop = options.drop;
    sequential.noise = options.noise;
    sequential.chip_speed_sigma = options.chip_speed_sigma;
    sequential.steady = options.steady;
    sequential.gate = options.gate;
    sequential.gate.rule = kiln::stats::GateRule::sequential;
    sequential.gate.sequential.min_effect = options.drop > 0 ? options.drop : sequential.gate.sequential.min_effect;
    return run_sequential(sequential, sigmas, json);
  }
  if (options.dropping_models_per_night > options.models_per_night) {
    std::cerr << "kiln-bench-detection: --dropping-models exceeds --models; lower it\n";
    return 2;
  }

  const auto& gate = options.gate;
  const auto& noise = options.noise;
  if (!json) {
    std::cout << fmt::format(
        "kiln-bench-detection  seed={}  trials={} nights per row, {} models per night ({} with a "
        "sustained {} drop, {} unchanged)\n",
        options.seed, options.nights, options.models_per_night, options.dropping_models_per_night,
        percent(options.drop, 1), options.models_per_night - options.dropping_models_per_night);
    std::cout << fmt::format(
        "noise: sigma {}, outliers {} of iterations ({}-{} slower), warmup {} iterations from {} "
        "slower, steady when {} in a row within {}, chip variation {}\n",
        percent(noise.relative_sigma, 1), percent(noise.outlier_probability, 1),
        percent(noise.outlier_slowdown_min, 0), percent(noise.outlier_slowdown_max, 0),
        noise.warmup_iterations_to_steady, percent(noise.warmup_initial_slowdown, 0), options.steady.window,
        percent(options.steady.tolerance, 1), percent(options.chip_speed_sigma, 1));
    std::cout << fmt::format(
        "gate: BH q {} across models, then significant + point >= {} + {}% {} interval reaching "
        "{}; up to {} extra rounds of {} repeats; regression confirmed by a rerun at alpha {}\n\n",
        gate.fdr_q, percent(gate.min_point_effect_fraction * gate.min_effect, 1), 100 * gate.ci_confidence,
        kiln::stats::to_string(gate.interval_method), percent(gate.min_effect, 1), gate.max_extra_rounds, gate.extra_repeats_per_round, gate.alpha);
    std::cout << fmt::format("{:>7}  {:>9} {:>19}  {:>11} {:>19}  {:>10}  {:>8}  {:>8}  {:>26}\n", "repeats",
                             "detection", "(95% Wilson)", "false alarm", "(95% Wilson)", "pre-rerun",
                             "meas/side", "rounds", "drop misses: none/inc/unconf");
    std::cout.flush();
  }

  nlohmann::json rows = nlohmann::json::array();
  const auto started = std::chrono::steady_clock::now();
  for (int r : repeats) {
    const DetectionRow row = kiln::sim::run_detection(options, r);
    if (json) {
      rows.push_back({{"repeats", row.repeats},
                      {"detection", proportion_json(row.detection)},
                      {"false_alarm_per_model_night", proportion_json(row.false_alarm)},
                      {"first_stage_flag_per_null_model_night", proportion_json(row.first_stage_flag_null)},
                      {"drop_missed_no_change", row.drop_missed_no_change},
                      {"drop_missed_inconclusive", row.drop_missed_inconclusive},
                      {"drop_missed_unconfirmed", row.drop_missed_unconfirmed},
                      {"null_inconclusive", row.null_inconclusive},
                      {"mean_measured_per_side", row.mean_measured_per_side},
                      {"mean_extra_rounds", row.mean_extra_rounds}});
      continue;
    }
    std::cout << fmt::format(
        "{:>7}  {:>9} [{:>7}, {:>7}]  {:>11} [{:>7}, {:>7}]  {:>10}  {:>8.1f}  {:>8.2f}  {:>26}\n", row.repeats,
        percent(row.detection.rate(), 2), percent(row.detection.wilson_low(), 2),
        percent(row.detection.wilson_high(), 2), percent(row.false_alarm.rate(), 3),
        percent(row.false_alarm.wilson_low(), 3), percent(row.false_alarm.wilson_high(), 3),
        percent(row.first_stage_flag_null.rate(), 3), row.mean_measured_per_side, row.mean_extra_rounds,
        fmt::format("{}/{}/{}", row.drop_missed_no_change, row.drop_missed_inconclusive,
                    row.drop_missed_unconfirmed));
    std::cout.flush();
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();

  if (json) {
    nlohmann::json out;
    out["seed"] = options.seed;
    out["nights_per_row"] = options.nights;
    out["models_per_night"] = options.models_per_night;
    out["dropping_models_per_night"] = options.dropping_models_per_night;
    out["drop"] = options.drop;
    out["noise"] = {{"relative_sigma", noise.relative_sigma},
                    {"outlier_probability", noise.outlier_probability},
                    {"outlier_slowdown_min", noise.outlier_slowdown_min},
                    {"outlier_slowdown_max", noise.outlier_slowdown_max},
                    {"warmup_iterations_to_steady", noise.warmup_iterations_to_steady},
                    {"warmup_initial_slowdown", noise.warmup_initial_slowdown},
                    {"chip_speed_sigma", options.chip_speed_sigma}};
    out["gate"] = {{"alpha", gate.alpha},
                   {"min_effect", gate.min_effect},
                   {"fdr_q", gate.fdr_q},
                   {"min_point_effect_fraction", gate.min_point_effect_fraction},
                   {"ci_confidence", gate.ci_confidence},
                   {"interval_method", kiln::stats::to_string(gate.interval_method)},
                   {"bootstrap_resamples", gate.bootstrap_resamples},
                   {"max_extra_rounds", gate.max_extra_rounds},
                   {"extra_repeats_per_round", gate.extra_repeats_per_round}};
    out["rows"] = rows;
    out["seconds"] = seconds;
    std::cout << out.dump(2) << "\n";
  } else {
    std::cout << fmt::format(
        "\ndetection: dropping model-nights reported as a confirmed regression. false alarm: unchanged "
        "model-nights reported as a regression; pre-rerun: flagged by the first stage before the "
        "confirmation rerun. meas/side: measured repeats per side per model-night, extra rounds and "
        "rerun included; rounds: extra rounds per model-night. targets: detection >= 99%, false alarms "
        "<= 0.1%. {:.1f} s; reproduce with --seed {} --trials {}\n",
        seconds, options.seed, options.nights);
  }
  return 0;
}

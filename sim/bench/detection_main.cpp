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

}  // namespace

int main(int argc, char** argv) {
  DetectionBenchOptions options;
  // The report-only bootstrap interval does not change any verdict; skipping it keeps the run short.
  options.gate.bootstrap_for_report = false;
  std::vector<int> repeats = {5, 7, 10, 15, 20};
  bool json = false;

  CLI::App app{"Monte Carlo of the nightly performance gate on the sim noise model: detection "
               "probability of a sustained drop and false alarms per model-night"};
  app.set_version_flag("--version", kiln::version_text("kiln-bench-detection"));
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

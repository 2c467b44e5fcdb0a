#include "common/stats/compare_cli.h"

#include <cmath>
#include <ostream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/stats/perf_gate.h"
#include "common/stats/samples_file.h"

namespace kiln::stats {
namespace {

int exit_code_for(Verdict verdict) {
  switch (verdict) {
    case Verdict::regression: return kCompareExitRegression;
    case Verdict::inconclusive: return kCompareExitInconclusive;
    case Verdict::no_change:
    case Verdict::improvement: return kCompareExitNoRegression;
  }
  return kCompareExitInconclusive;
}

int input_error(const Error& error, bool json, std::ostream& out, std::ostream& err) {
  err << "kiln compare: " << error.describe() << "\n";
  if (json) out << nlohmann::json{{"error", error.describe()}, {"exit_code", kCompareExitInputError}}.dump(2) << "\n";
  return kCompareExitInputError;
}

std::string percent(double relative) {
  if (std::isinf(relative)) return relative < 0 ? "-unbounded" : "+unbounded";
  return fmt::format("{:+.2f}%", 100 * relative);
}

std::string explain(Verdict verdict, const Comparison& c, const PerfGateOptions& o) {
  const double threshold = o.min_point_effect_fraction * o.min_effect;
  switch (verdict) {
    case Verdict::regression:
      return fmt::format("significant at alpha {}, {:.2f}% worse (over {:.2f}%), interval reaches {:.2f}%",
                         o.alpha, 100 * c.worse_relative, 100 * threshold, 100 * o.min_effect);
    case Verdict::improvement:
      return fmt::format("significant at alpha {}, {:.2f}% better, interval reaches {:.2f}%", o.alpha,
                         -100 * c.worse_relative, 100 * o.min_effect);
    case Verdict::no_change:
      return fmt::format("the interval excludes a change of {:.2f}% either way", 100 * o.min_effect);
    case Verdict::inconclusive:
      return "neither a change of the minimum effect nor its absence is shown; add repeats to "
             "both sides and compare again";
  }
  return "";
}

}  // namespace

int run_compare_samples(const CompareSamplesArgs& args, std::ostream& out, std::ostream& err) {
  PerfGateOptions options;
  options.alpha = args.alpha;
  options.min_effect = args.min_effect;
  options.higher_is_better = args.higher_is_better;
  options.ci_confidence = args.confidence;
  options.bootstrap_resamples = args.bootstrap_resamples;
  options.bootstrap_for_report = true;
  if (auto ok = validate(options); !ok) return input_error(ok.error(), args.json, out, err);

  auto baseline = read_samples_file(args.baseline_path);
  if (!baseline) return input_error(baseline.error(), args.json, out, err);
  auto candidate = read_samples_file(args.candidate_path);
  if (!candidate) return input_error(candidate.error(), args.json, out, err);

  auto comparison = compare(*baseline, *candidate, options, args.seed);
  if (!comparison) return input_error(comparison.error(), args.json, out, err);
  const Comparison& c = *comparison;
  const Verdict verdict = decide(c, c.test.p_value, options.alpha, options);
  const int exit_code = exit_code_for(verdict);

  std::string note;
  const double floor_p = smallest_exact_p_value(baseline->size(), candidate->size());
  if (floor_p > options.alpha) {
    note = fmt::format("with {} and {} samples no test can reach p <= {} (smallest p {:.4g}); use "
                       "at least 5 per side, 10 or more for a 2% effect at 1% noise",
                       baseline->size(), candidate->size(), options.alpha, floor_p);
  } else if (std::isinf(c.relative_ci.high) || std::isinf(c.relative_ci.low)) {
    note = fmt::format("{} and {} samples are too few for a {:g}% interval; add repeats",
                       baseline->size(), candidate->size(), 100 * options.ci_confidence);
  }

  if (args.json) {
    nlohmann::json j;
    j["baseline"] = {{"path", args.baseline_path}, {"n", baseline->size()}, {"median", c.shift.baseline_median}};
    j["candidate"] = {{"path", args.candidate_path}, {"n", candidate->size()}};
    j["test"] = {{"name", "mann-whitney-u"},
                 {"method", to_string(c.test.method)},
                 {"u_candidate", c.test.u_candidate},
                 {"ties", c.test.has_ties},
                 {"p_value", c.test.p_value}};
    // JSON has no infinity: an unbounded end (too few samples for the confidence) is null.
    auto end = [](double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); };
    j["shift"] = {{"hodges_lehmann", c.shift.hodges_lehmann},
                  {"relative", c.shift.relative},
                  {"interval",
                   {{"low", end(c.relative_ci.low)},
                    {"high", end(c.relative_ci.high)},
                    {"confidence", c.relative_ci.confidence},
                    {"method", to_string(c.interval_method)}}}};
    if (c.bootstrap_ci) {
      j["shift"]["bootstrap_interval"] = {{"low", c.bootstrap_ci->low},
                                          {"high", c.bootstrap_ci->high},
                                          {"confidence", c.bootstrap_ci->confidence},
                                          {"method", "percentile bootstrap"},
                                          {"resamples", options.bootstrap_resamples},
                                          {"seed", args.seed}};
    }
    j["direction"] = options.higher_is_better ? "higher-is-better" : "lower-is-better";
    j["min_effect"] = options.min_effect;
    j["alpha"] = options.alpha;
    j["verdict"] = to_string(verdict);
    j["reason"] = explain(verdict, c, options);
    if (!note.empty()) j["note"] = note;
    j["exit_code"] = exit_code;
    out << j.dump(2) << "\n";
    return exit_code;
  }

  out << fmt::format("baseline   {} samples, median {:.6g}  ({})\n", baseline->size(),
                     c.shift.baseline_median, args.baseline_path);
  out << fmt::format("candidate  {} samples  ({})\n", candidate->size(), args.candidate_path);
  out << fmt::format("test       Mann-Whitney U, two-sided, {}{}: U = {:g}, p = {:.4g}\n",
                     to_string(c.test.method), c.test.has_ties ? " (ties corrected)" : "",
                     c.test.u_candidate, c.test.p_value);
  out << fmt::format("shift      Hodges-Lehmann {:+.6g} ({:+.2f}% of the baseline median)\n",
                     c.shift.hodges_lehmann, 100 * c.shift.relative);
  out << fmt::format("interval   {:g}% {} [{}, {}] of the relative shift (the verdict uses it)\n",
                     100 * c.relative_ci.confidence, to_string(c.interval_method), percent(c.relative_ci.low),
                     percent(c.relative_ci.high));
  if (c.bootstrap_ci) {
    out << fmt::format("bootstrap  {:g}% percentile [{}, {}] ({} resamples, seed {})\n",
                       100 * c.bootstrap_ci->confidence, percent(c.bootstrap_ci->low),
                       percent(c.bootstrap_ci->high), options.bootstrap_resamples, args.seed);
  }
  out << fmt::format("rule       {}, alpha {}, minimum effect {:g}%\n",
                     options.higher_is_better ? "higher is better" : "lower is better", options.alpha,
                     100 * options.min_effect);
  out << fmt::format("verdict    {}: {}\n", to_string(verdict), explain(verdict, c, options));
  if (!note.empty()) out << "note       " << note << "\n";
  return exit_code;
}

}  // namespace kiln::stats

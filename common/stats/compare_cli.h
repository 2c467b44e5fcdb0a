// `kiln compare BASELINE.txt CANDIDATE.txt`: the performance gate on a user's own samples.
//
// Exit codes: 0 no regression (no_change or improvement), 1 regression, 2 input error
// (unreadable file, bad number, bad option), 3 inconclusive (add repeats and compare again).
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>

namespace kiln::stats {

inline constexpr int kCompareExitNoRegression = 0;
inline constexpr int kCompareExitRegression = 1;
inline constexpr int kCompareExitInputError = 2;
inline constexpr int kCompareExitInconclusive = 3;

struct CompareSamplesArgs {
  std::string baseline_path;
  std::string candidate_path;
  bool higher_is_better = true;  // --higher-is-better (default) / --lower-is-better
  double min_effect = 0.02;      // --min-effect
  double alpha = 0.01;           // --alpha
  double confidence = 0.999;     // --confidence: of the intervals (the rule uses the rank interval)
  int bootstrap_resamples = 2000;  // --resamples
  std::uint64_t seed = 1;        // --seed: the bootstrap's seed
  bool json = false;             // --json
};

// Reads both files, runs one comparison (no BH: a single test at alpha; no rerun: the user
// decides whether to rerun) and prints p-value, method, shift, relative shift, interval and
// verdict, readable or as one JSON object on `out`. Input errors go to `err` (and, with
// --json, also as {"error": ...} on `out`).
int run_compare_samples(const CompareSamplesArgs& args, std::ostream& out, std::ostream& err);

}  // namespace kiln::stats

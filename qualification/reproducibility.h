// Whether a rerun of a measured job reproduced it (`kiln rerun JOB`, and the nightly's sample of
// earlier results): the same job again, from its recorded bundle, config and seed, on a node of the
// same hardware revision, judged against the original with the gates qualification uses. Pure.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "common/enum_names.h"
#include "common/stats/perf_gate.h"

namespace kiln::qualification {

struct JobResult;

enum class Reproduction { reproduced, not_reproduced, inconclusive };
constexpr EnumTable<Reproduction, 3> enum_names(Reproduction) {
  return {{
      {Reproduction::reproduced, "reproduced"},
      {Reproduction::not_reproduced, "not_reproduced"},
      {Reproduction::inconclusive, "inconclusive"},
  }};
}
inline std::string_view to_string(Reproduction value) { return enum_name(value); }

struct ReproductionCheck {
  Reproduction verdict = Reproduction::inconclusive;
  std::string gate;    // "correctness", "performance" or "outcome": the gate that decided; empty when both agreed
  std::string detail;  // one line for people, with the figures
  // The original's samples against the rerun's (relative to each job's baseline when both measured one).
  std::optional<stats::Comparison> performance;
};

// Original against rerun:
//   - either did not run (no result to read): inconclusive;
//   - correctness verdicts differ: not reproduced (gate "correctness");
//   - the very same samples on both sides (a deterministic stack on the same chip): reproduced;
//   - performance, when both measured samples: the candidate's throughputs, each divided by the
//     median of the baseline measured on the same chips in the same job when both jobs have one
//     (chip-to-chip speed differs by several percent; the ratio cancels it), compared with
//     stats::compare and judged by stats::decide at alpha as a confirmation rerun is: regression or
//     improvement is not reproduced (gate "performance"), no_change reproduced, inconclusive
//     inconclusive. Samples on one side only: inconclusive.
// `seed` draws the bootstrap interval shown to people.
ReproductionCheck check_reproduction(const JobResult& original, const JobResult& rerun,
                                     const stats::PerfGateOptions& options, std::uint64_t seed);

// How a job ended, for a job whose result is no qualification result (kiln submit of any
// workload): its state and exit code, and the result document it wrote.
struct JobEnding {
  std::string state;  // succeeded, failed, ...
  std::int32_t exit_code = 0;
  std::string result;
};

// A job that is no qualification measurement has no golden and no baseline, so the only gate
// kiln holds it to is its outcome:
//   - a different state or exit code: not reproduced (gate "outcome");
//   - the same outcome and the very same result document: reproduced;
//   - the same outcome, different documents: inconclusive (the workload's own result, which kiln
//     has no rule to judge).
ReproductionCheck check_outcome_reproduction(const JobEnding& original, const JobEnding& rerun);

nlohmann::json to_json(const ReproductionCheck& check);

// A run's measure job as it was submitted, so that it can be submitted again: recorded in the run's
// report for every (model, revision) that was measured. A model on several nodes ran as a gang in
// a lease of whole nodes: its ranks are listed, and the submission is the one every rank's derives
// from (shell/gang.h rank_job).
struct MeasuredJob {
  std::uint64_t job_id = 0;   // the only job, or rank 0 of the gang
  std::string submission;     // the submit_job request, as protocol JSON (docs/protocol.md §5.5)
  double eval_threshold = 0;  // the model's, for the training gates when its result is read again
  std::vector<std::uint64_t> rank_job_ids;  // a gang's jobs in rank order; empty for one node

  int nodes() const { return rank_job_ids.empty() ? 1 : static_cast<int>(rank_job_ids.size()); }
  bool has_job(std::uint64_t id) const {
    return id == job_id || std::find(rank_job_ids.begin(), rank_job_ids.end(), id) != rank_job_ids.end();
  }
};

// One rerun of the nightly's reproducibility sample.
struct ReproductionReport {
  std::string run_id;  // the run that measured the original
  std::string model;
  std::string revision;
  std::uint64_t job_id = 0;        // the original
  std::uint64_t rerun_job_id = 0;  // 0: not submitted yet
  std::optional<ReproductionCheck> check;  // nullopt while the rerun runs
};

}  // namespace kiln::qualification

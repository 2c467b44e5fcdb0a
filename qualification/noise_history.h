// Where the sequential gate's noise estimates come from: the baseline samples that earlier runs'
// reports recorded for each (model, revision), and each pair's plan made from them. Pure.
#pragma once

#include <cstddef>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "common/stats/perf_gate.h"
#include "qualification/run_types.h"

namespace kiln::qualification {

// From recorded run reports (kiln.qualification-run/1, in record order): every model entry's
// first-measurement and confirmation baseline samples, one batch each, at most the `max_batches`
// newest per pair. Entries without samples, and malformed ones, are skipped: a report that cannot
// be read only costs the estimate some samples.
BaselineHistory baseline_history(const std::vector<nlohmann::json>& reports, std::size_t max_batches);

// A pair's plan: its noise from its recorded batches (none: the prior), then plan_sequential.
// Broken records (a non-positive sample) are left out and the prior used; `note` says so.
stats::SequentialPlan plan_for_pair(const std::vector<std::vector<double>>& batches,
                                    const stats::PerfGateOptions& options, std::string* note);

}  // namespace kiln::qualification

// The evidence a run writes into its reports and tickets: the gate's and triage's figures as JSON,
// and one-line descriptions of a comparison for people.
#pragma once

#include <string>

#include <nlohmann/json_fwd.hpp>

#include "common/stats/perf_gate.h"
#include "qualification/triage.h"

namespace kiln::qualification {

std::string percent(double fraction);  // "+2.50%"

nlohmann::json to_json(const stats::Comparison& comparison);
nlohmann::json to_json(const stats::ModelGateOutcome& outcome);
nlohmann::json to_json(const TriageAction& action);

// "throughput -3.05% (99.9% interval -3.9% .. -2.2%, p 1.2e-05, 10 vs 10 samples)".
std::string describe_comparison(const stats::Comparison& comparison, double p_value);
// A sequential plan for people: the noise estimate and where it came from, the repeats chosen.
std::string describe_plan(const stats::SequentialPlan& plan);
// The first measurement (BH-adjusted p), the confirmation rerun and what became of a regression;
// under the sequential rule the look it stopped at, its statistic and bound, and the plan.
std::string describe_outcome(const stats::ModelGateOutcome& outcome);

}  // namespace kiln::qualification

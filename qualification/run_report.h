// A run's report for people and machines: JSON (kiln.qualification-run/1), a summary and JUnit.
#pragma once

#include <string>

#include <nlohmann/json_fwd.hpp>

#include "common/error.h"
#include "qualification/run_types.h"

namespace kiln::qualification {

nlohmann::json to_json(const RunReport& report);
// A few lines for people: counts by verdict, each failure with its culprit and ticket.
std::string summary_text(const RunReport& report);
// JUnit XML for CI: one testsuite per revision, one testcase per model (classname = tier),
// <failure> for verdicts that fail the run, <skipped/> for skipped.
std::string to_junit_xml(const RunReport& report);
// Back from to_json what the summary and JUnit show: the run, each model's verdict, detail,
// owner, nodes, tickets, duration and measure job, the tickets, the reproducibility reruns and the
// bisections under way (not the gate, triage, bisection or rerun comparison evidence). A client that follows a run the qualifier drives reads its report this way.
Result<RunReport> report_outline_from_json(const nlohmann::json& document);

// How many rounds the size of its measure job a model's performance gate took, from its entry in
// a report's "models": the first measurement, the extra rounds (looks) after it, and a
// confirmation rerun with its own extra rounds. 1 when the entry has no gate outcome. What a
// model's night costs is its measure job's chip-hours times this.
int gate_rounds(const nlohmann::json& model_entry);

}  // namespace kiln::qualification

// A run's report for people and machines: JSON (kiln.qualification-run/1), a summary and JUnit.
#pragma once

#include <string>

#include <nlohmann/json_fwd.hpp>

#include "coordinator/qualification/run_types.h"

namespace kiln::qualification {

nlohmann::json to_json(const RunReport& report);
// A few lines for people: counts by verdict, each failure with its culprit and ticket.
std::string summary_text(const RunReport& report);
// JUnit XML for CI: one testsuite per revision, one testcase per model (classname = tier),
// <failure> for verdicts that fail the run, <skipped/> for skipped.
std::string to_junit_xml(const RunReport& report);

}  // namespace kiln::qualification

// A plan as people read it and as JSON (docs/strategy.md and docs/cli.md list its fields). Pure.
#pragma once

#include <string>
#include <vector>

#include "strategy/matrix.h"
#include "strategy/planner.h"

namespace kiln::strategy {

// The chosen cells (reason, chip-hours, risk, age, values), the riskiest skipped ones, then the
// figures: chip-hours of the budget, pairs covered, risk covered, rotation, and the notes.
std::string plan_text(const Matrix& matrix, const Plan& plan);
// The same as a JSON document; `sources` says where costs and risks came from (records, file).
std::string plan_json_text(const Matrix& matrix, const Plan& plan, const std::vector<std::string>& sources);

}  // namespace kiln::strategy

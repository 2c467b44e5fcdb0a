// The state file of `kiln plan --state FILE` (docs/strategy.md, "Rotation across nights"):
// which night each cell last ran, by its values, so that rotation works across nights and
// survives a matrix whose factors are reordered or gain values. JSON text in and out; pure.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include "common/error.h"
#include "strategy/matrix.h"
#include "strategy/planner.h"

namespace kiln::strategy {

struct PlanState {
  std::int64_t first_night = 0;  // 0: nothing recorded yet
  std::int64_t last_night = 0;
  // A cell's values by factor name -> the last night it ran.
  std::map<std::map<std::string, std::string>, std::int64_t> last_run;
};

// An empty text is an empty state (a file about to be made).
Result<PlanState> parse_plan_state(std::string_view text, std::string_view source);
std::string plan_state_text(const PlanState& state);

// The history of the matrix's cells in the state; cells no longer in the matrix are left out.
NightHistory history_of(const PlanState& state, const Matrix& matrix);
// Records the plan's cells as run on its night. The night must come after the last recorded.
Status record_plan(PlanState& state, const Matrix& matrix, const Plan& plan, std::string_view source);

}  // namespace kiln::strategy

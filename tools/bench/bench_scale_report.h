// What kiln-bench-scale prints: each fleet size's coordinator run beside its echo run, as JSON
// (--json) or as text, with the medians over repeats and the extrapolation to 10,000 agents.
#pragma once

#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "tools/bench/bench_scale_run.h"

namespace kiln::bench {

// One row: the coordinator's run `c` against the echo's `e` under the same fleet.
nlohmann::json row_json(const Run& c, const Run& e);
// The medians of the repeated runs of one fleet size.
nlohmann::json medians_json(const std::vector<std::pair<Run, Run>>& pairs);
void print_text(const std::vector<std::pair<Run, Run>>& rows, const nlohmann::json& medians,
                const nlohmann::json& extrapolation, const Placement& placement);

}  // namespace kiln::bench

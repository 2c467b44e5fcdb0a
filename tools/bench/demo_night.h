// A qualification night of any size, made from a real nightly's report: data/demo-night.json is
// the demo's 60-model night on two revisions (KILN_DEMO_NODES_PER_REVISION=4 KILN_DEMO_MODELS=60,
// every model run failing and bisected), its header and seven of its model runs of each kind and
// size. For the test and the benchmark of a night of 1,000 model runs (docs/performance.md, "Run
// records").
#pragma once

#include <cstddef>
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "common/error.h"

namespace kiln::bench {

// data/demo-night.json under the source tree.
Result<nlohmann::json> read_demo_night(const std::filesystem::path& source_root);

// A night of `model_runs` model runs, run id `run_id`: the demo's model runs in turn, each a model
// of its own (the demo model's name and a number) on one of three revisions (a, b, c: three
// hardware generations), its detail naming it and its figures varied; the demo's header, with the
// counts, verdict and summary a run writes for them.
nlohmann::json night_of(const nlohmann::json& demo, const std::string& run_id, std::size_t model_runs);

}  // namespace kiln::bench

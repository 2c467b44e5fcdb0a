// Run reports for the page tests, made the way a run makes them (the qualification library's
// types through its to_json), so the pages are tested against what a run really records.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "qualification/run_types.h"

namespace kiln::testing {

struct SampleRun {
  std::string run_id = "nightly-2";
  TimeMs started_at_ms = 1'800'000'000'000;
  std::string model = "mlp-bf16-it";
  std::string owner_team = "recsys-models";
  std::string ticket_title = "mlp-bf16-it is 3% slower since k3";
  std::string culprit = "k3";
  bool training = true;  // a second model, train-tiny-it, with its loss curve and eval
};

// A finished, failed nightly on revision a: the model a confirmed performance regression
// bisected to the culprit (its ticket filed), and the training model correct.
qualification::RunReport sample_report(const SampleRun& run = {});
nlohmann::json sample_json(const SampleRun& run = {});

// The same report as a kiln from before the pages wrote it: no samples, training, bundles,
// candidates, rounds, reason.
nlohmann::json as_old_report(nlohmann::json report);

// The SVG element whose id is `id` ("" when the page has none), and how often `needle` occurs.
std::string svg_with_id(const std::string& page, const std::string& id);
std::size_t occurrences(std::string_view text, std::string_view needle);

}  // namespace kiln::testing

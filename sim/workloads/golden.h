// Golden references of the simulated models, and the comparison of a chip's run with them.
// A golden is the fp32 run of a model for one data seed, kept in a folder:
//   DIR/<model>.golden.json    model, dtype, data seed, output names; training: the reference
//                              loss curve (every 5 steps) and eval score
//   DIR/<model>.safetensors    the fp32 outputs (inference models)
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "sim/workloads/models.h"

namespace kiln::sim::workloads {

struct Golden {
  std::string model;
  std::uint64_t data_seed = 0;
  std::vector<numerics::NamedTensor> outputs;
  std::vector<LossPoint> loss_curve;
  std::optional<double> eval_score;
};

Status write_golden(const std::filesystem::path& dir, const ModelSpec& spec, std::uint64_t data_seed,
                    const ModelRun& reference);

// Refuses a golden of another model or another data seed: it would compare unrelated numbers.
Result<Golden> read_golden(const std::filesystem::path& dir, const ModelSpec& spec, std::uint64_t data_seed);

struct Correctness {
  bool passed = false;
  nlohmann::json document;  // the result document's "correctness" object
};

// Each output compared with kiln_numerics::compare under the model's tolerance (and top-k
// agreement for logits); training: the loss-curve band and the eval gate.
Result<Correctness> check_correctness(const ModelSpec& spec, const Golden& golden, const ModelRun& actual);

nlohmann::json loss_curve_to_json(const std::vector<LossPoint>& curve);

}  // namespace kiln::sim::workloads

// The simulated workloads' model registry: what each model is, which kernels ("components")
// it uses, the format it computes in, its size class and its nominal throughput per hardware
// revision. Pure data, so impact-based test selection can ask which models a changed kernel
// touches without running anything. `kiln-workload-model --list --json` prints the same.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace kiln::sim::workloads {

enum class ModelKind { inference, training };
std::string_view to_string(ModelKind kind);

struct ModelSpec {
  std::string name;               // "mlp-bf16"
  ModelKind kind = ModelKind::inference;
  std::string dtype;              // canonical kiln_numerics name: "bf16", "fp8_e4m3"
  std::vector<std::string> components;  // kernels it runs: "gemm-bf16", "softmax", ...
  std::string size_class;         // "tiny" or "small": how long it keeps a chip
  std::string throughput_unit;    // "samples/s" or "tokens/s"
  double base_throughput_rev_a = 0;  // nominal steady throughput of one healthy chip
  double base_throughput_rev_b = 0;
  double items_per_iteration = 0;    // work of one benchmark iteration, in the unit's items
  std::string description;

  double base_throughput(std::string_view revision) const;  // "a" or "b"
};

const std::vector<ModelSpec>& model_registry();
const ModelSpec* find_model(std::string_view name);

// Names of the models that use a component, for impact-based selection.
std::vector<std::string> models_using(std::string_view component);

nlohmann::json to_json(const ModelSpec& spec);
nlohmann::json registry_to_json();

}  // namespace kiln::sim::workloads

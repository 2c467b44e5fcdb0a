#include "sim/workloads/registry.h"

#include <algorithm>

#include <nlohmann/json.hpp>

namespace kiln::sim::workloads {

std::string_view to_string(ModelKind kind) {
  return kind == ModelKind::training ? "training" : "inference";
}

double ModelSpec::base_throughput(std::string_view revision) const {
  return revision == "b" ? base_throughput_rev_b : base_throughput_rev_a;
}

const std::vector<ModelSpec>& model_registry() {
  // Revision b is about 1.6 times revision a (its compute figures in sim/chip/model.h); fp8
  // runs about 1.75 times bf16. items_per_iteration keeps one iteration near 3 ms of
  // simulated time, so a whole benchmark job takes well under a few seconds.
  static const std::vector<ModelSpec> registry = {
      {"mlp-bf16", ModelKind::inference, "bf16", {"gemm-bf16", "gelu"}, "tiny", "samples/s",
       24000, 39000, 64, "two-layer MLP (256-512-256), bf16 weights and activations, fp32 accumulation"},
      {"mlp-fp8", ModelKind::inference, "fp8_e4m3", {"gemm-fp8", "quantize-fp8", "gelu"}, "tiny",
       "samples/s", 42000, 70000, 128,
       "two-layer MLP (256-512-256), E4M3 weights and gemm inputs with per-tensor scales, fp32 "
       "accumulation, bf16 outputs"},
      {"transformer-block-bf16", ModelKind::inference, "bf16",
       {"embedding", "layernorm", "gemm-bf16", "attention", "softmax", "gelu"}, "small", "tokens/s",
       180000, 295000, 512,
       "one pre-norm transformer block (d 64, 2 heads, causal, vocab 256) with tied-embedding logits, bf16"},
      {"transformer-block-fp8", ModelKind::inference, "fp8_e4m3",
       {"embedding", "layernorm", "gemm-fp8", "quantize-fp8", "gemm-bf16", "attention", "softmax", "gelu"}, "small",
       "tokens/s", 310000, 505000, 1024,
       "the transformer block with E4M3 gemm inputs (per-tensor scales) for its projections and MLP, fp32 "
       "accumulation, bf16 outputs; attention scores and the tied-embedding logits stay bf16 gemms"},
      {"train-tiny", ModelKind::training, "bf16",
       {"gemm-bf16", "gelu", "softmax", "cross-entropy", "sgd"}, "tiny", "samples/s", 40000, 65000, 128,
       "trains a 16-32-4 MLP classifier for 100 SGD steps (batch 128) in bf16 with fp32 master weights; "
       "loss curve every 5 steps and held-out accuracy"},
  };
  return registry;
}

const ModelSpec* find_model(std::string_view name) {
  const auto& registry = model_registry();
  auto it = std::find_if(registry.begin(), registry.end(), [&](const ModelSpec& m) { return m.name == name; });
  return it == registry.end() ? nullptr : &*it;
}

std::vector<std::string> models_using(std::string_view component) {
  std::vector<std::string> names;
  for (const auto& model : model_registry()) {
    if (std::find(model.components.begin(), model.components.end(), component) != model.components.end()) {
      names.push_back(model.name);
    }
  }
  return names;
}

nlohmann::json to_json(const ModelSpec& spec) {
  return {{"name", spec.name},
          {"kind", to_string(spec.kind)},
          {"dtype", spec.dtype},
          {"components", spec.components},
          {"size_class", spec.size_class},
          {"throughput_unit", spec.throughput_unit},
          {"base_throughput", {{"a", spec.base_throughput_rev_a}, {"b", spec.base_throughput_rev_b}}},
          {"items_per_iteration", spec.items_per_iteration},
          {"description", spec.description}};
}

nlohmann::json registry_to_json() {
  nlohmann::json models = nlohmann::json::array();
  for (const auto& model : model_registry()) models.push_back(to_json(model));
  return {{"models", models}};
}

}  // namespace kiln::sim::workloads

// The simulated software stack: how a stack bundle changes what the workloads measure. The
// qualification engineer generates one TOML file per bundle and the workload reads the one
// named by KILN_SIM_STACK_EFFECTS (docs/workloads.md):
//
//   [throughput]          # per-model factor on steady throughput (1 = no change)
//   default = 1.0
//   "mlp-bf16" = 0.97     # a 3% regression
//   [numerics]
//   kernels = ["gemm-bf16"]   # these kernels' rounding is broken: correctness fails
#pragma once

#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

#include "common/error.h"

namespace kiln::sim::workloads {

struct StackEffects {
  std::string source;  // the file it came from, "" for none
  double default_throughput_factor = 1.0;
  std::map<std::string, double> throughput_factors;  // model name -> factor
  std::set<std::string> faulty_kernels;

  double throughput_factor(std::string_view model) const;
};

// Model names must be in the registry and kernels among the registry's components, so a typo
// in a generated file is an error rather than an effect that silently never applies.
// Factors are in (0, 10].
Result<StackEffects> parse_stack_effects(std::string_view toml_text, std::string_view source);
Result<StackEffects> read_stack_effects_file(const std::filesystem::path& path);

nlohmann::json to_json(const StackEffects& effects);

}  // namespace kiln::sim::workloads

// The qualification tests' model set and change history: small models of the sim's workloads,
// and six changes of which k3 slows mlp-fp8 and k5 breaks gemm-bf16.
#pragma once

namespace kiln::testing {

inline constexpr const char* kModelSet = R"(
[[model]]
name = "mlp-bf16-it"
size_class = "small"
chips = 1
minutes = 1
components = ["gemm-bf16", "gelu"]
owner_team = "recsys-models"
workload = "mlp-bf16"
seed = 3
presubmit_default = true

[[model]]
name = "mlp-fp8-it"
size_class = "small"
chips = 1
minutes = 1
components = ["gemm-fp8", "quantize-fp8", "gelu"]
owner_team = "recsys-models"
workload = "mlp-fp8"
seed = 4

[[model]]
name = "mlp-fp8-wide"
size_class = "medium"
chips = 16
minutes = 1
components = ["gemm-fp8", "quantize-fp8", "gelu"]
owner_team = "recsys-models"
workload = "mlp-fp8"
seed = 5
proxy = "mlp-fp8-it"
)";

inline constexpr const char* kHistory = R"(
[[change]]
id = "k1"
layer = "runtime"
owner_team = "runtime-team"
components = []

[[change]]
id = "k2"
layer = "kernels"
owner_team = "kernels-team"
components = ["gelu"]

[[change]]
id = "k3"
layer = "compiler"
owner_team = "compiler-team"
components = ["gemm-fp8"]
[change.sim_effect]
throughput = { "mlp-fp8" = 0.9 }

[[change]]
id = "k4"
layer = "driver"
owner_team = "driver-team"
components = []

[[change]]
id = "k5"
layer = "kernels"
owner_team = "kernels-team"
components = ["gemm-bf16"]
[change.sim_effect]
breaks_kernels = ["gemm-bf16"]

[[change]]
id = "k6"
layer = "framework"
owner_team = "framework-team"
components = []
)";

}  // namespace kiln::testing

// The qualification set: the models the nightly runs, what each declares it uses (for
// impact-based selection), its cost in chips and minutes, its cheaper proxy for bisection, its
// eval threshold and its owner. Loaded from TOML:
//
//   [[model]]
//   name = "llm-medium-03"
//   size_class = "medium"            # small | medium | large
//   chips = 8
//   minutes = 20
//   components = ["embedding", "gemm-bf16", "attention"]
//   proxy = "llm-small-03"           # optional: a smaller config of the same model
//   eval_threshold = 0.99            # optional: eval >= this x reference (default 0.99)
//   owner_team = "llm-models"
//   workload = "transformer-block-bf16"  # optional: the workload that computes it
//   seed = 17                        # optional: KILN_SEED of its jobs (default 1)
//   data_seed = 1                    # optional: weights and inputs (default 1; the goldens' seed)
//   presubmit_default = true         # optional: in the default smoke set (default false)
//   repeats = 20                     # optional benchmark settings of its jobs (defaults: the
//   warmup_min = 5                   #   run's repeats; warmup 5 to 200 iterations until the
//   warmup_max = 200                 #   last 5 agree within 3%: common/benchmark_settings.h)
//   steady_window = 5
//   steady_tolerance = 0.03
//
// The demo set (60 models sized as ../shared/scenarios/ci-day.toml says) is
// generate_demo_model_set(sim_workload_catalog()); qualification/data/qualification-set.toml is its TOML.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/benchmark_settings.h"
#include "common/enum_names.h"
#include "common/error.h"

namespace kiln::qualification {

enum class SizeClass { small, medium, large };
constexpr EnumTable<SizeClass, 3> enum_names(SizeClass) {
  return {{
      {SizeClass::small, "small"},
      {SizeClass::medium, "medium"},
      {SizeClass::large, "large"},
  }};
}
inline std::string_view to_string(SizeClass value) { return enum_name(value); }
inline std::optional<SizeClass> size_class_from_string(std::string_view name) { return enum_from_name<SizeClass>(name); }

inline constexpr double kDefaultEvalThreshold = 0.99;

// How a model's benchmark jobs warm up and how many timed repeats they take (docs/workloads.md).
// A noisy model asks for more repeats; a slow-to-settle one for a longer warmup.
struct BenchmarkDefaults {
  std::optional<std::uint32_t> repeats;  // per side, first measurement; else the run's setting
  // kiln's one set of defaults (common/benchmark_settings.h).
  std::uint32_t warmup_min = static_cast<std::uint32_t>(kDefaultBenchmarkSettings.warmup_min);
  std::uint32_t warmup_max = static_cast<std::uint32_t>(kDefaultBenchmarkSettings.warmup_max);
  std::uint32_t steady_window = static_cast<std::uint32_t>(kDefaultBenchmarkSettings.steady_window);
  double steady_tolerance = kDefaultBenchmarkSettings.steady_tolerance;
};

struct QualificationModel {
  std::string name;
  SizeClass size_class = SizeClass::small;
  int chips = 1;
  int minutes = 10;
  std::vector<std::string> components;
  std::optional<std::string> proxy;
  double eval_threshold = kDefaultEvalThreshold;
  std::string owner_team;
  std::optional<std::string> workload;  // a workload of the fleet's catalog (workload_catalog.h)
  std::uint64_t seed = 1;
  std::uint64_t data_seed = 1;
  bool presubmit_default = false;
  BenchmarkDefaults benchmark;
};

struct ModelSet {
  std::vector<QualificationModel> models;

  const QualificationModel* find(std::string_view name) const;
  // The model a bisection probe runs: the declared proxy, else the model itself. nullptr for an
  // unknown name.
  const QualificationModel* probe_model_for(std::string_view name) const;
};

// Names unique and non-empty; benchmark settings as the agent accepts them (repeats 1 to 1000,
// warmup_min <= warmup_max <= 1000, steady_window >= 2, steady_tolerance in (0, 1)); size class, chips > 0, minutes > 0, eval_threshold in (0, 1],
// owner_team and components non-empty; a proxy names another model of the set that is not
// larger and uses no more chips. Workloads are checked against the fleet's catalog apart
// (check_workloads, workload_catalog.h): the set does not know what the fleet runs.
Status validate(const ModelSet& set);

// `source` names the text in errors ("qualification-set.toml:12:3: ...").
Result<ModelSet> parse_model_set(std::string_view toml_text, std::string_view source);
Result<ModelSet> load_model_set_file(const std::filesystem::path& path);

// TOML that parse_model_set reads back to the same set.
std::string to_toml(const ModelSet& set);

class WorkloadCatalog;

// The demo set: 40 small (1 chip, 10 min), 14 medium (8 chips, 20 min), 6 large (32 chips,
// 45 min), computed by the sim's workloads (`catalog` is sim_workload_catalog(),
// sim/workloads/catalog.h; several entries per workload, with their own seeds). Medium and large
// models declare a small proxy of the same workload; one small model per workload is in the
// default presubmit set.
ModelSet generate_demo_model_set(const WorkloadCatalog& catalog);

// Where the checked-in demo set lives, relative to the repository root.
inline constexpr std::string_view kDemoModelSetPath = "qualification/data/qualification-set.toml";

}  // namespace kiln::qualification

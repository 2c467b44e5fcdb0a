// Impact-based test selection (DESIGN.md principle 6: test at the cheapest tier that can catch
// the bug). A change selects the models whose declared components meet what it touched, with
// per-layer rules; the presubmit smoke then keeps a handful of small models, highest risk first.
// Pure and deterministic: the same inputs always give the same models in the same order.
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "common/enum_names.h"
#include "records/change.h"
#include "qualification/model_set.h"

namespace kiln::qualification {

enum class SelectionReason {
  components,     // the model uses a component the change touched
  hardware_path,  // runtime, driver or firmware: everything on the chip is affected
  model_change,   // the change is to this model itself
  default_set,    // nothing matched: the default smoke set
};
constexpr EnumTable<SelectionReason, 4> enum_names(SelectionReason) {
  return {{
      {SelectionReason::components, "components"},
      {SelectionReason::hardware_path, "hardware_path"},
      {SelectionReason::model_change, "model_change"},
      {SelectionReason::default_set, "default_set"},
  }};
}
inline std::string_view to_string(SelectionReason value) { return enum_name(value); }

struct SelectedModel {
  std::string name;
  SelectionReason reason = SelectionReason::components;
  std::vector<std::string> matched_components;  // touched components the model uses
};

// Layer rules:
//   runtime, driver, firmware  every model (they sit under every kernel on the chip)
//   model                      the models named in the change's components (a model's name, or
//                              its workload: every config of that model)
//   framework, compiler, kernels  the models using a touched component
// No match (or nothing touched): the models marked presubmit_default, reason default_set.
// Models come in the set's order.
std::vector<SelectedModel> select_for_change(const Change& change, const ModelSet& set);

struct PresubmitOptions {
  std::size_t max_models = 4;  // ci-day.toml [presubmit] models
  // Failures per model in a recent window, from the store: a model that has failed recently
  // is a higher risk. Optional.
  std::map<std::string, int> recent_failures;
};

// The handful for a presubmit smoke: every selected model is replaced by its probe model (its
// declared proxy, when it has one) and only small models are kept; then, greedily, the next pick
// is the one that covers the most touched components not yet covered, then a workload not yet
// picked, then the most matched components, the most recent failures, the fewest chip-minutes,
// and the name. At most max_models; never empty while the set has a small model (falls back to
// the default set, then to the first small models).
std::vector<SelectedModel> select_presubmit(const Change& change, const ModelSet& set,
                                            const PresubmitOptions& options);

}  // namespace kiln::qualification

#include "qualification/selection.h"

#include <algorithm>
#include <set>
#include <tuple>

namespace kiln::qualification {

namespace {

bool touches_everything(Layer layer) {
  return layer == Layer::runtime || layer == Layer::driver || layer == Layer::firmware;
}

std::vector<std::string> matched(const Change& change, const QualificationModel& model) {
  std::vector<std::string> out;
  for (const auto& component : model.components) {
    if (std::find(change.components.begin(), change.components.end(), component) != change.components.end()) {
      out.push_back(component);
    }
  }
  return out;
}

std::vector<SelectedModel> default_set(const ModelSet& set) {
  std::vector<SelectedModel> out;
  for (const auto& model : set.models) {
    if (model.presubmit_default) out.push_back({model.name, SelectionReason::default_set, {}});
  }
  return out;
}

}  // namespace

std::vector<SelectedModel> select_for_change(const Change& change, const ModelSet& set) {
  std::vector<SelectedModel> out;
  for (const auto& model : set.models) {
    if (touches_everything(change.layer)) {
      out.push_back({model.name, SelectionReason::hardware_path, matched(change, model)});
    } else if (change.layer == Layer::model) {
      const auto& touched = change.components;
      const bool named = std::find(touched.begin(), touched.end(), model.name) != touched.end() ||
                         (model.workload && std::find(touched.begin(), touched.end(), *model.workload) != touched.end());
      if (named) out.push_back({model.name, SelectionReason::model_change, {}});
    } else if (auto components = matched(change, model); !components.empty()) {
      out.push_back({model.name, SelectionReason::components, std::move(components)});
    }
  }
  return out.empty() ? default_set(set) : out;
}

std::vector<SelectedModel> select_presubmit(const Change& change, const ModelSet& set,
                                            const PresubmitOptions& options) {
  // Replace each selected model by the small model that probes it, keeping the first reason.
  std::vector<SelectedModel> candidates;
  auto add_small = [&](const SelectedModel& selected) {
    const QualificationModel* probe = set.probe_model_for(selected.name);
    if (probe == nullptr || probe->size_class != SizeClass::small) return;
    const bool seen = std::any_of(candidates.begin(), candidates.end(),
                                  [&](const SelectedModel& c) { return c.name == probe->name; });
    if (seen) return;
    SelectedModel candidate = selected;
    candidate.name = probe->name;
    if (candidate.reason != SelectionReason::model_change && candidate.reason != SelectionReason::default_set) {
      candidate.matched_components = matched(change, *probe);
    }
    candidates.push_back(std::move(candidate));
  };
  for (const auto& selected : select_for_change(change, set)) add_small(selected);
  if (candidates.empty()) {
    for (const auto& selected : default_set(set)) add_small(selected);
  }
  if (candidates.empty()) {
    for (const auto& model : set.models) add_small({model.name, SelectionReason::default_set, {}});
  }

  std::set<std::string> covered_components;
  std::set<std::string> picked_workloads;
  std::vector<SelectedModel> picks;
  auto failures_of = [&](const std::string& name) {
    auto it = options.recent_failures.find(name);
    return it == options.recent_failures.end() ? 0 : it->second;
  };
  while (picks.size() < options.max_models && !candidates.empty()) {
    auto rank = [&](const SelectedModel& candidate) {
      const QualificationModel& model = *set.find(candidate.name);
      int new_components = 0;
      for (const auto& component : candidate.matched_components) new_components += covered_components.count(component) == 0;
      const std::string workload = model.workload.value_or(model.name);
      const bool new_workload = picked_workloads.count(workload) == 0;
      // Larger is riskier; the last two entries prefer cheap models, then the name.
      return std::make_tuple(new_components, new_workload, static_cast<int>(candidate.matched_components.size()),
                             failures_of(candidate.name), -model.chips * model.minutes);
    };
    auto best = candidates.begin();
    for (auto it = std::next(candidates.begin()); it != candidates.end(); ++it) {
      const auto a = rank(*it);
      const auto b = rank(*best);
      if (a > b || (a == b && it->name < best->name)) best = it;
    }
    const QualificationModel& model = *set.find(best->name);
    covered_components.insert(best->matched_components.begin(), best->matched_components.end());
    picked_workloads.insert(model.workload.value_or(model.name));
    picks.push_back(std::move(*best));
    candidates.erase(best);
  }
  return picks;
}

}  // namespace kiln::qualification

#include <doctest/doctest.h>

#include <algorithm>
#include <set>

#include "qualification/selection.h"
#include "sim/workloads/catalog.h"

namespace q = kiln::qualification;

namespace {

q::ModelSet demo_set() { return q::generate_demo_model_set(kiln::sim::workloads::sim_workload_catalog()); }

q::Change change(q::Layer layer, std::vector<std::string> components) {
  return {"c1", layer, "team", std::move(components), 0, "", std::nullopt};
}

std::vector<std::string> names(const std::vector<q::SelectedModel>& selected) {
  std::vector<std::string> out;
  for (const auto& s : selected) out.push_back(s.name);
  return out;
}

std::size_t count_using(const q::ModelSet& set, const std::string& component) {
  return static_cast<std::size_t>(std::count_if(set.models.begin(), set.models.end(), [&](const auto& m) {
    return std::find(m.components.begin(), m.components.end(), component) != m.components.end();
  }));
}

}  // namespace

TEST_CASE("a kernel change selects exactly the models using that kernel") {
  const auto set = demo_set();
  const auto selected = q::select_for_change(change(q::Layer::kernels, {"gemm-fp8"}), set);
  CHECK(selected.size() == count_using(set, "gemm-fp8"));
  for (const auto& s : selected) {
    CHECK(s.reason == q::SelectionReason::components);
    CHECK(s.matched_components == std::vector<std::string>{"gemm-fp8"});
    CHECK(set.find(s.name)->workload.value().find("fp8") != std::string::npos);
  }
}

TEST_CASE("firmware, driver and runtime changes select every model; model changes only that model") {
  const auto set = demo_set();
  for (q::Layer layer : {q::Layer::firmware, q::Layer::driver, q::Layer::runtime}) {
    const auto selected = q::select_for_change(change(layer, {}), set);
    CHECK(selected.size() == set.models.size());
    CHECK(selected.front().reason == q::SelectionReason::hardware_path);
  }
  const auto one = q::select_for_change(change(q::Layer::model, {"train-tiny-large-02"}), set);
  CHECK(names(one) == std::vector<std::string>{"train-tiny-large-02"});
  CHECK(one.front().reason == q::SelectionReason::model_change);
  // Naming the workload selects every config of that model.
  const auto all_configs = q::select_for_change(change(q::Layer::model, {"mlp-fp8"}), set);
  CHECK(all_configs.size() == 8 + 3);
}

TEST_CASE("a change that touches nothing a model declares gets the default set") {
  const auto set = demo_set();
  const auto selected = q::select_for_change(change(q::Layer::compiler, {"conv2d"}), set);
  REQUIRE(selected.size() == 5);
  for (const auto& s : selected) {
    CHECK(s.reason == q::SelectionReason::default_set);
    CHECK(set.find(s.name)->presubmit_default);
  }
}

TEST_CASE("presubmit keeps a bounded handful of small models, covering the touched kernels first") {
  const auto set = demo_set();
  q::PresubmitOptions options;
  const auto picks = q::select_presubmit(change(q::Layer::kernels, {"attention", "sgd"}), set, options);
  REQUIRE(picks.size() == 4);
  std::set<std::string> workloads;
  std::set<std::string> covered;
  for (const auto& pick : picks) {
    const auto* model = set.find(pick.name);
    CHECK(model->size_class == q::SizeClass::small);
    workloads.insert(*model->workload);
    covered.insert(pick.matched_components.begin(), pick.matched_components.end());
  }
  CHECK(covered == std::set<std::string>{"attention", "sgd"});
  CHECK(workloads.size() == 3);  // transformer bf16 and fp8 (attention) and train-tiny (sgd), then repeats
  // Deterministic.
  CHECK(names(q::select_presubmit(change(q::Layer::kernels, {"attention", "sgd"}), set, options)) == names(picks));

  options.max_models = 2;
  CHECK(q::select_presubmit(change(q::Layer::firmware, {}), set, options).size() == 2);
}

TEST_CASE("presubmit prefers the model that failed recently among equals") {
  const auto set = demo_set();
  q::PresubmitOptions options;
  options.max_models = 1;
  const auto plain = q::select_presubmit(change(q::Layer::kernels, {"gemm-fp8"}), set, options);
  REQUIRE(plain.size() == 1);
  options.recent_failures["mlp-fp8-small-05"] = 2;
  const auto risky = q::select_presubmit(change(q::Layer::kernels, {"gemm-fp8"}), set, options);
  REQUIRE(risky.size() == 1);
  CHECK(risky.front().name == "mlp-fp8-small-05");
  CHECK(plain.front().name != "mlp-fp8-small-05");
}

TEST_CASE("a model change to a large model smokes its small proxy") {
  const auto set = demo_set();
  const auto picks = q::select_presubmit(change(q::Layer::model, {"train-tiny-large-01"}), set, {});
  REQUIRE(picks.size() == 1);
  CHECK(picks.front().name == *set.find("train-tiny-large-01")->proxy);
}

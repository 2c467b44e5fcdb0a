#include <cmath>
#include <cstring>

#include <doctest/doctest.h>

#include <algorithm>
#include <fstream>
#include <set>
#include <nlohmann/json.hpp>

#include "agent/bench/outputs.h"
#include "sim/workloads/golden.h"
#include "sim/workloads/models.h"
#include "sim/workloads/registry.h"
#include "sim/workloads/stack_effects.h"
#include "test_support.h"

using namespace kiln::sim::workloads;

namespace {

ModelRun run(const std::string& model, bool reference, ModelRunOptions options = {}) {
  options.reference = reference;
  const ModelSpec* spec = find_model(model);
  REQUIRE(spec != nullptr);
  auto result = run_model(*spec, options);
  REQUIRE(result.has_value());
  return *result;
}

Golden golden_of(const std::string& model, std::uint64_t data_seed = 1) {
  ModelRunOptions options;
  options.data_seed = data_seed;
  ModelRun reference = run(model, true, options);
  Golden g;
  g.model = model;
  g.data_seed = data_seed;
  g.outputs = reference.outputs;
  g.loss_curve = reference.loss_curve;
  g.eval_score = reference.eval_score;
  return g;
}

// Bitwise equality, NaN included (corrupted outputs hold NaNs).
bool same_bits(const std::vector<double>& a, const std::vector<double>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0;
}

Correctness check(const std::string& model, const ModelRun& actual) {
  auto result = check_correctness(*find_model(model), golden_of(model), actual);
  REQUIRE(result.has_value());
  return *result;
}

}  // namespace

TEST_CASE("every inference model agrees with its fp32 golden within tolerance, but never bitwise") {
  for (const std::string model : {"mlp-bf16", "mlp-fp8", "transformer-block-bf16", "transformer-block-fp8"}) {
    CAPTURE(model);
    for (std::uint64_t data_seed : {1u, 2u, 3u}) {
      CAPTURE(data_seed);
      ModelRunOptions options;
      options.data_seed = data_seed;
      const ModelRun chip = run(model, false, options);
      const ModelRun reference = run(model, true, options);
      auto verdict = check_correctness(*find_model(model), golden_of(model, data_seed), chip);
      REQUIRE(verdict.has_value());
      CHECK(verdict->passed);
      REQUIRE(chip.outputs.size() == reference.outputs.size());
      for (std::size_t i = 0; i < chip.outputs.size(); ++i) {
        std::size_t differing = 0;
        for (std::size_t k = 0; k < chip.outputs[i].tensor.values.size(); ++k) {
          differing += chip.outputs[i].tensor.values[k] != reference.outputs[i].tensor.values[k] ? 1 : 0;
        }
        // Honest rounding moves most elements a little.
        CHECK(differing > chip.outputs[i].tensor.values.size() / 2);
      }
    }
  }
}

TEST_CASE("logits report top-k agreement") {
  const auto verdict = check("transformer-block-bf16", run("transformer-block-bf16", false));
  const auto& logits = verdict.document["outputs"][1];
  CHECK(logits["name"] == "logits");
  CHECK(logits["topk_agreement"].get<double>() >= 0.9);
  CHECK(logits["report"]["top_k"] == 5);
}

TEST_CASE("silent data corruption on the chip fails correctness") {
  for (const std::string model : {"mlp-bf16", "transformer-block-fp8", "train-tiny"}) {
    CAPTURE(model);
    ModelRunOptions options;
    options.sdc_rate = 0.01;
    options.sdc_seed = 42;
    const auto verdict = check(model, run(model, false, options));
    CHECK_FALSE(verdict.passed);
    CHECK(verdict.document["passed"] == false);
  }
}

TEST_CASE("a stack-effects numerics fault in a kernel a model uses fails its correctness") {
  auto effects = parse_stack_effects("[numerics]\nkernels = [\"gemm-bf16\", \"gemm-fp8\"]\n", "effects.toml");
  REQUIRE(effects.has_value());
  for (const std::string model : {"mlp-bf16", "mlp-fp8", "transformer-block-bf16", "transformer-block-fp8", "train-tiny"}) {
    CAPTURE(model);
    ModelRunOptions options;
    options.faulty_kernels = effects->faulty_kernels;
    CHECK_FALSE(check(model, run(model, false, options)).passed);
  }
  SUBCASE("a kernel the model does not use changes nothing") {
    ModelRunOptions options;
    options.faulty_kernels = {"gemm-fp8"};
    CHECK(check("mlp-bf16", run("mlp-bf16", false, options)).passed);
  }
}

TEST_CASE("every component a model declares decides its correctness, so impact-based selection can trust the list") {
  for (const auto& spec : model_registry()) {
    const Golden golden = golden_of(spec.name);
    for (const auto& component : spec.components) {
      CAPTURE(spec.name);
      CAPTURE(component);
      ModelRunOptions options;
      options.faulty_kernels = {component};
      auto verdict = check_correctness(spec, golden, run(spec.name, false, options));
      REQUIRE(verdict.has_value());
      CHECK_FALSE(verdict->passed);
    }
  }
}

TEST_CASE("a kernel a model does not declare changes nothing it computes, so selection misses no model") {
  std::set<std::string> every_kernel;
  for (const auto& spec : model_registry()) every_kernel.insert(spec.components.begin(), spec.components.end());
  for (const auto& spec : model_registry()) {
    CAPTURE(spec.name);
    ModelRunOptions undeclared;
    for (const auto& kernel : every_kernel) {
      if (std::find(spec.components.begin(), spec.components.end(), kernel) == spec.components.end()) {
        undeclared.faulty_kernels.insert(kernel);
      }
    }
    const ModelRun clean = run(spec.name, false);
    const ModelRun broken = run(spec.name, false, undeclared);
    REQUIRE(clean.outputs.size() == broken.outputs.size());
    for (std::size_t i = 0; i < clean.outputs.size(); ++i) {
      CAPTURE(clean.outputs[i].name);
      CHECK(clean.outputs[i].tensor.values == broken.outputs[i].tensor.values);
    }
    CHECK(clean.eval_score == broken.eval_score);
    REQUIRE(clean.loss_curve.size() == broken.loss_curve.size());
    for (std::size_t i = 0; i < clean.loss_curve.size(); ++i) CHECK(clean.loss_curve[i].loss == broken.loss_curve[i].loss);
  }
}

TEST_CASE("the chip's run is deterministic under its seeds") {
  ModelRunOptions options;
  options.data_seed = 7;
  options.sdc_rate = 0.01;
  options.sdc_seed = 3;
  const ModelRun a = run("transformer-block-fp8", false, options);
  const ModelRun b = run("transformer-block-fp8", false, options);
  CHECK(same_bits(a.outputs[1].tensor.values, b.outputs[1].tensor.values));
  options.data_seed = 8;
  const ModelRun c = run("transformer-block-fp8", false, options);
  CHECK_FALSE(same_bits(a.outputs[1].tensor.values, c.outputs[1].tensor.values));
}

TEST_CASE("the tiny training run learns, follows its reference curve and reproduces its eval score") {
  const ModelRun chip = run("train-tiny", false);
  REQUIRE(chip.loss_curve.size() == 20);
  CHECK(chip.loss_curve.front().step == 5);
  CHECK(chip.loss_curve.back().step == 100);
  CHECK(chip.loss_curve.back().loss < 0.5 * chip.loss_curve.front().loss);
  for (std::size_t i = 4; i < chip.loss_curve.size(); i += 4) {
    CHECK(chip.loss_curve[i].loss < chip.loss_curve[i - 4].loss);
  }
  REQUIRE(chip.eval_score.has_value());
  CHECK(*chip.eval_score > 0.85);
  const ModelRun again = run("train-tiny", false);
  CHECK(*again.eval_score == *chip.eval_score);
  CHECK(again.loss_curve.back().loss == chip.loss_curve.back().loss);

  const auto verdict = check("train-tiny", chip);
  CHECK(verdict.passed);
  CHECK(verdict.document["training"]["points_outside_band"] == 0);
  CHECK(verdict.document["training"]["eval_passed"] == true);
}

TEST_CASE("training gates: the 5% band, NaN and the eval floor") {
  const std::vector<LossPoint> reference = {{5, 1.0}, {10, 0.8}, {15, 0.6}};
  CHECK(check_training(reference, 0.9, {{5, 1.04}, {10, 0.78}, {15, 0.62}}, 0.9).passed);
  CHECK_FALSE(check_training(reference, 0.9, {{5, 1.0}, {10, 0.8}, {15, 0.65}}, 0.9).loss_curve_passed);
  CHECK_FALSE(check_training(reference, 0.9, {{5, 1.0}, {10, std::nan("")}, {15, 0.6}}, 0.9).passed);
  const auto low_eval = check_training(reference, 0.9, reference, 0.89);
  CHECK_FALSE(low_eval.eval_passed);
  CHECK(low_eval.detail.find("eval score") != std::string::npos);
  CHECK(check_training(reference, 0.9, reference, 0.8911).eval_passed);
}

TEST_CASE("goldens round-trip through their folder and refuse another data seed") {
  kiln::workloads::testing::TempDir dir;
  const ModelSpec& spec = *find_model("mlp-fp8");
  ModelRunOptions options;
  options.reference = true;
  REQUIRE(write_golden(dir.path(), spec, 1, *run_model(spec, options)).has_value());
  auto golden = read_golden(dir.path(), spec, 1);
  REQUIRE(golden.has_value());
  CHECK(golden->outputs.size() == 1);
  CHECK(check_correctness(spec, *golden, run("mlp-fp8", false))->passed);
  auto other = read_golden(dir.path(), spec, 2);
  REQUIRE_FALSE(other.has_value());
  CHECK(other.error().message.find("--data-seed 1") != std::string::npos);
  auto missing = read_golden(dir.path(), *find_model("mlp-bf16"), 1);
  REQUIRE_FALSE(missing.has_value());
  CHECK(missing.error().message.find("--write-golden") != std::string::npos);
}

TEST_CASE("stack-effects files") {
  auto effects = parse_stack_effects(
      "bundle = \"B1\"\n[throughput]\ndefault = 0.99\n\"mlp-bf16\" = 0.97\n[numerics]\nkernels = [\"softmax\"]\n", "s.toml");
  REQUIRE(effects.has_value());
  CHECK(effects->throughput_factor("mlp-bf16") == doctest::Approx(0.97));
  CHECK(effects->throughput_factor("mlp-fp8") == doctest::Approx(0.99));
  CHECK(effects->faulty_kernels == std::set<std::string>{"softmax"});

  auto unknown_model = parse_stack_effects("[throughput]\n\"mlp-bf61\" = 0.9\n", "s.toml");
  REQUIRE_FALSE(unknown_model.has_value());
  CHECK(unknown_model.error().message.find("s.toml:2") != std::string::npos);
  CHECK_FALSE(parse_stack_effects("[throughput]\n\"mlp-bf16\" = -1\n", "s.toml").has_value());
  CHECK_FALSE(parse_stack_effects("[numerics]\nkernels = [\"gemm-int4\"]\n", "s.toml").has_value());
  CHECK_FALSE(parse_stack_effects("[throughput\n", "s.toml").has_value());
  CHECK_FALSE(parse_stack_effects("speed = 2\n", "s.toml").has_value());
  CHECK_FALSE(read_stack_effects_file("/nonexistent/effects.toml").has_value());
}

TEST_CASE("the registry names each model's components for impact-based selection") {
  CHECK(models_using("gemm-fp8") == std::vector<std::string>{"mlp-fp8", "transformer-block-fp8"});
  CHECK(models_using("softmax").size() == 3);
  const auto json = registry_to_json();
  REQUIRE(json["models"].size() == 5);
  for (const auto& m : json["models"]) {
    CHECK(m["base_throughput"]["b"].get<double>() > m["base_throughput"]["a"].get<double>());
    CHECK_FALSE(m["components"].empty());
  }
}

TEST_CASE("a sim golden's tolerances make kiln's comparison of the outputs agree with the model's own check") {
  for (const char* model : {"mlp-bf16", "mlp-fp8"}) {
    CAPTURE(model);
    kiln::workloads::testing::TempDir dir;
    const ModelSpec& spec = *find_model(model);
    REQUIRE(write_golden(dir.path(), spec, 1, run(model, true)).has_value());
    std::ifstream in(dir.path() / (spec.name + ".golden.json"));
    const auto doc = nlohmann::json::parse(in);
    auto golden = read_golden(dir.path(), spec, 1);
    REQUIRE(golden.has_value());
    ModelRunOptions corrupted;
    corrupted.sdc_rate = 0.05;
    corrupted.sdc_seed = 7;
    for (const bool corrupt : {false, true}) {
      const ModelRun actual = corrupt ? run(model, false, corrupted) : run(model, false);
      std::vector<kiln::agent::bench::OutputUnderJudgement> outputs;
      for (const auto& out : actual.outputs) {
        auto tolerance = kiln::agent::bench::parse_golden_tolerance(doc.at("tolerances").at(out.name), out.name);
        REQUIRE(tolerance.has_value());
        REQUIRE(tolerance->dtype.has_value());
        const auto expected = std::find_if(golden->outputs.begin(), golden->outputs.end(),
                                           [&](const auto& g) { return g.name == out.name; });
        REQUIRE(expected != golden->outputs.end());
        outputs.push_back({{out.name, out.name + ".npy", std::nullopt}, expected->tensor, out.tensor,
                           kiln::agent::bench::compare_options_for(*tolerance, *tolerance->dtype)});
      }
      const bool own = check_correctness(spec, *golden, actual)->passed;
      CHECK(own == !corrupt);
      const auto kiln = kiln::agent::bench::judge_outputs(outputs, own);
      CHECK(kiln.outputs_passed == own);
      CHECK(kiln.passed == own);
    }
  }
}

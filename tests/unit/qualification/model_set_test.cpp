#include <doctest/doctest.h>

#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "qualification/model_set.h"
#include "qualification/workload_catalog.h"
#include "sim/workloads/catalog.h"
#include "sim/workloads/registry.h"

namespace q = kiln::qualification;

namespace {

constexpr const char* kTwoModels = R"(
[[model]]
name = "llm-small"
size_class = "small"
chips = 1
minutes = 10
components = ["gemm-bf16", "attention"]
owner_team = "llm-models"
workload = "transformer-block-bf16"

[[model]]
name = "llm-medium"
size_class = "medium"
chips = 8
minutes = 20
components = ["gemm-bf16"]
proxy = "llm-small"
eval_threshold = 0.999
owner_team = "llm-models"
seed = 7
presubmit_default = true
)";

// Loaded, then checked against the sim's workloads as the kiln client does.
std::string error_of(std::string_view text) {
  auto set = q::parse_model_set(text, "set.toml");
  if (!set) return set.error().message;
  auto checked = q::check_workloads(*set, kiln::sim::workloads::sim_workload_catalog());
  return checked ? std::string() : checked.error().message;
}

std::string replace(std::string text, std::string_view from, std::string_view to) {
  const auto at = text.find(from);
  REQUIRE(at != std::string::npos);
  return text.replace(at, from.size(), to);
}

}  // namespace

TEST_CASE("the qualification set loads with its defaults and optional fields") {
  auto set = q::parse_model_set(kTwoModels, "set.toml");
  REQUIRE_MESSAGE(set.has_value(), set.error().message);
  REQUIRE(set->models.size() == 2);
  const auto& small = set->models[0];
  CHECK(small.size_class == q::SizeClass::small);
  CHECK(small.eval_threshold == 0.99);
  CHECK(small.seed == 1);
  CHECK_FALSE(small.proxy.has_value());
  CHECK(small.workload == "transformer-block-bf16");
  const auto& medium = set->models[1];
  CHECK(medium.proxy == "llm-small");
  CHECK(medium.eval_threshold == 0.999);
  CHECK(medium.seed == 7);
  CHECK(medium.presubmit_default);
  CHECK(set->probe_model_for("llm-medium")->name == "llm-small");
  CHECK(set->probe_model_for("llm-small")->name == "llm-small");
  CHECK(set->probe_model_for("nope") == nullptr);

  auto again = q::parse_model_set(q::to_toml(*set), "again.toml");
  REQUIRE(again.has_value());
  CHECK(q::to_toml(*again) == q::to_toml(*set));
}

TEST_CASE("a model's benchmark settings come from the set, with defaults, and round-trip") {
  auto set = q::parse_model_set(replace(kTwoModels, "minutes = 10", "minutes = 10\nrepeats = 20\nwarmup_max = 300\n"
                                                                   "steady_tolerance = 0.02"),
                                "set.toml");
  REQUIRE_MESSAGE(set.has_value(), set.error().message);
  const auto& small = set->models[0];
  CHECK(small.benchmark.repeats == 20u);
  CHECK(small.benchmark.warmup_min == 5);
  CHECK(small.benchmark.warmup_max == 300);
  CHECK(small.benchmark.steady_window == 5);
  CHECK(small.benchmark.steady_tolerance == 0.02);
  CHECK_FALSE(set->models[1].benchmark.repeats.has_value());
  auto again = q::parse_model_set(q::to_toml(*set), "again.toml");
  REQUIRE(again.has_value());
  CHECK(again->models[0].benchmark.warmup_max == 300);
  CHECK(q::to_toml(*again) == q::to_toml(*set));

  CHECK(error_of(replace(kTwoModels, "minutes = 10", "minutes = 10\nrepeats = 0")).find("repeats 1 to 1000") !=
        std::string::npos);
  CHECK(error_of(replace(kTwoModels, "minutes = 10", "minutes = 10\nwarmup_min = 50\nwarmup_max = 10"))
            .find("warmup_min <= warmup_max") != std::string::npos);
  CHECK(error_of(replace(kTwoModels, "minutes = 10", "minutes = 10\nsteady_tolerance = 2.0")).find("steady_tolerance") !=
        std::string::npos);
}

TEST_CASE("mistakes in the qualification set are errors that say where and what") {
  CHECK(error_of("[[model]\n").find("set.toml:1") != std::string::npos);
  CHECK(error_of(replace(kTwoModels, "size_class = \"small\"", "size_class = \"tiny\"")).find("small, medium or large") !=
        std::string::npos);
  CHECK(error_of(replace(kTwoModels, "minutes = 10", "minuets = 10")).find("unknown key 'minuets'") != std::string::npos);
  CHECK(error_of(replace(kTwoModels, "proxy = \"llm-small\"", "proxy = \"llm-smal\"")).find("proxy 'llm-smal'") !=
        std::string::npos);
  CHECK(error_of(replace(kTwoModels, "name = \"llm-medium\"", "name = \"llm-small\"")).find("declared twice") !=
        std::string::npos);
  CHECK(error_of(replace(kTwoModels, "eval_threshold = 0.999", "eval_threshold = 99")).find("eval_threshold") !=
        std::string::npos);
  CHECK(error_of(replace(kTwoModels, "\"gemm-bf16\", \"attention\"", "\"gemm-bf16\", \"gemm-fp8\"")).find("gemm-fp8") !=
        std::string::npos);
  CHECK(error_of(replace(kTwoModels, "workload = \"transformer-block-bf16\"", "workload = \"gpt-5\"")).find("gpt-5") !=
        std::string::npos);
  CHECK(error_of(replace(kTwoModels, "components = [\"gemm-bf16\"]", "components = []")).find("no components") !=
        std::string::npos);
  // A proxy larger than its model is no proxy.
  const std::string swapped = replace(replace(kTwoModels, "proxy = \"llm-small\"", ""), "minutes = 10",
                                      "minutes = 10\nproxy = \"llm-medium\"");
  CHECK(error_of(swapped).find("larger") != std::string::npos);
  CHECK(q::load_model_set_file("/nonexistent/set.toml").error().code == kiln::Errc::io);
}

TEST_CASE("the demo set is the ci-day nightly: 40 small, 14 medium, 6 large on the registry's models") {
  const q::ModelSet set = q::generate_demo_model_set(kiln::sim::workloads::sim_workload_catalog());
  REQUIRE(q::validate(set).has_value());
  REQUIRE(set.models.size() == 60);
  std::map<q::SizeClass, int> counts;
  std::set<std::string> workloads;
  std::set<std::uint64_t> seeds;
  int defaults = 0;
  for (const auto& model : set.models) {
    ++counts[model.size_class];
    const int chips = model.size_class == q::SizeClass::small ? 1 : model.size_class == q::SizeClass::medium ? 8 : 32;
    const int minutes = model.size_class == q::SizeClass::small ? 10 : model.size_class == q::SizeClass::medium ? 20 : 45;
    CHECK(model.chips == chips);
    CHECK(model.minutes == minutes);
    REQUIRE(model.workload.has_value());
    const auto* spec = kiln::sim::workloads::find_model(*model.workload);
    REQUIRE(spec != nullptr);
    CHECK(model.components == spec->components);  // selection sees what the workload really runs
    workloads.insert(*model.workload);
    seeds.insert(model.seed);
    defaults += model.presubmit_default;
    if (model.size_class != q::SizeClass::small) {
      REQUIRE(model.proxy.has_value());
      const auto* proxy = set.find(*model.proxy);
      CHECK(proxy->size_class == q::SizeClass::small);
      CHECK(proxy->workload == model.workload);
    }
  }
  CHECK(counts[q::SizeClass::small] == 40);
  CHECK(counts[q::SizeClass::medium] == 14);
  CHECK(counts[q::SizeClass::large] == 6);
  CHECK(workloads.size() == kiln::sim::workloads::model_registry().size());
  CHECK(seeds.size() == 60);  // entries of one workload differ by seed
  CHECK(defaults == static_cast<int>(workloads.size()));
}

TEST_CASE("the checked-in demo set file is the generator's output and loads") {
  const std::string path = std::string(KILN_SOURCE_DIR) + "/" + std::string(q::kDemoModelSetPath);
  std::ifstream in(path);
  REQUIRE_MESSAGE(in.good(), "missing " << path);
  std::ostringstream text;
  text << in.rdbuf();
  CHECK_MESSAGE(text.str() == q::to_toml(q::generate_demo_model_set(kiln::sim::workloads::sim_workload_catalog())),
                "regenerate it: kiln-qualification-demo-set > " << q::kDemoModelSetPath);
  auto loaded = q::load_model_set_file(path);
  REQUIRE_MESSAGE(loaded.has_value(), loaded.error().message);
  CHECK(loaded->models.size() == 60);
}

#include <doctest/doctest.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "records/change.h"
#include "sim/workloads/stack_effects.h"

namespace q = kiln::qualification;

namespace {

std::vector<q::Change> small_history() {
  return {
      {"c1", q::Layer::compiler, "compiler-team", {"gemm-bf16"}, 1000, "fuse gemm+gelu", std::nullopt},
      {"c2", q::Layer::kernels, "kernels-team", {"softmax"}, 2000, "faster softmax", std::nullopt},
      {"c3", q::Layer::compiler, "compiler-team", {}, 3000, "scheduler tweak", std::nullopt},
      {"c4", q::Layer::model, "llm-models", {"transformer-block-bf16"}, 4000, "new config", std::nullopt},
  };
}

}  // namespace

TEST_CASE("layers round-trip through their names and hardware-path layers are the chip's") {
  for (q::Layer layer : q::kAllLayers) CHECK(q::layer_from_string(q::to_string(layer)) == layer);
  CHECK_FALSE(q::layer_from_string("kernel").has_value());
  CHECK(q::is_hardware_path(q::Layer::firmware));
  CHECK(q::is_hardware_path(q::Layer::kernels));
  CHECK_FALSE(q::is_hardware_path(q::Layer::model));
  CHECK_FALSE(q::is_hardware_path(q::Layer::framework));
}

TEST_CASE("sha256_hex matches the standard test vector") {
  CHECK(q::sha256_hex("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST_CASE("the sim builder derives versions per layer from the changes and hashes the content") {
  const auto history = small_history();
  auto first = q::build_bundle_at(history, 0);
  REQUIRE(first.has_value());
  CHECK(first->change_count == 1);
  CHECK(first->last_change == "c1");
  CHECK(first->versions.compiler == "r1-c1");
  CHECK(first->versions.kernels == "base");
  CHECK(first->model_configs_version == "base");
  CHECK(first->hardware_revisions == std::vector<std::string>{"a", "b"});
  CHECK(first->id.size() == 64);

  auto last = q::build_bundle_at(history, 3);
  REQUIRE(last.has_value());
  CHECK(last->versions.compiler == "r2-c3");
  CHECK(last->versions.kernels == "r1-c2");
  CHECK(last->model_configs_version == "r1-c4");
  CHECK(last->change_count == 4);
  CHECK(last->last_change == "c4");

  // Every prefix is a different bundle; the same prefix is always the same bundle.
  std::set<std::string> ids;
  for (std::size_t i = 0; i < history.size(); ++i) ids.insert(q::build_bundle_at(history, i)->id);
  CHECK(ids.size() == history.size());
  CHECK(q::build_bundle_at(history, 2)->id == q::build_bundle_at(small_history(), 2)->id);
}

TEST_CASE("a bundle's id depends on its content only, not on the order of its revisions") {
  q::Bundle bundle;
  bundle.versions.compiler = "1.2";
  bundle.model_configs_version = "m7";
  bundle.hardware_revisions = {"b", "a", "a"};
  bundle.change_count = 2;
  bundle.last_change = "y";
  const q::Bundle sealed = q::seal(bundle);
  bundle.hardware_revisions = {"a", "b"};
  CHECK(q::seal(bundle).id == sealed.id);
  CHECK(sealed.hardware_revisions == std::vector<std::string>{"a", "b"});

  bundle.last_change = "x";  // where in the history it ends is content
  CHECK(q::seal(bundle).id != sealed.id);
  bundle.last_change = "y";
  bundle.change_count = 3;
  CHECK(q::seal(bundle).id != sealed.id);
  bundle.change_count = 2;
  bundle.versions.firmware = "2.0";
  CHECK(q::seal(bundle).id != sealed.id);
}

TEST_CASE("bundles survive JSON and a tampered record is refused") {
  auto bundle = q::build_bundle_at(small_history(), 2);
  REQUIRE(bundle.has_value());
  auto back = q::bundle_from_json(q::to_json(*bundle));
  REQUIRE(back.has_value());
  CHECK(back->id == bundle->id);
  CHECK(back->change_count == 3);
  CHECK(back->last_change == "c3");
  CHECK(back->versions.compiler == bundle->versions.compiler);
  CHECK(q::to_json(*bundle).at("schema") == "kiln.bundle/2");

  nlohmann::json counted = q::to_json(*bundle);
  counted["last_change"] = "";
  CHECK(q::bundle_from_json(counted).error().message.find("names its last") != std::string::npos);

  nlohmann::json tampered = q::to_json(*bundle);
  tampered["versions"]["driver"] = "9.9";
  auto refused = q::bundle_from_json(tampered);
  REQUIRE_FALSE(refused.has_value());
  CHECK(refused.error().code == kiln::Errc::integrity);
  CHECK_FALSE(q::bundle_from_json(nlohmann::json::array()).has_value());
}

TEST_CASE("a bundle stays the same size however long its history") {
  std::vector<q::Change> history;
  for (int i = 0; i < 20'000; ++i) {
    history.push_back({fmt::format("{:040x}", i), q::Layer::kernels, "kernels-team", {}, 1000 + i, "", std::nullopt});
  }
  const auto early = q::build_bundle_at(history, 9);
  const auto late = q::build_bundle_at(history, 19'999);
  REQUIRE(early.has_value());
  REQUIRE(late.has_value());
  CHECK(late->change_count == 20'000);
  // Only the counts' digits differ (the change count and the kernels' version "r<count>-<id>").
  CHECK(q::to_json(*late).dump().size() <= q::to_json(*early).dump().size() + 2 * 4);
  CHECK(q::to_json(*late).dump().size() < 1024);
}

TEST_CASE("a bundle recorded as kiln.bundle/1, with its change list, is still read and verified") {
  // Written by the kiln before kiln.bundle/2: build_bundle_at(small_history(), 2) as it recorded it.
  const auto listed = nlohmann::json::parse(R"({"changes":["c1","c2","c3"],"hardware_revisions":["a","b"],)"
                                            R"("id":"c579ea2577ca7122b4aeb64730bcb624b653b9f01b99469b78f8314834483e6d",)"
                                            R"("model_configs":"base","schema":"kiln.bundle/1","versions":)"
                                            R"({"compiler":"r2-c3","driver":"base","firmware":"base",)"
                                            R"("framework":"base","kernels":"r1-c2","runtime":"base"}})");
  auto bundle = q::bundle_from_json(listed);
  REQUIRE_MESSAGE(bundle.has_value(), bundle.error().message);
  CHECK(bundle->change_count == 3);
  CHECK(bundle->last_change == "c3");
  CHECK(q::to_json(*bundle) == listed);  // shown and recorded again as it was, under the same id
  CHECK(bundle->id != q::build_bundle_at(small_history(), 2)->id);
  const auto history = small_history();
  auto changes = q::bundle_changes(history, *bundle);
  REQUIRE(changes.has_value());
  CHECK(changes->size() == 3);
  auto candidates = q::changes_between(history, *bundle, *q::build_bundle_at(history, 3));
  REQUIRE(candidates.has_value());
  CHECK(*candidates == std::vector<std::string>{"c4"});

  // Its list must be the history's prefix, as every kiln builder made it.
  nlohmann::json reordered = listed;
  reordered["changes"] = {"c2", "c1", "c3"};
  q::Bundle shuffled = *bundle;
  shuffled.listed_change_ids = {"c2", "c1", "c3"};
  shuffled = q::seal(shuffled);
  CHECK(q::bundle_changes(history, shuffled).error().code == kiln::Errc::invalid_argument);
  reordered["id"] = shuffled.id;
  CHECK(q::bundle_from_json(reordered).has_value());
  CHECK(q::bundle_from_json(nlohmann::json{{"schema", "kiln.bundle/3"}}).error().message.find("kiln.bundle/2") !=
        std::string::npos);
}

TEST_CASE("a bundle's changes are the history's prefix it names, and a bundle of another history is refused") {
  const auto history = small_history();
  const auto bundle = q::build_bundle_at(history, 1);
  auto changes = q::bundle_changes(history, *bundle);
  REQUIRE(changes.has_value());
  REQUIRE(changes->size() == 2);
  CHECK(changes->back().id == "c2");

  auto other = small_history();
  other[1].id = "d2";
  auto refused = q::bundle_changes(other, *bundle);
  REQUIRE_FALSE(refused.has_value());
  CHECK(refused.error().code == kiln::Errc::not_found);
  CHECK(refused.error().message.find("has change d2 there") != std::string::npos);
  CHECK(q::bundle_changes(std::span(history).first(1), *bundle).error().message.find("has only 1 changes") !=
        std::string::npos);
}

TEST_CASE("the sim builder refuses an index past the end, duplicate ids and changes without an owner") {
  auto history = small_history();
  CHECK(q::build_bundle_at(history, 4).error().code == kiln::Errc::invalid_argument);
  history[2].id = "c1";
  CHECK_FALSE(q::build_bundle_at(history, 3).has_value());
  CHECK(q::build_bundle_at(history, 1).has_value());  // the duplicate is not in that prefix
  history = small_history();
  history[0].owner_team.clear();
  CHECK(q::build_bundle_at(history, 0).error().message.find("owner_team") != std::string::npos);
}

TEST_CASE("changes_between gives the bisection candidates in merge order") {
  const auto history = small_history();
  auto good = q::build_bundle_at(history, 0);
  auto bad = q::build_bundle_at(history, 3);
  auto candidates = q::changes_between(history, *good, *bad);
  REQUIRE(candidates.has_value());
  CHECK(*candidates == std::vector<std::string>{"c2", "c3", "c4"});
  CHECK_FALSE(q::changes_between(history, *bad, *good).has_value());
  CHECK_FALSE(q::changes_between(history, *good, *good).has_value());
  auto other = history;
  other[0].id = "d1";
  CHECK(q::changes_between(other, *good, *bad).error().code == kiln::Errc::not_found);
}

TEST_CASE("the stack-effects file for a bundle composes its changes and the workload accepts it") {
  std::vector<q::Change> history = small_history();
  history[0].sim_effect = q::SimChangeEffect{{{"mlp-bf16", 0.97}}, {}, {}};
  history[1].sim_effect = q::SimChangeEffect{{{"mlp-bf16", 0.5}}, {"gemm-bf16"}, {}};
  history[2].sim_effect = q::SimChangeEffect{{}, {"softmax"}, {"gemm-bf16"}};

  auto before = q::sim_stack_effects_toml(history, 0);
  REQUIRE(before.has_value());
  auto parsed = kiln::sim::workloads::parse_stack_effects(*before, "bundle-0.toml");
  REQUIRE_MESSAGE(parsed.has_value(), parsed.error().message);
  CHECK(parsed->throughput_factor("mlp-bf16") == doctest::Approx(0.97));
  CHECK(parsed->faulty_kernels.empty());

  auto middle = kiln::sim::workloads::parse_stack_effects(*q::sim_stack_effects_toml(history, 1), "bundle-1.toml");
  REQUIRE(middle.has_value());
  CHECK(middle->throughput_factor("mlp-bf16") == doctest::Approx(0.485));
  CHECK(middle->faulty_kernels == std::set<std::string>{"gemm-bf16"});
  CHECK(middle->throughput_factor("mlp-fp8") == 1.0);

  auto after = kiln::sim::workloads::parse_stack_effects(*q::sim_stack_effects_toml(history, 3), "bundle-3.toml");
  REQUIRE(after.has_value());
  CHECK(after->faulty_kernels == std::set<std::string>{"softmax"});  // gemm-bf16 was repaired
}

TEST_CASE("the command builder expands its placeholders and needs an absolute program") {
  q::CommandBuilderConfig config;
  config.program = "/opt/ci/build-bundle";
  config.args = {"--upto", "{change}", "--index={index}", "--out", "{out}/bundle"};
  CHECK(q::validate(config).has_value());
  CHECK(q::expand_command(config, "c42", 41, "/tmp/b") ==
        std::vector<std::string>{"/opt/ci/build-bundle", "--upto", "c42", "--index=41", "--out", "/tmp/b/bundle"});
  config.program = "build-bundle";
  CHECK(q::validate(config).error().code == kiln::Errc::config);
}

// The workload catalog a qualification set is checked against: any fleet's list of workloads,
// the sim's being one of them.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "qualification/model_set.h"
#include "qualification/workload_catalog.h"
#include "sim/workloads/catalog.h"
#include "sim/workloads/registry.h"

namespace q = kiln::qualification;

namespace {

constexpr const char* kProductionCatalog = R"({"models": [
  {"name": "llama-70b", "components": ["gemm-bf16", "attention", "rmsnorm"], "owner": "ignored"},
  {"name": "dlrm", "components": ["embedding", "gemm-fp8"]}
]})";

constexpr const char* kProductionSet = R"(
[[model]]
name = "llama-70b-small"
size_class = "small"
chips = 1
minutes = 10
components = ["attention", "rmsnorm"]
owner_team = "llm-models"
workload = "llama-70b"
)";

std::string catalog_error(const char* text) {
  auto catalog = q::parse_workload_catalog(text, "catalog.json");
  REQUIRE_FALSE(catalog.has_value());
  return catalog.error().message;
}

}  // namespace

TEST_CASE("what kiln-workload-model --list --json prints is the sim's catalog") {
  auto parsed = q::parse_workload_catalog(kiln::sim::workloads::registry_to_json().dump(), "list.json");
  REQUIRE_MESSAGE(parsed.has_value(), parsed.error().message);
  const q::WorkloadCatalog& sim = kiln::sim::workloads::sim_workload_catalog();
  REQUIRE(parsed->workloads().size() == sim.workloads().size());
  for (const auto& workload : sim.workloads()) {
    const q::CatalogWorkload* same = parsed->find(workload.name);
    REQUIRE_MESSAGE(same != nullptr, workload.name);
    CHECK(same->components == workload.components);
  }
}

TEST_CASE("a production set is checked against its fleet's catalog, not the sim's") {
  auto set = q::parse_model_set(kProductionSet, "set.toml");
  REQUIRE_MESSAGE(set.has_value(), set.error().message);
  auto catalog = q::parse_workload_catalog(kProductionCatalog, "catalog.json");
  REQUIRE_MESSAGE(catalog.has_value(), catalog.error().message);
  CHECK(q::check_workloads(*set, *catalog).has_value());

  auto against_sim = q::check_workloads(*set, kiln::sim::workloads::sim_workload_catalog());
  REQUIRE_FALSE(against_sim.has_value());
  CHECK(against_sim.error().message.find("workload 'llama-70b' is not in the workload catalog") != std::string::npos);
  CHECK(against_sim.error().message.find("workload_catalog in qualifier.toml") != std::string::npos);

  set->models[0].components.push_back("gemm-fp8");
  auto wrong_component = q::check_workloads(*set, *catalog);
  REQUIRE_FALSE(wrong_component.has_value());
  CHECK(wrong_component.error().message.find("component 'gemm-fp8' is not used by its workload 'llama-70b'") !=
        std::string::npos);

  set->models[0].workload.reset();  // nothing to check without a workload
  CHECK(q::check_workloads(*set, *catalog).has_value());
}

TEST_CASE("a broken catalog says what is wrong with it") {
  CHECK(catalog_error("{nope").find("not valid JSON") != std::string::npos);
  CHECK(catalog_error(R"({"workloads": []})").find("no `models` array") != std::string::npos);
  CHECK(catalog_error(R"({"models": [{"components": []}]})").find("models[0] needs a non-empty string `name`") !=
        std::string::npos);
  CHECK(catalog_error(R"({"models": [{"name": "a"}]})").find("(a) needs `components`") != std::string::npos);
  CHECK(catalog_error(R"({"models": [{"name": "a", "components": [1]}]})").find("non-empty string") !=
        std::string::npos);
  CHECK(catalog_error(R"({"models": [{"name": "a", "components": []}, {"name": "a", "components": []}]})")
            .find("listed twice") != std::string::npos);
  CHECK(q::load_workload_catalog_file("/nonexistent/catalog.json").error().code == kiln::Errc::io);
}

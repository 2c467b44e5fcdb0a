#include "qualification/workload_catalog.h"

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace kiln::qualification {

WorkloadCatalog::WorkloadCatalog(std::string source, std::vector<CatalogWorkload> workloads)
    : source_(std::move(source)), workloads_(std::move(workloads)) {}

const CatalogWorkload* WorkloadCatalog::find(std::string_view name) const {
  auto it = std::find_if(workloads_.begin(), workloads_.end(), [&](const CatalogWorkload& w) { return w.name == name; });
  return it == workloads_.end() ? nullptr : &*it;
}

namespace {

Result<CatalogWorkload> read_workload(const nlohmann::json& entry, std::string_view source, std::size_t index) {
  const std::string at = fmt::format("{}: models[{}]", source, index);
  if (!entry.is_object() || !entry.contains("name") || !entry.at("name").is_string() ||
      entry.at("name").get_ref<const std::string&>().empty()) {
    return fail(Errc::config, fmt::format("{} needs a non-empty string `name`", at));
  }
  CatalogWorkload workload;
  workload.name = entry.at("name").get<std::string>();
  if (!entry.contains("components") || !entry.at("components").is_array()) {
    return fail(Errc::config, fmt::format("{} ({}) needs `components`, an array of kernel names", at, workload.name));
  }
  for (const auto& component : entry.at("components")) {
    if (!component.is_string() || component.get_ref<const std::string&>().empty()) {
      return fail(Errc::config, fmt::format("{} ({}): every component must be a non-empty string", at, workload.name));
    }
    workload.components.push_back(component.get<std::string>());
  }
  return workload;
}

}  // namespace

Result<WorkloadCatalog> parse_workload_catalog(std::string_view json_text, std::string_view source) {
  const auto document = nlohmann::json::parse(json_text, nullptr, false);
  if (document.is_discarded()) {
    return fail(Errc::config, fmt::format("{} is not valid JSON; give the catalog your workload program prints "
                                          "(kiln-workload-model --list --json for the sim)",
                                          source));
  }
  if (!document.is_object() || !document.contains("models") || !document.at("models").is_array()) {
    return fail(Errc::config, fmt::format("{} has no `models` array; the catalog is {{\"models\": [{{\"name\", "
                                          "\"components\"}}, ...]}}",
                                          source));
  }
  std::vector<CatalogWorkload> workloads;
  std::set<std::string> names;
  for (std::size_t i = 0; i < document.at("models").size(); ++i) {
    auto workload = read_workload(document.at("models")[i], source, i);
    if (!workload) return tl::unexpected(workload.error());
    if (!names.insert(workload->name).second) {
      return fail(Errc::config, fmt::format("{}: workload '{}' is listed twice; list each once", source, workload->name));
    }
    workloads.push_back(std::move(*workload));
  }
  return WorkloadCatalog(std::string(source), std::move(workloads));
}

Result<WorkloadCatalog> load_workload_catalog_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return fail(Errc::io, fmt::format("cannot read the workload catalog {}; check the path and its permissions",
                                      path.string()));
  }
  std::ostringstream text;
  text << in.rdbuf();
  return parse_workload_catalog(text.str(), path.string());
}

Status check_workloads(const ModelSet& set, const WorkloadCatalog& catalog) {
  for (const auto& model : set.models) {
    if (!model.workload) continue;
    const CatalogWorkload* workload = catalog.find(*model.workload);
    if (workload == nullptr) {
      return fail(Errc::config, fmt::format("model '{}': workload '{}' is not in the workload catalog ({}); fix the "
                                            "name or give the catalog of the fleet's workloads (workload_catalog in qualifier.toml)",
                                            model.name, *model.workload, catalog.source()));
    }
    for (const auto& component : model.components) {
      if (std::find(workload->components.begin(), workload->components.end(), component) ==
          workload->components.end()) {
        return fail(Errc::config, fmt::format("model '{}': component '{}' is not used by its workload '{}'; fix the "
                                              "components list",
                                              model.name, component, workload->name));
      }
    }
  }
  return {};
}

}  // namespace kiln::qualification

#include "sim/workloads/catalog.h"

#include "sim/workloads/registry.h"

namespace kiln::sim::workloads {

const qualification::WorkloadCatalog& sim_workload_catalog() {
  static const qualification::WorkloadCatalog catalog = [] {
    std::vector<qualification::CatalogWorkload> workloads;
    for (const auto& model : model_registry()) workloads.push_back({model.name, model.components});
    return qualification::WorkloadCatalog("the sim's workloads, kiln-workload-model --list", std::move(workloads));
  }();
  return catalog;
}

}  // namespace kiln::sim::workloads

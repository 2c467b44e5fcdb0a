// The sim's workload catalog for qualification: the registry's models with the kernels they run,
// as the catalog `kiln-workload-model --list --json` prints. kiln-qualifier checks a
// qualification set against it when its config names no workload_catalog; production code gets its
// catalog as data (qualification/workload_catalog.h) and never links this.
#pragma once

#include "qualification/workload_catalog.h"

namespace kiln::sim::workloads {

const qualification::WorkloadCatalog& sim_workload_catalog();

}  // namespace kiln::sim::workloads

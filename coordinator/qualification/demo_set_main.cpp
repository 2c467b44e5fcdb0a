// Prints the demo qualification set as TOML. Regenerate the checked-in copy with
//   kiln-qualification-demo-set > coordinator/qualification/data/qualification-set.toml
#include <iostream>

#include "coordinator/qualification/model_set.h"
#include "sim/workloads/catalog.h"

int main() {
  namespace q = kiln::qualification;
  std::cout << q::to_toml(q::generate_demo_model_set(kiln::sim::workloads::sim_workload_catalog()));
  return 0;
}

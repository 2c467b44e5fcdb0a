// Prints the demo qualification set as TOML. Regenerate the checked-in copy with
//   kiln-qualification-demo-set > qualification/data/qualification-set.toml
#include <iostream>
#include <string>

#include "common/version.h"
#include "qualification/model_set.h"
#include "sim/workloads/catalog.h"

int main(int argc, char** argv) {
  if (argc == 2 && std::string(argv[1]) == "--version") {
    std::cout << kiln::version_text("kiln-qualification-demo-set") << "\n";
    return 0;
  }
  namespace q = kiln::qualification;
  std::cout << q::to_toml(q::generate_demo_model_set(kiln::sim::workloads::sim_workload_catalog()));
  return 0;
}

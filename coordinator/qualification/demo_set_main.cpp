// Prints the demo qualification set as TOML. Regenerate the checked-in copy with
//   kiln-qualification-demo-set > coordinator/qualification/data/qualification-set.toml
#include <iostream>

#include "coordinator/qualification/model_set.h"

int main() {
  std::cout << kiln::qualification::to_toml(kiln::qualification::generate_demo_model_set());
  return 0;
}

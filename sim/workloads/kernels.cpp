#include "sim/workloads/kernels.h"

#include <bit>

#include "sim/chip/model.h"

namespace kiln::sim::workloads {

void corrupt(Matrix& m, double rate, std::uint64_t seed, std::uint64_t stream) {
  if (m.data.empty()) return;
  bool any = false;
  auto flip = [&](std::size_t i) {
    m.data[i] = std::bit_cast<float>(std::bit_cast<std::uint32_t>(m.data[i]) ^ 0x40000000u);
    any = true;
  };
  for (std::size_t i = 0; i < m.data.size(); ++i) {
    if (unit_uniform(mix_seed(seed, stream, i)) < rate) flip(i);
  }
  if (!any) flip(mix_seed(seed, stream, 0xC0FFEE) % m.data.size());
}

}  // namespace kiln::sim::workloads

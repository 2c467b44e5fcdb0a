#include <doctest/doctest.h>

#include "agent/host/topology.h"

namespace kiln::agent {

TEST_CASE("discover_topology describes this host") {
  const Result<HostTopology> topology = discover_topology();
  REQUIRE_MESSAGE(topology.has_value(), topology.error().describe());
  CHECK(topology->numa_nodes >= 1);
  CHECK(topology->cores >= 1);
  CHECK(topology->pus >= topology->cores);
  CHECK(!topology->hostname.empty());
  for (const PciDevice& device : topology->pci_devices) {
    CHECK(device.bus_id.size() == 12);  // "0000:3b:00.0"
  }
  const std::string text = describe_topology(*topology);
  CHECK(text.find(topology->hostname) != std::string::npos);
  CHECK(text.find(std::to_string(topology->cores) + " core(s)") != std::string::npos);
}

}  // namespace kiln::agent

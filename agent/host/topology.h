// What the host is made of, discovered with hwloc: reported at registration so the
// coordinator can place work and tell hosts apart. hwloc stays inside topology.cpp.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/error.h"

namespace kiln::agent {

struct PciDevice {
  std::string bus_id;  // "domain:bus:device.function", e.g. "0000:3b:00.0"
  std::uint16_t vendor_id = 0;
  std::uint16_t device_id = 0;
  std::uint16_t class_id = 0;        // PCI class and subclass, e.g. 0x1200 accelerator
  std::optional<int> numa_node;      // OS index of the closest NUMA node, when known
};

struct HostTopology {
  int numa_nodes = 1;  // 1 when the host (or container) exposes no NUMA information
  int packages = 0;    // 0 when unknown
  int cores = 0;       // physical cores; the PU count when cores are unknown
  int pus = 0;         // hardware threads
  std::vector<PciDevice> pci_devices;
  std::string hostname;
};

Result<HostTopology> discover_topology();
// gethostname(), or "unknown".
std::string local_hostname();

// One line per fact, for logs and `kiln-agent check-config`.
std::string describe_topology(const HostTopology& topology);

}  // namespace kiln::agent

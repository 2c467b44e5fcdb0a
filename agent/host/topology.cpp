#include "agent/host/topology.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include <hwloc.h>

namespace kiln::agent {
namespace {

struct TopologyDeleter {
  void operator()(hwloc_topology* topology) const { hwloc_topology_destroy(topology); }
};
using TopologyHandle = std::unique_ptr<hwloc_topology, TopologyDeleter>;
// In C++ the attribute struct is nested in the union that holds it.
using PciAttributes = hwloc_obj_attr_u::hwloc_pcidev_attr_s;

int count(hwloc_topology_t topology, hwloc_obj_type_t type) {
  const int n = hwloc_get_nbobjs_by_type(topology, type);
  return n < 0 ? 0 : n;  // -1 means "spread over several depths", which kiln does not expect
}

std::string format_bus_id(const PciAttributes& pci) {
  char text[32];
  std::snprintf(text, sizeof text, "%04x:%02x:%02x.%x", static_cast<unsigned>(pci.domain),
                static_cast<unsigned>(pci.bus), static_cast<unsigned>(pci.dev),
                static_cast<unsigned>(pci.func));
  return text;
}

// The device's NUMA node is known only when its closest CPU-side ancestor spans exactly one.
std::optional<int> numa_node_of(hwloc_topology_t topology, hwloc_obj_t device) {
  const hwloc_obj_t ancestor = hwloc_get_non_io_ancestor_obj(topology, device);
  if (ancestor == nullptr || ancestor->nodeset == nullptr) return std::nullopt;
  if (hwloc_bitmap_weight(ancestor->nodeset) != 1) return std::nullopt;
  if (count(topology, HWLOC_OBJ_NUMANODE) <= 1) return std::nullopt;
  return hwloc_bitmap_first(ancestor->nodeset);
}

}  // namespace

std::string local_hostname() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0) return "unknown";
  return name;
}

Result<HostTopology> discover_topology() {
  hwloc_topology_t raw = nullptr;
  if (hwloc_topology_init(&raw) != 0) {
    return fail(Errc::internal, std::string("hwloc could not initialise: ") +
                                    std::strerror(errno) + "; check the hwloc installation");
  }
  TopologyHandle topology(raw);
  // PCI devices are filtered out by default; keep the ones that matter (not bridges).
  hwloc_topology_set_io_types_filter(raw, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
  // The Linux backend enumerates PCI devices from sysfs. The libpciaccess plugin ("pci")
  // leaks on every load, and the GPU-runtime plugins would load vendor libraries and open
  // devices the agent does not own.
  for (const char* component : {"pci", "opencl", "gl", "cuda", "nvml", "rsmi", "levelzero"}) {
    hwloc_topology_set_components(raw, HWLOC_TOPOLOGY_COMPONENTS_FLAG_BLACKLIST, component);
  }
  if (hwloc_topology_load(raw) != 0) {
    return fail(Errc::io, std::string("hwloc could not read the host topology: ") +
                              std::strerror(errno) + "; check that /sys and /proc are mounted");
  }

  HostTopology out;
  out.numa_nodes = std::max(1, count(raw, HWLOC_OBJ_NUMANODE));
  out.packages = count(raw, HWLOC_OBJ_PACKAGE);
  out.pus = count(raw, HWLOC_OBJ_PU);
  out.cores = count(raw, HWLOC_OBJ_CORE);
  if (out.cores == 0) out.cores = out.pus;
  if (out.pus == 0) {
    return fail(Errc::io, "hwloc found no processing units on this host; check that /sys and "
                          "/proc are mounted and readable");
  }

  for (hwloc_obj_t device = hwloc_get_next_pcidev(raw, nullptr); device != nullptr;
       device = hwloc_get_next_pcidev(raw, device)) {
    const PciAttributes& pci = device->attr->pcidev;
    out.pci_devices.push_back(PciDevice{format_bus_id(pci), pci.vendor_id, pci.device_id,
                                        pci.class_id, numa_node_of(raw, device)});
  }
  out.hostname = local_hostname();
  return out;
}

std::string describe_topology(const HostTopology& topology) {
  std::string out = "host " + topology.hostname + ": " + std::to_string(topology.numa_nodes) +
                    " NUMA node(s), " + std::to_string(topology.packages) + " package(s), " +
                    std::to_string(topology.cores) + " core(s), " + std::to_string(topology.pus) +
                    " PU(s), " + std::to_string(topology.pci_devices.size()) + " PCI device(s)\n";
  for (const PciDevice& device : topology.pci_devices) {
    char ids[64];
    std::snprintf(ids, sizeof ids, "%04x:%04x class %04x", device.vendor_id, device.device_id,
                  device.class_id);
    out += "  " + device.bus_id + " " + ids + " NUMA node " +
           (device.numa_node ? std::to_string(*device.numa_node) : std::string("unknown")) +
           "\n";
  }
  return out;
}

}  // namespace kiln::agent

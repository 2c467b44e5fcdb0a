// Free TCP ports on 127.0.0.1 for servers started on this machine: the benchmarks' and the
// tests' coordinators, echoes and /metrics listeners.
#pragma once

#include <cstddef>
#include <vector>

namespace kiln::transport {

// `count` ports free now, all different: each is held until every one is chosen, so the kernel
// cannot hand out one twice. Another process may still take one before its server binds it.
std::vector<int> free_loopback_ports(std::size_t count);

}  // namespace kiln::transport

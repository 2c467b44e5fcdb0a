// One server (the coordinator, or the echo as the reference) run under N fake agents, and what it
// did: registration, heartbeats, timed requests, the throughput of a burst at a full queue, and a
// stall. See docs/performance.md, "Scale".
#pragma once

#include <cstddef>
#include <filesystem>
#include <memory>
#include <string>

#include "common/error.h"
#include "tools/bench/bench_scale_run.h"

namespace kiln::bench {

class Bench {
 public:
  // `self`: this program, run again as the echo server and the fleet's slices; `dir`: where the
  // keys, configs, stores and logs go.
  Bench(Settings settings, std::filesystem::path dir, std::string self, Placement placement);
  ~Bench();
  Bench(const Bench&) = delete;
  Bench& operator=(const Bench&) = delete;

  kiln::Result<Run> run(std::size_t n, bool echo, bool stall);

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kiln::bench

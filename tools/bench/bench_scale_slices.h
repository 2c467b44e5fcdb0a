// The fleet of fake agents split over processes of kiln-bench-scale (--fleet-slice), each under
// its own file limit: a slice's settings and keys as JSON, and the processes running them.
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "tools/bench/bench_process.h"
#include "tools/bench/fake_fleet.h"

namespace kiln::bench {

// A fleet slice's settings and keys, for --fleet-slice.
nlohmann::json slice_json(const FleetOptions& options);
kiln::Result<FleetOptions> read_slice(const std::filesystem::path& path);

// The fleet split over processes of this program (--fleet-slice), each under its own file limit.
class FleetProcesses : public Fleet {
 public:
  FleetProcesses(std::vector<int> fds, std::vector<pid_t> pids) : slices_(std::move(fds)), pids_(std::move(pids)) {}
  ~FleetProcesses() override {
    for (pid_t pid : pids_) stop_process(pid);
  }
  FleetProcesses(const FleetProcesses&) = delete;
  FleetProcesses& operator=(const FleetProcesses&) = delete;

  FleetCounts counts() override { return slices_.counts(); }
  std::vector<double> take_heartbeat_rtts_us() override { return slices_.take_heartbeat_rtts_us(); }
  std::vector<TimeMs> take_hello_times_ms() override { return slices_.take_hello_times_ms(); }
  const std::vector<pid_t>& pids() const { return pids_; }

 private:
  FleetSlices slices_;
  std::vector<pid_t> pids_;
};

}  // namespace kiln::bench

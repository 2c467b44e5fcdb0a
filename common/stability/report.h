// A stability run's report: what each rank saw (the `stability` object of its workload result)
// and the failure rates per 1000 chip-hours, per kind and in total, with Garwood intervals.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "common/error.h"
#include "common/stability/criteria.h"
#include "common/stability/monitor.h"
#include "common/stability/poisson.h"

namespace kiln::stability {

// What one rank ran and saw.
struct RankRun {
  std::uint32_t rank = 0;
  std::uint64_t job_id = 0;
  std::string node_id;
  bool reported = false;  // its result held a stability object
  std::string problem;    // why it did not, when it did not
  std::uint32_t chips = 0;
  std::uint64_t steps = 0;
  double run_hours = 0;  // on the run's clock (simulated hours on the simulated chip)
  bool ended_early = false;
  double first_window_throughput = 0;
  double latest_window_throughput = 0;
  std::vector<Failure> failures;

  double chip_hours() const { return chips * run_hours; }
};

// The `stability` object a rank writes into its workload result (docs/workloads.md).
nlohmann::json rank_section(const StabilityMonitor& monitor, std::uint32_t chips, double run_hours);
// Reads it back from a workload result document; an error when it is missing or malformed.
Result<RankRun> rank_run_from_result(const nlohmann::json& workload_result);

struct KindRate {
  FailureKind kind = FailureKind::nan;
  RateEstimate rate;
};

struct StabilityReport {
  std::string model;
  std::uint32_t chips = 0;
  double hours_asked = 0;
  StabilityCriteria criteria;
  std::vector<RankRun> ranks;
  double chip_hours = 0;        // exposure: each rank's chips x the hours it ran
  std::vector<KindRate> kinds;  // every kind, in enum order
  RateEstimate total;
  bool complete = false;  // every rank reported
  bool passed = false;    // complete, with no failure
};

StabilityReport make_report(std::string model, std::uint32_t chips, double hours_asked,
                            const StabilityCriteria& criteria, std::vector<RankRun> ranks);
nlohmann::json to_json(const StabilityReport& report);
std::string to_text(const StabilityReport& report);

}  // namespace kiln::stability

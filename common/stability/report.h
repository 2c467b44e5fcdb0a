// A stability run's report: what each rank saw (the `stability` object of its workload result)
// and the failure rates per 1000 chip-hours, per kind and in total, with Garwood intervals, over
// episodes (one cause on one chip, with its occurrences).
#pragma once

#include <cstdint>
#include <optional>
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

// One cause on one chip: the failures of one kind on one rank's chip (on the rank, for a kind
// with no chip), however often it fired. A periodic fault that fires 46 times is one episode
// with 46 occurrences, not 46 independent failures: rates and their intervals count episodes.
struct Episode {
  FailureKind kind = FailureKind::nan;
  std::uint32_t rank = 0;
  std::uint64_t job_id = 0;
  std::string node_id;
  std::optional<std::uint32_t> chip;
  std::uint64_t occurrences = 0;
  std::uint64_t first_step = 0;
  std::uint64_t last_step = 0;
  double first_time_s = 0;
  double last_time_s = 0;
};

// The episodes of the ranks' failures, in the order their first failures come in the ranks.
std::vector<Episode> episodes_of(const std::vector<RankRun>& ranks);

struct KindRate {
  FailureKind kind = FailureKind::nan;
  std::uint64_t occurrences = 0;  // failures seen, every firing counted
  RateEstimate rate;              // over episodes
};

struct StabilityReport {
  std::string model;
  std::uint32_t chips = 0;
  double hours_asked = 0;
  StabilityCriteria criteria;
  std::vector<RankRun> ranks;
  double chip_hours = 0;        // exposure: each rank's chips x the hours it ran
  std::vector<Episode> episodes;
  std::vector<KindRate> kinds;  // every kind, in enum order
  std::uint64_t occurrences = 0;  // failures seen in all
  RateEstimate total;             // over episodes
  bool complete = false;  // every rank reported
  bool passed = false;    // complete, with no failure
};

StabilityReport make_report(std::string model, std::uint32_t chips, double hours_asked,
                            const StabilityCriteria& criteria, std::vector<RankRun> ranks);
nlohmann::json to_json(const StabilityReport& report);
std::string to_text(const StabilityReport& report);

// The rate and interval of episodes counted elsewhere (`kiln stability --episodes K --chip-hours
// T`): schema kiln.stability-rate/1 with episodes, chip_hours, confidence, per_1000_chip_hours,
// lower, upper.
nlohmann::json rate_to_json(std::uint64_t episodes, double chip_hours, double confidence);
std::string rate_to_text(std::uint64_t episodes, double chip_hours, double confidence);

}  // namespace kiln::stability

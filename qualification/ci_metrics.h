// What the qualifier's /metrics says (docs/metrics.md): the health of CI itself, from the run
// requests, run reports and tickets the coordinator holds. Pure: the qualifier's shell reads the
// records and hands them in here; a finished report is taken into the counters once, so the shell
// reads again only what may still change (the reports of unfinished runs, the tickets).
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "common/metrics/exposition.h"
#include "common/time.h"
#include "records/run_request.h"
#include "qualification/run_types.h"
#include "records/ticket_record.h"
#include "qualification/triage.h"

namespace kiln::qualification {

// Presubmit time to signal buckets, in seconds: a minute to six hours, with 45 minutes (the
// alert's threshold) among them.
inline const std::vector<double> kTimeToSignalBucketsSeconds = {60,   300,  600,  900,   1200,  1800, 2700,
                                                               3600, 5400, 7200, 10800, 14400, 21600};

class CiMetrics {
 public:
  explicit CiMetrics(FlakeBudgetOptions flake_budget = {});

  // A run request, in the order they were made, each once, with when the coordinator recorded it.
  void add_request(const RunRequest& request, TimeMs requested_at_ms);
  // A run's report as recorded (to_json(RunReport) and the qualifier's fields). A finished report
  // is counted the first time it is seen and ignored after that; an unfinished one replaces what
  // was known of its run (its bisections under way).
  void add_report(const nlohmann::json& report);
  // Every ticket record the coordinator holds (the counts are made from them).
  void set_tickets(const std::vector<TicketRecord>& tickets);

  // The runs whose reports may still change: requested or seen running, not seen finished.
  std::vector<std::string> unfinished_runs() const;

  std::string render(TimeMs now_wall_ms) const;

 private:
  struct Requested {
    Tier tier = Tier::nightly;
    TimeMs requested_at_ms = 0;
    TimeMs deadline_ms = 0;
    TimeMs finished_at_ms = 0;  // 0 until its report finished
  };

  std::map<std::string, Requested> requests_;
  std::string latest_scheduled_nightly_;  // the last nightly requested with a deadline
  std::set<std::string> finished_;
  std::map<std::string, std::vector<BisectionProgress>> running_;  // unfinished runs' bisections
  std::map<std::pair<Tier, std::string>, double> runs_;  // by tier and verdict (run_verdict.h)
  metrics::Histogram time_to_signal_{kTimeToSignalBucketsSeconds};
  FlakeLedger flakes_;
  std::map<std::string, double> tickets_by_team_;
};

}  // namespace kiln::qualification

// Verdicts judged again after a run finished: the runs relying on a waiver that lapsed (expired,
// withdrawn, replaced), the runs a new waiver names, and the stability runs (kiln stability),
// whose risk gates page as a qualification run's do. The qualifier's main loop calls these on
// every poll; the decisions themselves are waiver.h's, over the typed report.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "common/protocol/messages_records.h"
#include "client/client.h"
#include "qualification/gate_run.h"
#include "records/risk_register.h"
#include "qualification/waiver.h"
#include "qualifier/qualifier_config.h"
#include "qualifier/recent_runs.h"

namespace kiln::qualifier {

// The runs whose recorded verdict relies on waivers, each with the waivers it relies on: once one
// of those is no longer in force (expired, withdrawn, replaced), the run is judged again by the
// waivers in force (waiver.h revoke_lapsed_waivers). Shared by the threads that drive runs and the
// main loop.
class WaivedRuns {
 public:
  // A run is a qualification run's report or a stability run's (kiln stability).
  using RunKey = std::pair<protocol::RecordKind, std::string>;

  // Keeps the run when its report relies on waivers, forgets it otherwise.
  void note(const qualification::GateRun& run);
  void note(const nlohmann::json& report) { note(qualification::gate_run_from_report(report)); }
  // The runs relying on a waiver not in force at `now` among those the coordinator holds.
  std::vector<RunKey> due(const std::vector<qualification::Waiver>& recorded, TimeMs now) const;

  static protocol::RecordKind kind_of(const qualification::GateRun& run);

 private:
  mutable std::mutex mutex_;
  std::map<RunKey, std::vector<qualification::RecordedWaiver>> relied_;
};

// A waiver no longer in force that a run relied on: the run is judged again by the waivers in
// force, failing unless another lets it through. A waiver written after the run it names had
// finished and failed: that run is judged again with the waivers in force. Either way its report
// (and pages) are recorded again when the verdict changed, so whoever reads the run (`kiln run`,
// a promotion) sees it. `seen`: the waivers already looked at (key and time written).
void judge_waived_runs(cli::Client& client, const QualifierConfig& config, const qualification::RiskRegister& risks,
                       std::set<std::string>& seen, WaivedRuns& waived, RecentRuns& recent);

// Gates fire on their own for stability runs too (kiln stability records them): each one recorded
// since the last look (`after_seq`) and not judged yet gets the waivers in force, then every risk
// gate it still fails pages its team, as a qualification run's do (RequestedRun::judge_risks). It
// is recorded again marked judged, so that a qualifier started later pages none of it twice.
void judge_stability_runs(cli::Client& client, const QualifierConfig& config, const qualification::RiskRegister& risks,
                          std::uint64_t& after_seq, WaivedRuns& waived);

}  // namespace kiln::qualifier

// Each risk of the register with its gate's latest verdict, from the recorded qualification runs
// of its tier, and the register's gaps: a risk without an owner or a gate, a gate naming a model
// the set lacks or a metric kiln does not judge, a gate never judged or not judged within its
// tier's period (presubmit: since every change touching its model; nightly: 1 day; release: in
// the last release qualification; stability: its period_days). Pure: the shell lists the runs
// and changes and passes the time in.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "common/enum_names.h"
#include "common/time.h"
#include "records/change.h"
#include "qualification/gate_run.h"
#include "qualification/model_set.h"
#include "records/risk_register.h"
#include "qualification/ticket.h"

namespace kiln::qualification {

enum class GateState { passed, failed, waived, inconclusive, flaky };
constexpr EnumTable<GateState, 5> enum_names(GateState) {
  return {{
      {GateState::passed, "passed"},
      {GateState::failed, "failed"},
      {GateState::waived, "waived"},
      {GateState::inconclusive, "inconclusive"},
      {GateState::flaky, "flaky"},
  }};
}

// The verdict of one metric of one model run (a model on one revision), as its report recorded it;
// nullopt when the run did not judge that metric (the model was skipped, could not run, or has no
// training evidence for eval and loss_curve). A failure waived by a waiver expired at `now` is
// failed again.
struct MetricVerdict {
  GateState state = GateState::passed;
  std::string detail;
  std::string waiver;  // "waived by X until T: reason" when a waiver let the failure through
};
std::optional<MetricVerdict> metric_verdict(const ModelResult& model, GateMetric metric, TimeMs now);

// Whether the register judges a run by it: a finished qualification or stability run.
bool judges_gates(const GateRun& run);
// The finished runs among recorded run reports (kiln.qualification-run/1) and stability runs
// (kiln.stability-run/1, stability_gates.h), read by gate_run.h; others are left out.
std::vector<GateRun> gate_runs_from_reports(const std::vector<nlohmann::json>& reports);

// The run tier a risk tier's gate is judged in ("smoke" for presubmit).
std::string_view run_tier_of(RiskTier tier);

enum class GapKind { no_owner, no_gate, unknown_model, unknown_metric, never_run, stale };
constexpr EnumTable<GapKind, 6> enum_names(GapKind) {
  return {{
      {GapKind::no_owner, "no_owner"},
      {GapKind::no_gate, "no_gate"},
      {GapKind::unknown_model, "unknown_model"},
      {GapKind::unknown_metric, "unknown_metric"},
      {GapKind::never_run, "never_run"},
      {GapKind::stale, "stale"},
  }};
}

struct Gap {
  GapKind kind = GapKind::no_gate;
  std::string detail;  // what is missing and what to do
};

struct GateResult {
  std::string run_id;
  GateState state = GateState::passed;  // the worst over the run's revisions
  std::string detail;
  std::string waiver;
  TimeMs finished_at_ms = 0;
  DurationMs age_ms = 0;
  // A failed gate's page, following the triage of the model run that failed it (risk_gate_pages):
  // the team paged and the ticket that pages it; by_triage when that is the run's own ticket.
  std::string paged_team;
  std::string paged_ticket;
  bool paged_by_triage = false;
};

struct RiskStatus {
  const Risk* risk = nullptr;
  std::optional<GateResult> latest;
  std::vector<Gap> gaps;
};

// `runs`: any order. `changes`: the recorded changes (for the presubmit period). `now`: the wall
// clock, against which ages and periods are measured. The statuses point into `reg`, which must
// outlive them.
std::vector<RiskStatus> assess_risks(const RiskRegister& reg, const ModelSet& set, const std::vector<GateRun>& runs,
                                     const std::vector<Change>& changes, TimeMs now);

std::size_t gap_count(const std::vector<RiskStatus>& statuses);

// Gates fire on their own: the pages a finished run's report (kiln.qualification-run/1, waivers
// applied) calls for, one per risk of the run's tier whose gate failed on some revision; a waived
// failure pages no one. One incident, one page, to the owner its triage names: when the model
// run that failed the gate filed its own ticket (the lab's for a hardware suspect, the culprit
// change's owner's for a bisected regression), that ticket is the page and the gate links it.
// Otherwise the gate files a risk_gate ticket with the risk's severity and culprit "risk:ID@RUN"
// (a run taken up again pages once), to the risk's page team; but a regression triage called
// software never pages through a hardware risk: it goes to the model's owning team.
struct GatePage {
  const Risk* risk = nullptr;     // points into the register
  GateResult result;              // failed, with its page
  std::optional<Ticket> ticket;   // the risk_gate ticket to file; none when the run's own ticket pages
};
std::vector<GatePage> risk_gate_pages(const RiskRegister& reg, const GateRun& run, TimeMs now);
std::vector<GatePage> risk_gate_pages(const RiskRegister& reg, const nlohmann::json& report, TimeMs now);
// The risk_gate tickets among risk_gate_pages.
std::vector<Ticket> risk_gate_tickets(const RiskRegister& reg, const GateRun& run, TimeMs now);
std::vector<Ticket> risk_gate_tickets(const RiskRegister& reg, const nlohmann::json& report, TimeMs now);
// For the qualifier's output: "risk ID: gate MODEL METRIC failed in RUN; paged TEAM ...".
std::string page_text(const GatePage& page);

// `kiln risks`: one line per risk, then every gap.
std::string risks_text(const std::vector<RiskStatus>& statuses);
// `kiln risks --json`: {"risks": [...], "gaps": N}.
nlohmann::json to_json(const std::vector<RiskStatus>& statuses);

}  // namespace kiln::qualification

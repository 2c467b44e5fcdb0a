// Waivers: a failing blocking gate let through, for a while, by a named approver of the team that
// owns it. `kiln waive` records one on the coordinator (a `waiver` record, audited); every
// evaluation after that applies it: a run's report marks the model's failure waived ("waived by X
// until T: reason") and passes if nothing else fails, and a promotion relying on the run shows the
// waiver. An expired or withdrawn waiver, or one whose approver the register does not list for the
// owning team, lets nothing through. A report keeps what the run found; whether the waivers it
// relies on still hold is decided when someone relies on it, from the waivers the coordinator
// holds then (revoke_lapsed_waivers). Pure: the decisions take a typed report (gate_run.h) and
// the waivers in force and `now`, and return the report judged; the overloads on a report document
// read it, judge it and write it back, every key they do not decide kept.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "common/time.h"
#include "qualification/gate_run.h"
#include "records/risk_register.h"
#include "records/waiver.h"

namespace kiln::qualification {

// The metrics a model run of a report (kiln.qualification-run/1) fails on: throughput for a
// performance regression, eval and loss_curve for a training model's failed gates, correctness
// for other wrong outputs; none for a verdict that does not fail a run, or one that is not a
// gate's (error: the model could not run). A stability run's entry: the gates it failed.
std::vector<GateMetric> failing_metrics(const ModelResult& model);

// A report judged by the waivers: the report as judged, and one line per waiver that changed it.
struct WaiverJudgement {
  GateRun run;
  std::vector<std::string> texts;
};

// Applies the waivers to a run report at `now`: each failing model whose every failing metric has
// an applying waiver gets those waivers and no longer fails the run; the report passes when it
// finished and no model fails the run any more, and its `waivers` list the waivers it relies on.
// `texts`: those waivers' texts, in order; none when no waiver applied (the report unchanged).
WaiverJudgement apply_waivers(GateRun run, const std::vector<Waiver>& waivers, const RiskRegister& reg, TimeMs now);
// The same on a report document, in place; returns the texts.
std::vector<std::string> apply_waivers(nlohmann::json& report, const std::vector<Waiver>& waivers,
                                       const RiskRegister& reg, TimeMs now);

// Why a waiver a report relies on (an entry of its `waivers`, as apply_waivers wrote it) lets
// nothing through any more at `now`, given every waiver the coordinator holds (`recorded`, as
// `kiln waivers --all` lists them): "expired at T", "withdrawn by X at T", "replaced by <text>" or
// "no longer recorded". Empty while the very waiver it relied on is in force.
std::string why_lapsed(const RecordedWaiver& relied, const std::vector<Waiver>& recorded, TimeMs now);

// Judges a report again by the waivers the coordinator holds at `now`: each waiver it relies on
// that is no longer in force lets nothing through. Its failures fail the run again (`fails_run`
// true, `passed` false, the summary says FAILED and which waiver lapsed, and why), it leaves the
// report's `waivers` and joins its `lapsed_waivers` (with `why`). `texts`: one line per lapsed
// waiver ("<text>: <why>"), in order; none when every waiver it relies on holds (the report
// unchanged).
WaiverJudgement revoke_lapsed_waivers(GateRun run, const std::vector<Waiver>& recorded, TimeMs now);
// The same on a report document, in place; returns the texts.
std::vector<std::string> revoke_lapsed_waivers(nlohmann::json& report, const std::vector<Waiver>& recorded,
                                               TimeMs now);

}  // namespace kiln::qualification

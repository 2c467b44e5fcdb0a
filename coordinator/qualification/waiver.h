// Waivers: a failing blocking gate let through, for a while, by a named approver of the team that
// owns it. `kiln waive` records one on the coordinator (a `waiver` record, audited); every
// evaluation after that applies it: a run's report marks the model's failure waived ("waived by X
// until T: reason") and passes if nothing else fails, and a promotion relying on the run shows the
// waiver. An expired or withdrawn waiver, or one whose approver the register does not list for the
// owning team, lets nothing through. A report keeps what the run found; whether the waivers it
// relies on still hold is decided when someone relies on it, from the waivers the coordinator
// holds then (revoke_lapsed_waivers). Pure.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "common/error.h"
#include "common/time.h"
#include "coordinator/qualification/risk_register.h"

namespace kiln::qualification {

// The longest a waiver may last: long enough for a fix to land, short enough that it is looked
// at again.
inline constexpr DurationMs kMaxWaiverMs = 30 * 24 * 3600 * kSecondMs;

struct Waiver {
  // What it waives: a run id (that run only) or a risk id (its gate, in every run), with the
  // model and metric of the gate.
  std::string scope;
  std::string model;
  GateMetric metric = GateMetric::throughput;
  std::string team;      // the gate's owning team, whose approver waived it
  std::string approver;  // the key that wrote it: the coordinator's word, not the client's
  std::string reason;
  TimeMs created_at_ms = 0;
  TimeMs expires_at_ms = 0;
  // Who withdrew it and when (`kiln waiver withdraw`): the coordinator's word. Empty: not withdrawn.
  std::string withdrawn_by;
  TimeMs withdrawn_at_ms = 0;
};

// Whether it lets anything through at `now`: not withdrawn, not expired.
bool in_force(const Waiver& waiver, TimeMs now);

// The record key: one waiver per scope, model and metric (a new one replaces the old).
std::string waiver_key(const Waiver& waiver);
// "waived by alice until 2026-12-10 14:00 UTC: MoE tokens/s 4% low, fix in c0421".
std::string waiver_text(const Waiver& waiver);

nlohmann::json to_json(const Waiver& waiver);
Result<Waiver> waiver_from_json(const nlohmann::json& json);

// What the coordinator checks of a waiver it is asked to record at `now`: scope, model, team
// and reason non-empty, and an expiry after now and at most kMaxWaiverMs ahead.
Status validate_new_waiver(const Waiver& waiver, TimeMs now);

// The team that owns the gate of (model, metric), or of the risk `scope` names: the owner_team
// of the register's risks that gate it. Errc::not_found when no risk gates it (nothing to waive:
// only a risk's gate is waived), Errc::unauthorized when `approver` is not an approver of that team.
Result<std::string> waiving_team(const RiskRegister& reg, std::string_view scope, std::string_view model,
                                 GateMetric metric, std::string_view approver);

// Whether a waiver lets a failure of `run_id` through at `now`: in scope, in force, and its
// approver listed for its gate's owning team.
bool waiver_applies(const Waiver& waiver, const RiskRegister& reg, std::string_view run_id, TimeMs now);

// The metrics a model entry of a run report (kiln.qualification-run/1) fails on: throughput for a
// performance regression, eval and loss_curve for a training model's failed gates, correctness
// for other wrong outputs; none for a verdict that does not fail a run, or one that is not a
// gate's (error: the model could not run). A stability run's entry: the gates it failed.
std::vector<GateMetric> failing_metrics(const nlohmann::json& model_entry);

// Applies the waivers to a run report document at `now`: each failing model entry whose every
// failing metric has an applying waiver gets `waivers` (each with its `text`) and `fails_run`
// false; the report's `passed` is true when it finished and no entry fails the run any more, and
// `waivers` lists the waivers it relies on. Returns the texts of those waivers, in order.
std::vector<std::string> apply_waivers(nlohmann::json& report, const std::vector<Waiver>& waivers,
                                       const RiskRegister& reg, TimeMs now);

// Why a waiver a report relies on (an entry of its `waivers`, as apply_waivers wrote it) lets
// nothing through any more at `now`, given every waiver the coordinator holds (`recorded`, as
// `kiln waivers --all` lists them): "expired at T", "withdrawn by X at T", "replaced by <text>" or
// "no longer recorded". Empty while the very waiver it relied on is in force.
std::string why_lapsed(const nlohmann::json& relied, const std::vector<Waiver>& recorded, TimeMs now);

// Judges a report again by the waivers the coordinator holds at `now`: each waiver it relies on
// that is no longer in force lets nothing through. Its failures fail the run again (`fails_run`
// true, `passed` false, the summary says FAILED and which waiver lapsed, and why), it leaves the
// report's `waivers` and joins its `lapsed_waivers` (with `why`). Returns one line per lapsed
// waiver ("<text>: <why>"), in order; none when every waiver it relies on holds.
std::vector<std::string> revoke_lapsed_waivers(nlohmann::json& report, const std::vector<Waiver>& recorded,
                                               TimeMs now);

}  // namespace kiln::qualification

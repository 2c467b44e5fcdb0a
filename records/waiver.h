// A waiver (kiln.waiver/1): a failing blocking gate let through, for a while, by a named approver
// of the team that owns it. `kiln waive` records one on the coordinator (a `waiver` record,
// audited); an expired or withdrawn waiver, or one whose approver the register does not list for
// the owning team, lets nothing through. What a run's report does with waivers is
// qualification/waiver.h.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "common/error.h"
#include "common/time.h"
#include "records/risk_register.h"

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
// "2026-12-10 14:00 UTC": how a waiver's times are written for people.
std::string utc_minute(TimeMs at_ms);
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

}  // namespace kiln::qualification

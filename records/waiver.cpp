#include "records/waiver.h"

#include <algorithm>
#include <chrono>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "records/json_members.h"

namespace kiln::qualification {

using json = nlohmann::json;

std::string utc_minute(TimeMs at_ms) {
  using namespace std::chrono;
  const sys_time<milliseconds> at{milliseconds{at_ms}};
  const auto day = floor<days>(at);
  const year_month_day date{day};
  const hh_mm_ss time{floor<minutes>(at - day)};
  return fmt::format("{:04}-{:02}-{:02} {:02}:{:02} UTC", static_cast<int>(date.year()),
                     static_cast<unsigned>(date.month()), static_cast<unsigned>(date.day()), time.hours().count(),
                     time.minutes().count());
}

std::string waiver_key(const Waiver& waiver) {
  return fmt::format("{}/{}/{}", waiver.scope, waiver.model, enum_name(waiver.metric));
}

std::string waiver_text(const Waiver& waiver) {
  return fmt::format("waived by {} until {}: {}", waiver.approver, utc_minute(waiver.expires_at_ms), waiver.reason);
}

bool in_force(const Waiver& waiver, TimeMs now) { return waiver.withdrawn_by.empty() && now < waiver.expires_at_ms; }

json to_json(const Waiver& waiver) {
  json document = {{"schema", "kiln.waiver/1"},         {"scope", waiver.scope},
                   {"model", waiver.model},             {"metric", enum_name(waiver.metric)},
                   {"team", waiver.team},               {"approver", waiver.approver},
                   {"reason", waiver.reason},           {"created_at_ms", waiver.created_at_ms},
                   {"expires_at_ms", waiver.expires_at_ms}};
  if (!waiver.withdrawn_by.empty()) {
    document["withdrawn_by"] = waiver.withdrawn_by;
    document["withdrawn_at_ms"] = waiver.withdrawn_at_ms;
  }
  return document;
}

Result<Waiver> waiver_from_json(const json& document) {
  const auto bad = [](std::string_view what) {
    return fail(Errc::bad_message, fmt::format("the waiver is not a kiln.waiver/1 document ({}); send the document "
                                               "`kiln waive` writes",
                                               what));
  };
  if (!document.is_object() || document.value("schema", "") != "kiln.waiver/1") return bad("schema");
  Waiver waiver;
  waiver.scope = report_text(document, "scope");
  waiver.model = report_text(document, "model");
  const auto metric = enum_from_name<GateMetric>(report_text(document, "metric"));
  if (!metric) return bad("metric: throughput, correctness, eval or loss_curve");
  waiver.metric = *metric;
  waiver.team = report_text(document, "team");
  waiver.approver = report_text(document, "approver");
  waiver.reason = report_text(document, "reason");
  for (auto [name, field] : {std::pair{"created_at_ms", &waiver.created_at_ms}, {"expires_at_ms", &waiver.expires_at_ms}}) {
    auto it = document.find(name);
    if (it == document.end() || !it->is_number_integer()) return bad(name);
    *field = it->get<TimeMs>();
  }
  waiver.withdrawn_by = report_text(document, "withdrawn_by");
  if (auto at = document.find("withdrawn_at_ms"); at != document.end() && at->is_number_integer()) {
    waiver.withdrawn_at_ms = at->get<TimeMs>();
  }
  return waiver;
}

Status validate_new_waiver(const Waiver& waiver, TimeMs now) {
  if (waiver.scope.empty() || waiver.model.empty() || waiver.team.empty()) {
    return fail(Errc::invalid_argument, "a waiver names what it waives (a run or a risk), the model and the owning "
                                        "team");
  }
  if (waiver.reason.empty()) {
    return fail(Errc::invalid_argument, "a waiver needs a reason: say why the failure may ship and what fixes it");
  }
  if (waiver.expires_at_ms <= now) {
    return fail(Errc::invalid_argument, fmt::format("the waiver's expiry {} is not in the future; give a later one",
                                                    utc_minute(waiver.expires_at_ms)));
  }
  if (waiver.expires_at_ms - now > kMaxWaiverMs) {
    return fail(Errc::invalid_argument, fmt::format("the waiver would last until {}, more than 30 days; waive for at "
                                                    "most 30 days and waive again if the fix is late",
                                                    utc_minute(waiver.expires_at_ms)));
  }
  return {};
}

Result<std::string> waiving_team(const RiskRegister& reg, std::string_view scope, std::string_view model,
                                 GateMetric metric, std::string_view approver) {
  std::vector<const Risk*> risks;
  if (const Risk* risk = reg.find(scope)) {
    if (risk->gate && risk->gate->model == model && risk->gate->metric == enum_name(metric)) risks.push_back(risk);
  } else {
    risks = reg.risks_of_gate(model, metric);
  }
  std::erase_if(risks, [](const Risk* r) { return r->owner_team.empty(); });
  if (risks.empty()) {
    return fail(Errc::not_found, fmt::format("no risk of the register gates {} {}{}; only a risk's gate is waived, by "
                                             "its owning team",
                                             model, enum_name(metric),
                                             reg.find(scope) != nullptr ? fmt::format(" as risk {}", scope) : ""));
  }
  std::vector<std::string> teams;
  for (const Risk* risk : risks) {
    const RiskTeam* team = reg.team(risk->owner_team);
    if (team != nullptr &&
        std::find(team->approvers.begin(), team->approvers.end(), approver) != team->approvers.end()) {
      return team->name;
    }
    if (std::find(teams.begin(), teams.end(), risk->owner_team) == teams.end()) teams.push_back(risk->owner_team);
  }
  std::vector<std::string> listed;
  for (const auto& name : teams) {
    if (const RiskTeam* team = reg.team(name)) {
      listed.push_back(fmt::format("{} ({})", name, fmt::join(team->approvers, ", ")));
    }
  }
  return fail(Errc::unauthorized, fmt::format("{} is not an approver of the team that owns the gate {} {}; ask one of "
                                              "{}",
                                              approver, model, enum_name(metric), fmt::join(listed, "; ")));
}

bool waiver_applies(const Waiver& waiver, const RiskRegister& reg, std::string_view run_id, TimeMs now) {
  if (!in_force(waiver, now)) return false;
  const Risk* risk = reg.find(waiver.scope);
  if (risk == nullptr && waiver.scope != run_id) return false;
  auto team = waiving_team(reg, waiver.scope, waiver.model, waiver.metric, waiver.approver);
  return team && *team == waiver.team;
}

}  // namespace kiln::qualification

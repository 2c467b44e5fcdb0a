#include "coordinator/qualification/waiver.h"

#include <algorithm>
#include <chrono>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace kiln::qualification {

using json = nlohmann::json;

namespace {

// "2026-12-10 14:00 UTC".
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

}  // namespace

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

std::vector<GateMetric> failing_metrics(const ModelResult& model) {
  const json& entry = model.entry;
  // A stability run's entry names its failed gates (stability_gates.h).
  if (auto gates = entry.find("gates"); gates != entry.end() && gates->is_object()) {
    std::vector<GateMetric> metrics;
    for (const auto& [name, gate] : gates->items()) {
      const auto metric = enum_from_name<GateMetric>(name);
      if (metric && gate.is_object() && report_text(gate, "state") == "failed") metrics.push_back(*metric);
    }
    return metrics;
  }
  if (model.verdict == "performance_regression") return {GateMetric::throughput};
  if (model.verdict != "correctness_regression" && model.verdict != "hardware_suspect") return {};
  std::vector<GateMetric> metrics;
  auto training = entry.find("training");
  if (training != entry.end() && training->is_object() && training->contains("verdict")) {
    const json& gates = training->at("verdict");
    for (auto [part, metric] : {std::pair{"eval", GateMetric::eval}, {"loss_curve", GateMetric::loss_curve}}) {
      auto judged = gates.find(part);
      if (judged != gates.end() && judged->is_object() && !judged->value("passed", true)) metrics.push_back(metric);
    }
  }
  if (metrics.empty()) metrics.push_back(GateMetric::correctness);
  return metrics;
}

namespace {

// The waivers that let every failing metric of `model` through, or none when one is not waived.
std::vector<RecordedWaiver> waivers_for(const ModelResult& model, const std::vector<GateMetric>& metrics,
                                        const std::vector<Waiver>& waivers, const RiskRegister& reg,
                                        std::string_view run_id, TimeMs now) {
  std::vector<RecordedWaiver> applied;
  for (GateMetric metric : metrics) {
    auto waiver = std::find_if(waivers.begin(), waivers.end(), [&](const Waiver& w) {
      return w.model == model.model && w.metric == metric && waiver_applies(w, reg, run_id, now);
    });
    if (waiver == waivers.end()) return {};  // a failure not waived still fails the run
    json one = to_json(*waiver);
    one["text"] = waiver_text(*waiver);
    applied.push_back(recorded_waiver(one));
  }
  return applied;
}

// The word a lapsed waiver's line starts with.
const char* lapse_word(const std::string& why) {
  return why.starts_with("expired")     ? "EXPIRED"
         : why.starts_with("withdrawn") ? "WITHDRAWN"
         : why.starts_with("replaced")  ? "REPLACED"
                                        : "UNRECORDED";
}

// Writes a decision's document over the report's when it changed the report.
std::vector<std::string> judged_in_place(json& report, WaiverJudgement judgement) {
  if (!judgement.texts.empty()) report = to_json(judgement.run);
  return std::move(judgement.texts);
}

}  // namespace

WaiverJudgement apply_waivers(GateRun run, const std::vector<Waiver>& waivers, const RiskRegister& reg, TimeMs now) {
  std::vector<std::string> texts;
  // A report evaluated before keeps the waivers it relied on then.
  std::vector<RecordedWaiver> relied = run.waivers;
  std::string lines;
  for (ModelResult& model : run.models) {
    const auto metrics = failing_metrics(model);
    if (metrics.empty() || !model.fails_run.value_or(true)) continue;
    auto applied = waivers_for(model, metrics, waivers, reg, run.run_id, now);
    if (applied.empty()) continue;
    for (const RecordedWaiver& one : applied) {
      lines += fmt::format("  WAIVED {} on revision {} ({}): {}\n", model.model, model.revision, one.metric, one.text);
      texts.push_back(one.text);
      relied.push_back(one);
    }
    model.waivers = std::move(applied);
    model.fails_run = false;
  }
  if (texts.empty()) return {std::move(run), std::move(texts)};
  run.waivers = std::move(relied);
  const bool none_fails =
      std::none_of(run.models.begin(), run.models.end(), [](const ModelResult& m) { return m.fails_run.value_or(false); });
  const bool was_failed = !run.passed;
  if (run.finished && none_fails && !run.stopped_with_reason) run.passed = true;
  if (run.summary) {
    std::string& text = *run.summary;
    if (was_failed && run.passed) {
      if (auto at = text.find(": FAILED ("); at != std::string::npos) text.replace(at, 10, ": passed with waivers (");
    }
    text += lines;
  }
  return {std::move(run), std::move(texts)};
}

std::vector<std::string> apply_waivers(json& report, const std::vector<Waiver>& waivers, const RiskRegister& reg,
                                       TimeMs now) {
  return judged_in_place(report, apply_waivers(gate_run_from_report(report), waivers, reg, now));
}

std::string why_lapsed(const RecordedWaiver& relied, const std::vector<Waiver>& recorded, TimeMs now) {
  auto held = waiver_from_json(relied.document);
  if (!held) return "no longer recorded";
  const std::string key = waiver_key(*held);
  auto current = std::find_if(recorded.begin(), recorded.end(), [&](const Waiver& w) { return waiver_key(w) == key; });
  if (current == recorded.end()) return "no longer recorded";
  if (current->created_at_ms != held->created_at_ms) return "replaced by " + waiver_text(*current);
  if (!current->withdrawn_by.empty()) {
    return fmt::format("withdrawn by {} at {}", current->withdrawn_by, utc_minute(current->withdrawn_at_ms));
  }
  if (now >= current->expires_at_ms) return "expired at " + utc_minute(current->expires_at_ms);
  return "";
}

WaiverJudgement revoke_lapsed_waivers(GateRun run, const std::vector<Waiver>& recorded, TimeMs now) {
  std::vector<std::string> texts;
  std::vector<RecordedWaiver> lapsed = run.lapsed_waivers;
  std::string lines;
  for (ModelResult& model : run.models) {
    bool revoked = false;
    for (const RecordedWaiver& w : model.waivers) {
      const std::string why = why_lapsed(w, recorded, now);
      if (why.empty()) continue;
      revoked = true;
      texts.push_back(fmt::format("{}: {}", w.text, why));
      lines += fmt::format("  {} {} on revision {} ({}): {}: {}\n", lapse_word(why), model.model, model.revision,
                           w.metric, w.text, why);
      json one = w.document;
      one["why"] = why;
      lapsed.push_back(recorded_waiver(one));
    }
    // A model's failure passes only while every waiver it relied on holds.
    if (!revoked) continue;
    model.waivers.clear();
    model.fails_run = true;
  }
  if (texts.empty()) return {std::move(run), std::move(texts)};
  run.waivers.clear();  // those of the failures still waived
  for (const ModelResult& model : run.models) run.waivers.insert(run.waivers.end(), model.waivers.begin(), model.waivers.end());
  run.lapsed_waivers = std::move(lapsed);
  run.passed = false;
  if (run.summary) {
    std::string& text = *run.summary;
    if (auto at = text.find(": passed with waivers ("); at != std::string::npos) text.replace(at, 23, ": FAILED (");
    text += lines;
  }
  return {std::move(run), std::move(texts)};
}

std::vector<std::string> revoke_lapsed_waivers(json& report, const std::vector<Waiver>& recorded, TimeMs now) {
  return judged_in_place(report, revoke_lapsed_waivers(gate_run_from_report(report), recorded, now));
}

}  // namespace kiln::qualification

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

std::string text_member(const json& object, const char* name) {
  auto it = object.find(name);
  return it != object.end() && it->is_string() ? it->get<std::string>() : std::string();
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
  waiver.scope = text_member(document, "scope");
  waiver.model = text_member(document, "model");
  const auto metric = enum_from_name<GateMetric>(text_member(document, "metric"));
  if (!metric) return bad("metric: throughput, correctness, eval or loss_curve");
  waiver.metric = *metric;
  waiver.team = text_member(document, "team");
  waiver.approver = text_member(document, "approver");
  waiver.reason = text_member(document, "reason");
  for (auto [name, field] : {std::pair{"created_at_ms", &waiver.created_at_ms}, {"expires_at_ms", &waiver.expires_at_ms}}) {
    auto it = document.find(name);
    if (it == document.end() || !it->is_number_integer()) return bad(name);
    *field = it->get<TimeMs>();
  }
  waiver.withdrawn_by = text_member(document, "withdrawn_by");
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

std::vector<GateMetric> failing_metrics(const json& entry) {
  // A stability run's entry names its failed gates (stability_gates.h).
  if (auto gates = entry.find("gates"); gates != entry.end() && gates->is_object()) {
    std::vector<GateMetric> metrics;
    for (const auto& [name, gate] : gates->items()) {
      const auto metric = enum_from_name<GateMetric>(name);
      if (metric && gate.is_object() && text_member(gate, "state") == "failed") metrics.push_back(*metric);
    }
    return metrics;
  }
  const std::string verdict = text_member(entry, "verdict");
  if (verdict == "performance_regression") return {GateMetric::throughput};
  if (verdict != "correctness_regression" && verdict != "hardware_suspect") return {};
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

std::vector<std::string> apply_waivers(json& report, const std::vector<Waiver>& waivers, const RiskRegister& reg,
                                       TimeMs now) {
  std::vector<std::string> texts;
  // A report evaluated before keeps the waivers it relied on then.
  json relied = report.contains("waivers") && report.at("waivers").is_array() ? report.at("waivers") : json::array();
  auto models = report.find("models");
  if (models == report.end() || !models->is_array() || models->empty()) return texts;
  const std::string run_id = text_member(report, "run_id");
  std::string lines;
  for (json& entry : *models) {
    const auto metrics = failing_metrics(entry);
    if (metrics.empty() || !entry.value("fails_run", true)) continue;
    json applied = json::array();
    for (GateMetric metric : metrics) {
      auto waiver = std::find_if(waivers.begin(), waivers.end(), [&](const Waiver& w) {
        return w.model == text_member(entry, "model") && w.metric == metric && waiver_applies(w, reg, run_id, now);
      });
      if (waiver == waivers.end()) break;
      json one = to_json(*waiver);
      one["text"] = waiver_text(*waiver);
      applied.push_back(std::move(one));
    }
    if (applied.size() != metrics.size()) continue;  // a failure not waived still fails the run
    entry["waivers"] = applied;
    entry["fails_run"] = false;
    for (const json& one : applied) {
      const std::string text = one.at("text").get<std::string>();
      lines += fmt::format("  WAIVED {} on revision {} ({}): {}\n", text_member(entry, "model"),
                           text_member(entry, "revision"), one.at("metric").get<std::string>(), text);
      texts.push_back(text);
      relied.push_back(one);
    }
  }
  if (texts.empty()) return texts;
  report["waivers"] = std::move(relied);
  const bool none_fails = std::none_of(models->begin(), models->end(),
                                       [](const json& m) { return m.value("fails_run", false); });
  const bool was_failed = !report.value("passed", false);
  if (report.value("finished", false) && none_fails && !report.contains("reason")) report["passed"] = true;
  if (auto summary = report.find("summary"); summary != report.end() && summary->is_string()) {
    std::string text = summary->get<std::string>();
    if (was_failed && report.value("passed", false)) {
      if (auto at = text.find(": FAILED ("); at != std::string::npos) {
        text.replace(at, 10, ": passed with waivers (");
      }
    }
    *summary = text + lines;
  }
  return texts;
}

std::string why_lapsed(const json& relied, const std::vector<Waiver>& recorded, TimeMs now) {
  auto held = waiver_from_json(relied);
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

std::vector<std::string> revoke_lapsed_waivers(json& report, const std::vector<Waiver>& recorded, TimeMs now) {
  std::vector<std::string> texts;
  auto models = report.find("models");
  if (models == report.end() || !models->is_array()) return texts;
  json lapsed = json::array();
  if (auto earlier = report.find("lapsed_waivers"); earlier != report.end() && earlier->is_array()) lapsed = *earlier;
  std::string lines;
  for (json& entry : *models) {
    auto waivers = entry.find("waivers");
    if (waivers == entry.end() || !waivers->is_array()) continue;
    bool revoked = false;
    for (const json& w : *waivers) {
      const std::string why = why_lapsed(w, recorded, now);
      if (why.empty()) continue;
      revoked = true;
      const std::string word = why.starts_with("expired")     ? "EXPIRED"
                               : why.starts_with("withdrawn") ? "WITHDRAWN"
                               : why.starts_with("replaced")  ? "REPLACED"
                                                              : "UNRECORDED";
      texts.push_back(fmt::format("{}: {}", text_member(w, "text"), why));
      lines += fmt::format("  {} {} on revision {} ({}): {}: {}\n", word, text_member(entry, "model"),
                           text_member(entry, "revision"), text_member(w, "metric"), text_member(w, "text"), why);
      json one = w;
      one["why"] = why;
      lapsed.push_back(std::move(one));
    }
    // A model's failure passes only while every waiver it relied on holds.
    if (!revoked) continue;
    entry.erase("waivers");
    entry["fails_run"] = true;
  }
  if (texts.empty()) return texts;
  json kept = json::array();  // those of the failures still waived
  for (const json& entry : *models) {
    if (auto waivers = entry.find("waivers"); waivers != entry.end() && waivers->is_array()) {
      kept.insert(kept.end(), waivers->begin(), waivers->end());
    }
  }
  report["waivers"] = std::move(kept);
  report["lapsed_waivers"] = std::move(lapsed);
  report["passed"] = false;
  if (auto summary = report.find("summary"); summary != report.end() && summary->is_string()) {
    std::string text = summary->get<std::string>();
    if (auto at = text.find(": passed with waivers ("); at != std::string::npos) text.replace(at, 23, ": FAILED (");
    *summary = text + lines;
  }
  return texts;
}

}  // namespace kiln::qualification

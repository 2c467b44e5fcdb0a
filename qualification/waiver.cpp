#include "qualification/waiver.h"

#include <algorithm>
#include <chrono>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace kiln::qualification {

using json = nlohmann::json;

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

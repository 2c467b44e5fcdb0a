#include "qualification/gate_run.h"

namespace kiln::qualification {

using json = nlohmann::json;

namespace {

std::optional<bool> flag_in(const json& object, const char* name) {
  if (!object.is_object()) return std::nullopt;
  auto it = object.find(name);
  if (it == object.end() || !it->is_boolean()) return std::nullopt;
  return it->get<bool>();
}

std::optional<double> number_in(const json& object, const char* name) {
  if (!object.is_object()) return std::nullopt;
  auto it = object.find(name);
  if (it == object.end() || !it->is_number()) return std::nullopt;
  return it->get<double>();
}

TimeMs time_in(const json& object, const char* name) {
  if (!object.is_object()) return 0;
  auto it = object.find(name);
  return it != object.end() && it->is_number_integer() ? it->get<TimeMs>() : 0;
}

std::vector<RecordedWaiver> waivers_in(const json& object, const char* name) {
  std::vector<RecordedWaiver> waivers;
  if (!object.is_object()) return waivers;
  auto it = object.find(name);
  if (it == object.end() || !it->is_array()) return waivers;
  for (const json& document : *it) waivers.push_back(recorded_waiver(document));
  return waivers;
}

json waiver_documents(const std::vector<RecordedWaiver>& waivers) {
  json list = json::array();
  for (const auto& waiver : waivers) list.push_back(waiver.document);
  return list;
}

ModelResult model_result_of(const json& entry) {
  ModelResult model;
  model.entry = entry;
  model.model = report_text(entry, "model");
  model.revision = report_text(entry, "revision");
  model.verdict = report_text(entry, "verdict");
  model.detail = report_text(entry, "detail");
  // A run that measured the eval score records it beside the verdict.
  if (entry.is_object()) {
    if (auto eval = entry.find("eval"); eval != entry.end() && eval->is_object()) {
      model.eval_score = number_in(*eval, "score");
      model.eval_reference = number_in(*eval, "reference");
    }
  }
  model.fails_run = flag_in(entry, "fails_run");
  model.waivers = waivers_in(entry, "waivers");
  return model;
}

}  // namespace

RecordedWaiver recorded_waiver(const json& document) {
  RecordedWaiver waiver;
  waiver.model = report_text(document, "model");
  waiver.metric = report_text(document, "metric");
  waiver.text = report_text(document, "text");
  waiver.expires_at_ms = time_in(document, "expires_at_ms");
  waiver.why = report_text(document, "why");
  waiver.document = document;
  return waiver;
}

GateRun gate_run_from_report(const json& report) {
  GateRun run;
  run.document = report;
  if (!report.is_object()) return run;
  run.schema = report_text(report, "schema");
  run.run_id = report_text(report, "run_id");
  run.tier = report_text(report, "tier");
  run.bundle_id = report_text(report, "candidate_bundle_id");
  run.finished = flag_in(report, "finished").value_or(false);
  run.passed = flag_in(report, "passed").value_or(false);
  run.judged = flag_in(report, "judged").value_or(false);
  run.stopped_with_reason = report.contains("reason");
  run.started_at_ms = time_in(report, "started_at_ms");
  run.finished_at_ms = time_in(report, "finished_at_ms");
  if (auto summary = report.find("summary"); summary != report.end() && summary->is_string()) {
    run.summary = summary->get<std::string>();
  }
  if (auto models = report.find("models"); models != report.end() && models->is_array()) {
    for (const json& entry : *models) run.models.push_back(model_result_of(entry));
  }
  run.waivers = waivers_in(report, "waivers");
  run.lapsed_waivers = waivers_in(report, "lapsed_waivers");
  if (auto soak = report.find("soak"); soak != report.end() && soak->is_object()) {
    run.soak = SoakRounds{soak->value("rounds_asked", 0U), soak->value("rounds_run", 0U)};
  }
  if (auto tickets = report.find("tickets"); tickets != report.end() && tickets->is_array()) {
    for (const json& ticket : *tickets) {
      if (ticket.is_object()) run.ticket_teams[report_text(ticket, "id")] = report_text(ticket, "team");
    }
  }
  return run;
}

json to_json(const GateRun& run) {
  const GateRun recorded = gate_run_from_report(run.document);
  json document = run.document;
  // A waiver lapsed since it was read: the report was judged again, which states its verdict and
  // the waivers it still relies on (none: an empty list), whatever it said before.
  const json lapsed = waiver_documents(run.lapsed_waivers);
  const bool judged_again = lapsed != waiver_documents(recorded.lapsed_waivers);
  if (judged_again) document["lapsed_waivers"] = lapsed;
  if (run.passed != recorded.passed || judged_again) document["passed"] = run.passed;
  if (run.judged != recorded.judged) document["judged"] = run.judged;
  if (run.summary && run.summary != recorded.summary) document["summary"] = *run.summary;
  if (const json waivers = waiver_documents(run.waivers); waivers != waiver_documents(recorded.waivers) || judged_again) {
    document["waivers"] = waivers;
  }
  for (std::size_t i = 0; i < run.models.size() && i < recorded.models.size(); ++i) {
    const ModelResult& model = run.models[i];
    const ModelResult& was = recorded.models[i];
    json& entry = document["models"][i];
    if (model.fails_run && model.fails_run != was.fails_run) entry["fails_run"] = *model.fails_run;
    if (const json waivers = waiver_documents(model.waivers); waivers != waiver_documents(was.waivers)) {
      if (model.waivers.empty()) {
        entry.erase("waivers");
      } else {
        entry["waivers"] = waivers;
      }
    }
  }
  return document;
}

}  // namespace kiln::qualification

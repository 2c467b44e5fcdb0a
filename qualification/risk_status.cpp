#include "qualification/risk_status.h"

#include <algorithm>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/config/toml_errors.h"
#include "common/text/duration_text.h"
#include "qualification/waiver.h"

namespace kiln::qualification {

using json = nlohmann::json;

namespace {

constexpr DurationMs kDayMs = 24 * 60 * kMinuteMs;

// The waiver text for `metric` of a model run, or "" when none lets it through at `now`.
std::string waiver_of(const ModelResult& model, GateMetric metric, TimeMs now) {
  for (const RecordedWaiver& w : model.waivers) {
    if (w.metric == enum_name(metric) && w.expires_at_ms > now) return w.text;
  }
  return "";
}

// The training gate's part (eval or loss_curve): passed or not, nullopt when not judged.
std::optional<bool> training_part(const json& entry, const char* part) {
  auto training = entry.find("training");
  if (training == entry.end() || !training->is_object()) return std::nullopt;
  auto verdict = training->find("verdict");
  if (verdict == training->end() || !verdict->is_object()) return std::nullopt;
  auto judged = verdict->find(part);
  if (judged == verdict->end() || !judged->is_object()) return std::nullopt;
  auto passed = judged->find("passed");
  if (passed == judged->end() || !passed->is_boolean()) return std::nullopt;
  return passed->get<bool>();
}

int badness(GateState state) {
  switch (state) {
    case GateState::passed: return 0;
    case GateState::flaky: return 1;
    case GateState::inconclusive: return 2;
    case GateState::waived: return 3;
    case GateState::failed: return 4;
  }
  return 0;
}

bool touches(const Change& change, const QualificationModel& model) {
  if (change.components.empty()) return true;  // a change that names nothing may touch anything
  return std::any_of(change.components.begin(), change.components.end(), [&](const std::string& c) {
    return c == model.name ||
           std::find(model.components.begin(), model.components.end(), c) != model.components.end();
  });
}

std::string age_text(DurationMs age_ms) { return duration_text(static_cast<std::uint64_t>(std::max<DurationMs>(age_ms, 0))); }

}  // namespace

std::optional<MetricVerdict> metric_verdict(const ModelResult& model, GateMetric metric, TimeMs now) {
  const json& entry = model.entry;
  const std::string& verdict = model.verdict;
  const std::string& detail = model.detail;
  const auto judged = [&](bool passed, std::string what) -> MetricVerdict {
    if (passed) return {GateState::passed, std::move(what), ""};
    std::string waiver = waiver_of(model, metric, now);
    return {waiver.empty() ? GateState::failed : GateState::waived, std::move(what), std::move(waiver)};
  };
  // A stability run's entry says per gate what it judged (stability_gates.h).
  if (auto gates = entry.find("gates"); gates != entry.end() && gates->is_object()) {
    auto gate = gates->find(enum_name(metric));
    if (gate == gates->end() || !gate->is_object()) return std::nullopt;
    const auto state = enum_from_name<GateState>(report_text(*gate, "state"));
    if (!state) return std::nullopt;
    if (*state == GateState::passed || *state == GateState::failed) {
      return judged(*state == GateState::passed, report_text(*gate, "detail"));
    }
    return MetricVerdict{*state, report_text(*gate, "detail"), ""};
  }
  switch (metric) {
    case GateMetric::throughput: {
      auto performance = entry.find("performance");
      if (performance == entry.end() || performance->is_null()) return std::nullopt;
      if (verdict == "inconclusive") return MetricVerdict{GateState::inconclusive, detail, ""};
      if (verdict == "performance_regression") return judged(false, detail);
      if (verdict == "passed" || verdict == "improved") return judged(true, detail);
      return std::nullopt;
    }
    case GateMetric::correctness:
      if (verdict == "correctness_regression" || verdict == "hardware_suspect") return judged(false, detail);
      if (verdict == "flaky") return MetricVerdict{GateState::flaky, detail, ""};
      if (verdict == "passed" || verdict == "improved" || verdict == "performance_regression" ||
          verdict == "inconclusive") {
        return judged(true, "outputs within the golden's tolerance");
      }
      return std::nullopt;
    case GateMetric::eval:
    case GateMetric::loss_curve: {
      const char* part = metric == GateMetric::eval ? "eval" : "loss_curve";
      const auto passed = training_part(entry, part);
      if (!passed) return std::nullopt;
      return judged(*passed, *passed ? fmt::format("{} within its gate", part) : detail);
    }
  }
  return std::nullopt;
}

bool judges_gates(const GateRun& run) {
  return run.finished && (run.schema == kQualificationRunSchema || run.schema == kStabilityRunSchema);
}

std::vector<GateRun> gate_runs_from_reports(const std::vector<json>& reports) {
  std::vector<GateRun> runs;
  for (const json& report : reports) {
    GateRun run = gate_run_from_report(report);
    if (judges_gates(run)) runs.push_back(std::move(run));
  }
  return runs;
}

std::string_view run_tier_of(RiskTier tier) {
  switch (tier) {
    case RiskTier::presubmit: return "smoke";
    case RiskTier::nightly: return "nightly";
    case RiskTier::release: return "release";
    case RiskTier::stability: return "stability";
  }
  return "";
}

namespace {

std::string page_culprit(const Risk& risk, const std::string& run_id) { return fmt::format("risk:{}@{}", risk.id, run_id); }

// Who a gate failed by `entry`, a model run of `run`, pages (risk_status.h, risk_gate_pages).
void route_page(const Risk& risk, const GateRun& run, const ModelResult& model, GateResult& result) {
  const json& entry = model.entry;
  if (auto ids = entry.find("ticket_ids"); ids != entry.end() && ids->is_array() && !ids->empty() &&
                                           ids->front().is_string()) {
    result.paged_ticket = ids->front().get<std::string>();
    auto team = run.ticket_teams.find(result.paged_ticket);
    result.paged_team = team != run.ticket_teams.end() ? team->second : "";
    result.paged_by_triage = true;
    return;
  }
  const std::string model_owner = report_text(entry, "owner_team");
  const bool software = model.verdict == "correctness_regression" || model.verdict == "performance_regression";
  result.paged_team = software && risk.layer == RiskLayer::hardware && !model_owner.empty() ? model_owner
                                                                                            : risk.page.team;
  result.paged_ticket = ticket_id(TicketKind::risk_gate, page_culprit(risk, run.run_id));
}

// The risk's gate's result in one run: the worst over the model's revisions, with its page when
// it failed; nullopt when not judged.
std::optional<GateResult> result_in(const GateRun& run, const Risk& risk, GateMetric metric, TimeMs now) {
  std::optional<GateResult> result;
  const ModelResult* worst = nullptr;
  for (const ModelResult& model : run.models) {
    if (model.model != risk.gate->model) continue;
    auto verdict = metric_verdict(model, metric, now);
    if (!verdict) continue;
    if (result && badness(verdict->state) <= badness(result->state)) continue;
    const std::string& revision = model.revision;
    result = GateResult{};
    result->run_id = run.run_id;
    result->state = verdict->state;
    result->detail = revision.empty() ? verdict->detail : fmt::format("revision {}: {}", revision, verdict->detail);
    result->waiver = verdict->waiver;
    result->finished_at_ms = run.finished_at_ms;
    worst = &model;
  }
  if (result && result->state == GateState::failed) route_page(risk, run, *worst, *result);
  return result;
}

void check_period(const Risk& risk, const QualificationModel& model, const GateResult& latest,
                  const std::vector<GateRun>& runs, const std::vector<Change>& changes, TimeMs now,
                  std::vector<Gap>& gaps) {
  const std::string ran = fmt::format("its gate last ran in {} ({} ago)", latest.run_id, age_text(now - latest.finished_at_ms));
  switch (risk.tier) {
    case RiskTier::presubmit: {
      const GateRun* judged = nullptr;
      for (const GateRun& run : runs) {
        if (run.run_id == latest.run_id) judged = &run;
      }
      const TimeMs since = judged != nullptr ? judged->started_at_ms : latest.finished_at_ms;
      for (const Change& change : changes) {
        if (change.merged_at_ms > since && touches(change, model)) {
          gaps.push_back({GapKind::stale, fmt::format("change {} touching {} merged after {}; a presubmit gate runs "
                                                      "for every change that touches its model",
                                                      change.id, model.name, ran)});
          return;
        }
      }
      return;
    }
    case RiskTier::nightly:
      if (now - latest.finished_at_ms > kDayMs) {
        gaps.push_back({GapKind::stale, fmt::format("{}, more than the nightly's 1 day; check the qualifier's "
                                                    "[schedule]",
                                                    ran)});
      }
      return;
    case RiskTier::stability: {
      const DurationMs period_ms = static_cast<DurationMs>(risk.period_days) * kDayMs;
      if (now - latest.finished_at_ms > period_ms) {
        gaps.push_back({GapKind::stale, fmt::format("{}, more than its period of {} days", ran, risk.period_days)});
      }
      return;
    }
    case RiskTier::release: {
      const GateRun* last_release = nullptr;
      for (const GateRun& run : runs) {
        if (run.tier == "release" && (last_release == nullptr || run.finished_at_ms > last_release->finished_at_ms)) {
          last_release = &run;
        }
      }
      if (last_release != nullptr && last_release->run_id != latest.run_id &&
          last_release->finished_at_ms > latest.finished_at_ms) {
        gaps.push_back({GapKind::stale, fmt::format("the last release qualification {} did not judge it; {}",
                                                    last_release->run_id, ran)});
      }
      return;
    }
  }
}

}  // namespace

std::vector<RiskStatus> assess_risks(const RiskRegister& reg, const ModelSet& set, const std::vector<GateRun>& runs,
                                     const std::vector<Change>& changes, TimeMs now) {
  std::vector<std::string_view> model_names;
  for (const auto& m : set.models) model_names.push_back(m.name);
  std::vector<std::string_view> metric_names;
  for (const auto& entry : enum_names(GateMetric{})) metric_names.push_back(entry.second);
  std::vector<RiskStatus> statuses;
  for (const Risk& risk : reg.risks) {
    RiskStatus status{&risk, std::nullopt, {}};
    if (risk.owner_team.empty()) {
      status.gaps.push_back({GapKind::no_owner, "no owner_team; every risk needs a team that owns it and can waive "
                                                "its gate"});
    }
    if (!risk.gate) {
      status.gaps.push_back({GapKind::no_gate, "no gate; name a model of the set and a metric (throughput, "
                                               "correctness, eval, loss_curve) that would catch it"});
      statuses.push_back(std::move(status));
      continue;
    }
    const QualificationModel* model = set.find(risk.gate->model);
    const auto metric = enum_from_name<GateMetric>(risk.gate->metric);
    if (model == nullptr) {
      const auto near = config::nearest_name(risk.gate->model, model_names);
      status.gaps.push_back({GapKind::unknown_model,
                             fmt::format("the gate's model '{}' is not in the qualification set{}", risk.gate->model,
                                         near ? fmt::format("; did you mean '{}'?", *near)
                                              : "; name a model of the set")});
    }
    if (!metric) {
      const auto near = config::nearest_name(risk.gate->metric, metric_names);
      status.gaps.push_back({GapKind::unknown_metric,
                             fmt::format("the gate's metric '{}' is not one kiln judges (throughput, correctness, "
                                         "eval, loss_curve){}",
                                         risk.gate->metric, near ? fmt::format("; did you mean '{}'?", *near) : "")});
    }
    if (model == nullptr || !metric) {
      statuses.push_back(std::move(status));
      continue;
    }
    for (const GateRun& run : runs) {
      if (run.tier != run_tier_of(risk.tier)) continue;
      auto result = result_in(run, risk, *metric, now);
      if (result && (!status.latest || result->finished_at_ms > status.latest->finished_at_ms)) status.latest = result;
    }
    if (!status.latest) {
      status.gaps.push_back({GapKind::never_run, fmt::format("no finished {} run has judged {} {}; {}",
                                                             run_tier_of(risk.tier), model->name, risk.gate->metric,
                                                             risk.tier == RiskTier::stability
                                                                 ? "schedule its stability run"
                                                                 : "make sure the tier's runs include the model")});
    } else {
      status.latest->age_ms = std::max<DurationMs>(now - status.latest->finished_at_ms, 0);
      check_period(risk, *model, *status.latest, runs, changes, now, status.gaps);
    }
    statuses.push_back(std::move(status));
  }
  return statuses;
}

std::vector<GatePage> risk_gate_pages(const RiskRegister& reg, const json& report, TimeMs now) {
  return risk_gate_pages(reg, gate_run_from_report(report), now);
}

std::vector<GatePage> risk_gate_pages(const RiskRegister& reg, const GateRun& run, TimeMs now) {
  std::vector<GatePage> pages;
  if (!judges_gates(run)) return pages;
  for (const Risk& risk : reg.risks) {
    if (!risk.gate || run.tier != run_tier_of(risk.tier)) continue;
    const auto metric = enum_from_name<GateMetric>(risk.gate->metric);
    if (!metric) continue;
    auto result = result_in(run, risk, *metric, now);
    if (!result || result->state != GateState::failed) continue;
    GatePage page{&risk, *result, std::nullopt};
    if (!result->paged_by_triage) {
      const json evidence = {{"risk", risk.id},          {"run_id", run.run_id},         {"model", risk.gate->model},
                             {"metric", risk.gate->metric}, {"rule", gate_rule_text(*metric)}, {"detail", result->detail},
                             {"owner_team", risk.owner_team}, {"layer", enum_name(risk.layer)}};
      Ticket ticket = make_ticket(TicketKind::risk_gate, result->paged_team,
                                  fmt::format("risk {} ({}): gate {} {} failed in {}", risk.id, risk.title,
                                              risk.gate->model, risk.gate->metric, run.run_id),
                                  page_culprit(risk, run.run_id), layer_from_string(enum_name(risk.layer)),
                                  evidence.dump(), now);
      ticket.severity = std::string(enum_name(risk.page.severity));
      page.ticket = std::move(ticket);
    }
    pages.push_back(std::move(page));
  }
  return pages;
}

std::vector<Ticket> risk_gate_tickets(const RiskRegister& reg, const json& report, TimeMs now) {
  return risk_gate_tickets(reg, gate_run_from_report(report), now);
}

std::vector<Ticket> risk_gate_tickets(const RiskRegister& reg, const GateRun& run, TimeMs now) {
  std::vector<Ticket> tickets;
  for (auto& page : risk_gate_pages(reg, run, now)) {
    if (page.ticket) tickets.push_back(std::move(*page.ticket));
  }
  return tickets;
}

namespace {

// "paged lab through the run's ticket kiln-..." or "paged compiler sev2, ticket kiln-...".
std::string paged_text(const GateResult& result, Severity severity) {
  const std::string team = result.paged_team.empty() ? "its owner" : result.paged_team;
  if (result.paged_by_triage) return fmt::format("paged {} through the run's ticket {}", team, result.paged_ticket);
  return fmt::format("paged {} {}, ticket {}", team, enum_name(severity), result.paged_ticket);
}

}  // namespace

std::string page_text(const GatePage& page) {
  const Risk& risk = *page.risk;
  if (page.ticket) return fmt::format("paged {} ({}): {}", page.ticket->team, page.ticket->severity, page.ticket->title);
  return fmt::format("risk {}: gate {} {} failed in {}; {}, as its triage named, and not again for the risk",
                     risk.id, risk.gate->model, risk.gate->metric, page.result.run_id,
                     paged_text(page.result, risk.page.severity));
}

std::size_t gap_count(const std::vector<RiskStatus>& statuses) {
  std::size_t count = 0;
  for (const RiskStatus& s : statuses) count += s.gaps.size();
  return count;
}

std::string risks_text(const std::vector<RiskStatus>& statuses) {
  std::string out = fmt::format("{:<30} {:<16} {:<9} {:<10} {:<46} {:<12} {}\n", "RISK", "OWNER", "LAYER", "TIER",
                                "GATE", "VERDICT", "AGE");
  for (const RiskStatus& s : statuses) {
    const Risk& r = *s.risk;
    const std::string gate = r.gate ? fmt::format("{} {}", r.gate->model, r.gate->metric) : "-";
    out += fmt::format("{:<30} {:<16} {:<9} {:<10} {:<46} {:<12} {}\n", r.id, r.owner_team.empty() ? "-" : r.owner_team,
                       enum_name(r.layer), enum_name(r.tier), gate,
                       s.latest ? enum_name(s.latest->state) : std::string_view("-"),
                       s.latest ? age_text(s.latest->age_ms) : "-");
    if (s.latest && !s.latest->waiver.empty()) out += fmt::format("    {}\n", s.latest->waiver);
    if (s.latest && s.latest->state == GateState::failed) {
      out += fmt::format("    FAILED in {}: {} ({})\n", s.latest->run_id, s.latest->detail,
                         paged_text(*s.latest, r.page.severity));
    }
  }
  const std::size_t gaps = gap_count(statuses);
  if (gaps == 0) return out + "no gaps: every risk has an owner and a gate judged within its tier's period\n";
  out += fmt::format("{} gap{}:\n", gaps, gaps == 1 ? "" : "s");
  for (const RiskStatus& s : statuses) {
    for (const Gap& gap : s.gaps) out += fmt::format("  GAP {} ({}): {}\n", s.risk->id, enum_name(gap.kind), gap.detail);
  }
  return out;
}

json to_json(const std::vector<RiskStatus>& statuses) {
  json risks = json::array();
  for (const RiskStatus& s : statuses) {
    const Risk& r = *s.risk;
    json entry = {{"id", r.id},
                  {"title", r.title},
                  {"owner_team", r.owner_team},
                  {"layer", enum_name(r.layer)},
                  {"tier", enum_name(r.tier)},
                  {"page", {{"team", r.page.team}, {"severity", enum_name(r.page.severity)}}}};
    entry["gate"] = r.gate ? json{{"model", r.gate->model}, {"metric", r.gate->metric}} : json(nullptr);
    if (r.gate) {
      if (auto metric = enum_from_name<GateMetric>(r.gate->metric)) entry["gate"]["rule"] = gate_rule_text(*metric);
    }
    entry["latest"] = s.latest ? json{{"run_id", s.latest->run_id},
                                      {"verdict", enum_name(s.latest->state)},
                                      {"detail", s.latest->detail},
                                      {"waiver", s.latest->waiver},
                                      {"finished_at_ms", s.latest->finished_at_ms},
                                      {"age_ms", s.latest->age_ms}}
                               : json(nullptr);
    if (s.latest) {
      entry["latest"]["paged"] = s.latest->state != GateState::failed
                                     ? json(nullptr)
                                     : json{{"team", s.latest->paged_team},
                                            {"ticket", s.latest->paged_ticket},
                                            {"by_triage", s.latest->paged_by_triage}};
    }
    json gaps = json::array();
    for (const Gap& gap : s.gaps) gaps.push_back({{"kind", enum_name(gap.kind)}, {"detail", gap.detail}});
    entry["gaps"] = std::move(gaps);
    risks.push_back(std::move(entry));
  }
  return {{"risks", std::move(risks)}, {"gaps", gap_count(statuses)}};
}

}  // namespace kiln::qualification

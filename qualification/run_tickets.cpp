#include "qualification/run_tickets.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "qualification/run_evidence.h"

namespace kiln::qualification {

using json = nlohmann::json;

Ticket hardware_suspect_ticket(const HardwareSuspect& suspect, TimeMs now_ms) {
  KILN_ASSERT(suspect.action.quarantine_node.has_value(), "a hardware suspect names the node");
  const std::string& node = *suspect.action.quarantine_node;
  const json evidence = {{"run_id", suspect.run_id},     {"model", suspect.model},
                         {"revision", suspect.revision}, {"bundle", suspect.bundle_id},
                         {"node", node},                 {"failure", suspect.failure},
                         {"triage", to_json(suspect.action)}};
  return make_ticket(TicketKind::hardware_suspect, suspect.action.ticket_team.value_or(suspect.lab_team),
                     fmt::format("node {} (revision {}) suspect: {} fails there and passes on {}", node,
                                 suspect.revision, suspect.model, suspect.rerun_node),
                     "node:" + node, std::nullopt, evidence.dump(), now_ms);
}

namespace {

// "throughput -3.00%" or "outputs incorrect".
std::string regression_words(TicketKind kind, const std::optional<stats::ModelGateOutcome>& performance) {
  if (kind != TicketKind::performance_regression) return "outputs incorrect";
  const double shift = performance && performance->initial ? performance->initial->shift.relative : 0.0;
  return "throughput " + percent(shift);
}

// What a culprit's and an unpinned regression's tickets both say (CulpritFound and
// RegressionUnpinned name these fields alike).
template <class Regression>
json regression_evidence(const Regression& regression) {
  json evidence = {{"run_id", regression.run_id},
                   {"model", regression.model},
                   {"revision", regression.revision},
                   {"probe_model", regression.probe_model},
                   {"candidate_bundle", regression.candidate_bundle_id},
                   {"baseline_bundle", regression.baseline_bundle_id},
                   {"detail", regression.detail},
                   {"bisection", to_json(regression.bisection)}};
  if (regression.performance) evidence["performance"] = to_json(*regression.performance);
  if (regression.triage) evidence["triage"] = to_json(*regression.triage);
  return evidence;
}

}  // namespace

Ticket culprit_ticket(const CulpritFound& found, TimeMs now_ms) {
  json evidence = regression_evidence(found);
  if (!found.models.empty()) evidence["models"] = found.models;
  const Change& culprit = found.culprit;
  const std::string models = found.models.size() > 1
                                 ? fmt::format("{} and {} more", found.model, found.models.size() - 1)
                                 : found.model;
  const std::string title =
      fmt::format("{}: {} on revision {} since change {} ({}, {})", models,
                  regression_words(found.kind, found.performance), found.revision, culprit.id,
                  to_string(culprit.layer), culprit.owner_team);
  return make_culprit_ticket(culprit, found.kind, title, evidence.dump(), now_ms);
}

Ticket unpinned_ticket(const RegressionUnpinned& regression, TimeMs now_ms) {
  const BisectResult& bisection = regression.bisection;
  KILN_ASSERT(!bisection.suspects.empty(), "an ambiguous bisection names its suspects");
  const std::string range = bisection.suspects.size() == 1
                                ? bisection.suspects.front()
                                : fmt::format("{}..{}", bisection.suspects.front(), bisection.suspects.back());
  json evidence = regression_evidence(regression);
  evidence["suspects"] = bisection.suspects;
  const std::string title = fmt::format(
      "{}: {} on revision {} since one of {} changes ({}); the bisection could not pin it down: {}", regression.model,
      regression_words(regression.kind, regression.performance), regression.revision, bisection.suspects.size(), range,
      bisection.detail);
  return make_ticket(regression.kind, regression.owner_team, title, "range:" + regression.model + ":" + range,
                     std::nullopt, evidence.dump(), now_ms);
}

std::string RunTickets::file(Ticket ticket) {
  const std::string key = dedupe_key(ticket);
  if (auto it = id_by_dedupe_key_.find(key); it != id_by_dedupe_key_.end()) return it->second;
  id_by_dedupe_key_[key] = ticket.id;
  report_.tickets.push_back(ticket);
  const std::string id = ticket.id;
  book_.push(run_action::FileTicket{std::move(ticket)});
  return id;
}

}  // namespace kiln::qualification

#include "qualification/stability_gates.h"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

namespace kiln::qualification {

using json = nlohmann::json;

GateMetric stability_gate_of(stability::FailureKind kind) {
  switch (kind) {
    case stability::FailureKind::nan:
    case stability::FailureKind::loss_spike:
    case stability::FailureKind::hang: return GateMetric::loss_curve;
    case stability::FailureKind::throughput_decay: return GateMetric::throughput;
    case stability::FailureKind::ecc:
    case stability::FailureKind::link: return GateMetric::correctness;
  }
  return GateMetric::loss_curve;
}

namespace {

// Few enough failures to read in a ticket; the report holds every one.
constexpr std::size_t kFailuresShown = 3;

std::string what_it_watches(GateMetric metric) {
  switch (metric) {
    case GateMetric::loss_curve: return "no NaN or inf, no loss spike, no hang";
    case GateMetric::throughput: return "no throughput decay";
    case GateMetric::correctness: return "no device error (ECC, link)";
    case GateMetric::eval: break;
  }
  return "";
}

}  // namespace

std::vector<StabilityGate> stability_gates(const stability::StabilityReport& report) {
  std::vector<StabilityGate> gates;
  for (GateMetric metric : {GateMetric::loss_curve, GateMetric::throughput, GateMetric::correctness}) {
    // Episodes, not firings: one cause on one chip fails the gate once, with its occurrences.
    std::vector<std::string> seen;
    std::size_t episodes = 0;
    std::uint64_t failures = 0;
    for (const auto& e : report.episodes) {
      if (stability_gate_of(e.kind) != metric) continue;
      ++episodes;
      failures += e.occurrences;
      if (seen.size() >= kFailuresShown) continue;
      std::string detail;
      for (const auto& rank : report.ranks) {
        if (rank.rank != e.rank || rank.job_id != e.job_id || rank.node_id != e.node_id) continue;
        for (const auto& f : rank.failures) {
          if (f.kind == e.kind && f.chip == e.chip && detail.empty()) detail = f.detail;
        }
      }
      seen.push_back(fmt::format("{} on {} rank {}{} at step {}{}: {}", enum_name(e.kind), e.node_id, e.rank,
                                 e.chip ? fmt::format(" chip {}", *e.chip) : "", e.first_step,
                                 e.occurrences > 1
                                     ? fmt::format(" ({} times, to step {})", e.occurrences, e.last_step)
                                     : "",
                                 detail));
    }
    StabilityGate gate{metric, GateState::passed, ""};
    if (failures > 0) {
      gate.state = GateState::failed;
      gate.detail = fmt::format("{} episode{} ({} failure{}) in {:.1f} chip-hours: {}{}", episodes,
                                episodes == 1 ? "" : "s", failures, failures == 1 ? "" : "s", report.chip_hours,
                                fmt::join(seen, "; "),
                                episodes > seen.size() ? fmt::format("; {} more", episodes - seen.size()) : "");
    } else if (!report.complete) {
      const auto missing = std::count_if(report.ranks.begin(), report.ranks.end(),
                                         [](const stability::RankRun& r) { return !r.reported; });
      gate.state = GateState::inconclusive;
      gate.detail = fmt::format("{} in the {:.1f} chip-hours reported, but {} rank{} did not report; run it again",
                                what_it_watches(metric), report.chip_hours, missing, missing == 1 ? "" : "s");
    } else {
      gate.detail = fmt::format("{} in {:.1f} chip-hours", what_it_watches(metric), report.chip_hours);
    }
    gates.push_back(std::move(gate));
  }
  return gates;
}

json stability_run_document(const stability::StabilityReport& report, const StabilityRunFacts& facts) {
  std::vector<std::string> nodes;
  for (const auto& rank : report.ranks) {
    if (std::find(nodes.begin(), nodes.end(), rank.node_id) == nodes.end()) nodes.push_back(rank.node_id);
  }
  // An entry per gate, so that a waiver lets one gate's failure through and not the others'.
  json models = json::array();
  for (const StabilityGate& gate : stability_gates(report)) {
    const bool failed = gate.state == GateState::failed;
    const std::string metric(enum_name(gate.metric));
    models.push_back({{"model", facts.model},
                      {"revision", facts.revision},
                      {"gate", metric},
                      {"verdict", enum_name(gate.state)},
                      {"fails_run", failed},
                      {"detail", gate.detail},
                      {"nodes", nodes},
                      {"node_backends", facts.node_backends},
                      {"gates", {{metric, {{"state", enum_name(gate.state)}, {"detail", gate.detail}}}}}});
  }
  const std::string summary = fmt::format("kiln stability {}: {} ({} on {} chips, {:g} h)\n", facts.run_id,
                                          report.passed ? "passed" : "FAILED", facts.model, report.chips,
                                          report.hours_asked) +
                              stability::to_text(report);
  json document = stability::to_json(report);
  document["run_id"] = facts.run_id;
  document["tier"] = "stability";
  document["finished"] = true;
  document["started_at_ms"] = facts.started_at_ms;
  document["finished_at_ms"] = facts.finished_at_ms;
  document["models"] = std::move(models);
  document["summary"] = summary;
  // A run with ranks missing does not pass, even with its failures waived (waiver.h).
  if (!report.complete) document["reason"] = "not every rank reported";
  return document;
}

std::optional<StabilityJudgement> judge_stability_run(GateRun run, const std::vector<Waiver>& waivers,
                                                      const RiskRegister& reg, TimeMs now) {
  if (run.judged || !run.finished) return std::nullopt;
  auto waived = apply_waivers(std::move(run), waivers, reg, now);
  StabilityJudgement judgement{std::move(waived.run), std::move(waived.texts), {}};
  judgement.pages = risk_gate_tickets(reg, judgement.run, now);
  judgement.run.judged = true;
  return judgement;
}

}  // namespace kiln::qualification

// A stability run as the risk register reads it: the gates a long training run judges, for the
// model of the set it trained, recorded on the coordinator (a stability_run record,
// kiln.stability-run/1) beside the run's report. The register reads its `models` as it reads a
// qualification run's (risk_status.h), so a stability risk's gate gets a verdict; the qualifier
// applies waivers to it and pages its failing gates (waiver.h, risk_status.h). Pure.
//
//   loss_curve   no NaN or inf in the loss, no loss spike, no hang
//   throughput   no throughput decay over the run
//   correctness  no device error (uncorrected ECC, a link down): what such a chip computed is
//                not trusted
//
// A gate with a failure fails; a gate without one passes when every rank reported, and is
// inconclusive when a rank did not (part of the run is missing).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "common/stability/report.h"
#include "common/time.h"
#include "records/risk_register.h"
#include "qualification/risk_status.h"
#include "qualification/ticket.h"
#include "qualification/waiver.h"

namespace kiln::qualification {

// The gate a failure kind counts against.
GateMetric stability_gate_of(stability::FailureKind kind);

struct StabilityGate {
  GateMetric metric = GateMetric::loss_curve;
  GateState state = GateState::passed;  // passed, failed or inconclusive
  std::string detail;                   // what was seen, with its evidence
};
// The three gates, in the order above.
std::vector<StabilityGate> stability_gates(const stability::StabilityReport& report);

// What the command knows of the run besides its report.
struct StabilityRunFacts {
  std::string run_id;
  std::string model;     // the set's model name the gates are recorded under
  std::string revision;  // the nodes' hardware revision
  TimeMs started_at_ms = 0;
  TimeMs finished_at_ms = 0;
  std::map<std::string, std::string> node_backends;  // node id -> sim, cpu or silicon when it ran
};

// The stability_run record: the report's JSON (kiln.stability-run/1, stability::to_json) with
// run_id, tier "stability", finished, started_at_ms, finished_at_ms, `models` (an entry per gate:
// model, revision, gate, verdict passed, failed or inconclusive, fails_run, detail, nodes,
// node_backends, gates {metric: {state, detail}}), `summary` (the report's text headed "kiln stability RUN: passed|FAILED
// (...)") and, when a rank did not report, `reason`.
nlohmann::json stability_run_document(const stability::StabilityReport& report, const StabilityRunFacts& facts);

// A recorded stability run judged by the risk register, as a qualification run is when it
// finishes: the waivers in force at `now` applied, then a page for every risk gate it still
// fails; the report marked `judged`, so that it is judged once. The qualifier files the pages,
// then records the report.
struct StabilityJudgement {
  GateRun run;
  std::vector<std::string> waived;  // the texts of the waivers applied
  std::vector<Ticket> pages;        // the risk_gate tickets
};
// nullopt when it is not to be judged: not finished, or judged already.
std::optional<StabilityJudgement> judge_stability_run(GateRun run, const std::vector<Waiver>& waivers,
                                                      const RiskRegister& reg, TimeMs now);

}  // namespace kiln::qualification

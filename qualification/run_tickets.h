// The ticket phase of a run: what a proven problem's ticket says (title, team, culprit and the
// evidence: the gate's or triage's figures, every bisection probe) and filing it at most once
// per dedupe key in the run (a second model with the same culprit gets the first one's id).
// Pure: the shell files FileTicket actions with its sink, which dedupes across runs.
#pragma once

#include <map>
#include <optional>
#include <string>

#include "common/stats/perf_gate.h"
#include "common/time.h"
#include "qualification/bisect.h"
#include "records/change.h"
#include "qualification/run_context.h"
#include "qualification/run_types.h"
#include "qualification/ticket.h"
#include "qualification/triage.h"

namespace kiln::qualification {

// A node that fails a model the other node passes: the lab's ticket.
struct HardwareSuspect {
  std::string run_id;
  std::string model;
  std::string revision;
  std::string bundle_id;
  std::string rerun_node;  // where the model passes
  std::string failure;     // why it failed on the suspect node
  TriageAction action;     // hardware_suspect, with the node to quarantine
  std::string lab_team;    // when the action names no team
};
Ticket hardware_suspect_ticket(const HardwareSuspect& suspect, TimeMs now_ms);

// A bisection that found its culprit: the culprit change's owner's ticket.
struct CulpritFound {
  std::string run_id;
  TicketKind kind = TicketKind::performance_regression;
  std::string model;  // the model whose regression started the bisection
  std::string revision;
  std::string probe_model;
  std::string candidate_bundle_id;
  std::string baseline_bundle_id;
  std::string detail;  // the regression's
  BisectResult bisection;
  Change culprit;
  std::optional<stats::ModelGateOutcome> performance;  // the model's gate outcome, if any
  std::optional<TriageAction> triage;
  std::vector<std::string> models;  // every model the culprit explains with this kind, `model` first
};
Ticket culprit_ticket(const CulpritFound& found, TimeMs now_ms);

// A regression the gate or triage confirmed whose bisection could not pin the culprit down: the
// model's owner's ticket, naming the suspect range. Its culprit is "range:MODEL:FIRST..LAST", so
// the same range for the same model is ticketed once, run after run.
struct RegressionUnpinned {
  std::string run_id;
  TicketKind kind = TicketKind::performance_regression;
  std::string model;
  std::string owner_team;
  std::string revision;
  std::string probe_model;
  std::string candidate_bundle_id;
  std::string baseline_bundle_id;
  std::string detail;  // the regression's
  BisectResult bisection;  // ambiguous: its suspects are the range
  std::optional<stats::ModelGateOutcome> performance;
  std::optional<TriageAction> triage;
};
Ticket unpinned_ticket(const RegressionUnpinned& regression, TimeMs now_ms);

class RunTickets {
 public:
  // Filed tickets go to `report.tickets` and, as FileTicket actions, to `book`.
  RunTickets(JobBook& book, RunReport& report) : book_(book), report_(report) {}

  // The id of the run's ticket with the same dedupe key: this one if it is the first.
  std::string file(Ticket ticket);

 private:
  JobBook& book_;
  RunReport& report_;
  std::map<std::string, std::string> id_by_dedupe_key_;
};

}  // namespace kiln::qualification

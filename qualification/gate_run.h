// A recorded run report, typed: a qualification run's (kiln.qualification-run/1,
// docs/qualification.md) or a stability run's (kiln.stability-run/1, stability_gates.h), as the
// decisions taken after the run read it: a promotion's gates (release/promotion.h), the risk
// register's gates and pages (risk_status.h), the waivers (waiver.h). One reader from the stored
// JSON and one writer back over it: the writer changes only the fields whose value a decision
// changed, so every other key, known here or not, stays as it was recorded. Pure.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/time.h"
#include "qualification/run_types.h"
#include "records/json_members.h"

namespace kiln::qualification {

// A waiver a report records: one its verdict relies on (an entry of `waivers`: the waiver's own
// document, waiver.h to_json, with its `text`) or one that lapsed (of `lapsed_waivers`, with `why`).
struct RecordedWaiver {
  std::string model;
  std::string metric;
  std::string text;  // "waived by X until T: reason"
  TimeMs expires_at_ms = 0;
  std::string why;  // a lapsed one's: "expired at T", "withdrawn by X at T", "replaced by ..."
  nlohmann::json document;  // as recorded
};
RecordedWaiver recorded_waiver(const nlohmann::json& document);

// One model run of a report: an entry of its `models`.
struct ModelResult {
  std::string model;
  std::string revision;
  std::string verdict;
  std::string detail;
  std::optional<double> eval_score;      // set when the run measured the model's eval
  std::optional<double> eval_reference;  // the reference's score it is held against
  std::optional<bool> fails_run;         // nullopt: the entry does not say
  std::vector<RecordedWaiver> waivers;   // those letting its failure through
  // The entry as recorded: the evidence the gates read (performance, training, a stability
  // run's gates, the run's tickets, the owner).
  nlohmann::json entry;
};

struct GateRun {
  std::string run_id;
  std::string tier;       // smoke, nightly, release, stability
  std::string bundle_id;  // the candidate's
  bool finished = false;
  bool passed = false;
  TimeMs finished_at_ms = 0;
  std::vector<ModelResult> models;
  std::vector<RecordedWaiver> waivers;  // a run that passed by waivers passes only while they hold
  // The waivers it relied on that are no longer in force (the report judged again by those the
  // coordinator holds, waiver.h revoke_lapsed_waivers).
  std::vector<RecordedWaiver> lapsed_waivers;
  std::optional<SoakRounds> soak;  // a release run's; nullopt: its report records none
  std::string schema;
  TimeMs started_at_ms = 0;
  bool stopped_with_reason = false;    // `reason`: it ended without a verdict of its models
  bool judged = false;                 // a stability run the risk register's gates judged
  std::optional<std::string> summary;  // the lines for people
  std::map<std::string, std::string> ticket_teams;  // the run's own tickets: id -> team
  nlohmann::json document;  // the report as read, which the writer writes the fields above over
};

inline constexpr const char* kQualificationRunSchema = "kiln.qualification-run/1";
inline constexpr const char* kStabilityRunSchema = "kiln.stability-run/1";


// Reads whatever of the fields above the document holds (an absent or mistyped one keeps its
// default); the caller decides what it requires.
GateRun gate_run_from_report(const nlohmann::json& report);
// The document it was read from, with every field whose value changed written back: a model's
// waivers that went away are erased from its entry, the run's are written as an empty list; a run
// with a waiver lapsed since it was read has its verdict and waivers written whatever they were.
nlohmann::json to_json(const GateRun& run);

}  // namespace kiln::qualification

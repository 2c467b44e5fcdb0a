// The release decisions, pure: may this bundle go to this environment (gates, the previous
// environment, soak time, compatibility, eval thresholds, one-way firmware), may this person
// approve or merge a promotion, which promotion does a rollback revert. The shell gathers the
// inputs (the repository at main's tip, the coordinator's run reports, git history with its
// times) and carries out what these return. docs/releases.md states the rules.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "common/error.h"
#include "common/time.h"
#include "qualification/gate_run.h"
#include "release/environments.h"

namespace kiln::release {

// Who does something: a key the coordinator knows and its role in the roster.
struct Actor {
  std::string key;
  std::string role;
};
std::string to_string(const Actor& actor);                  // "alice (ops)"
std::optional<Actor> actor_from_string(std::string_view text);  // the inverse; nullopt when malformed

// A qualification run report as evidence for a gate: the typed report (qualification/gate_run.h)
// the risk register reads too. A run that passed by waivers passes only until the first expires;
// its `lapsed_waivers` are those no longer in force when it was judged again.
using qualification::GateRun;
using qualification::ModelResult;
using qualification::RecordedWaiver;
using qualification::SoakRounds;
// From a kiln.qualification-run/1 document; Errc::bad_message naming what is missing (the run,
// tier, candidate, finished, passed, each model's name and verdict).
Result<GateRun> gate_run_from_json(const nlohmann::json& report);

// The recorded bundle's content the repository's file must pin (the coordinator's bundle record).
struct RecordedBundle {
  std::string id;
  std::map<std::string, std::string> versions;  // layer -> version
  std::vector<std::string> hardware_revisions;
};

struct PromotionRequest {
  std::string bundle_id;  // full id
  std::string environment;
  std::string one_way_override;  // the recorded reason; empty: none given
  Actor actor;
  TimeMs now_ms = 0;
};

// One model's evidence: correctness, performance and eval, per revision.
struct ModelEvidence {
  std::string model;
  std::string revision;
  std::string run_id;
  std::string verdict;
  std::string correctness;  // "passed" or why not
  std::string performance;  // "passed", "improved", "inconclusive: ..." ...
  std::optional<double> eval_share;  // score / reference, when measured
  std::optional<double> eval_threshold;
  std::string eval;  // for people: the share against the threshold, or why there is none
};

struct Promotion {
  std::string environment;
  std::string bundle_id;
  std::string previous_bundle_id;  // what the environment ran; empty: nothing
  std::string branch;              // promote/<environment>/<bundle's first 12>
  std::vector<GateRun> gates;      // the passing run of each required gate, in `requires` order
  std::vector<ModelEvidence> models;
  std::optional<double> soaked_hours;  // how long it has run in the previous environment
  double soak_hours_required = 0;
  std::string one_way_firmware;  // the bundle's reason, when one-way
  std::string one_way_override;
  Actor promoted_by;
  TimeMs decided_at_ms = 0;
};

// The gates a bundle needs for `environment`: its own `requires` and, before them, those of
// every environment it follows (production needs staging's gates too). Deduplicated, in order.
std::vector<std::string> required_gates(const Snapshot& snapshot, const std::string& environment);

// Decides a promotion against the repository at main's tip. `runs`: the recorded reports of the
// bundle; `recorded`: the coordinator's record of it; `arrived_in_previous_ms`: when the bundle
// became the previous environment's bundle (a commit time), if it is. Refusals say why and
// what to do: Errc::conflict for a gate, environment, soak, compatibility or eval refusal,
// Errc::unauthorized never (proposing is open to every key), Errc::not_found for a missing
// environment or bundle file, Errc::integrity when the file's pins are not the recorded bundle,
// Errc::invalid_argument for an override a bundle does not need. A run that passed by a waiver
// expired at request.now_ms, or one that lapsed before, does not pass: the gate blocks again. A
// release run passes its gate only with its soak evidence: every soak round it asked for run, and
// at least one.
Result<Promotion> decide_promotion(const Snapshot& snapshot, const PromotionRequest& request,
                                   const std::vector<GateRun>& runs, const RecordedBundle& recorded,
                                   std::optional<TimeMs> arrived_in_previous_ms);

std::string promotion_branch(std::string_view environment, std::string_view bundle_id);
// evidence/<environment>/<bundle id>.json
std::string evidence_path(std::string_view environment, std::string_view bundle_id);
// The full evidence document (kiln.promotion-evidence/1).
nlohmann::json evidence_json(const Promotion& promotion);
// The promotion commit's message: a subject, the gates in words, and the trailers
// Kiln-Action, Kiln-Environment, Kiln-Bundle, Kiln-Previous-Bundle, Kiln-Gate (one per gate:
// "<gate> <run id> passed"), Kiln-Waiver (one per waiver a gate relies on: "<gate> <run id>
// <model> <metric>: waived by X until T: reason"), Kiln-Evidence, Kiln-Promoted-By and, when
// given, Kiln-One-Way-Override.
std::string promotion_message(const Promotion& promotion);

// What the shell reads back from a promotion branch: its commit's trailers and the approvals
// made on it since.
struct ProposedPromotion {
  std::string branch;
  std::string environment;
  std::string bundle_id;
  std::optional<Actor> promoted_by;  // from Kiln-Promoted-By
  std::vector<Actor> approvals;      // Kiln-Approved-By of the branch's later commits
  std::string promotion_subject;
  std::vector<std::string> trailers;  // the promotion commit's Kiln-* trailer lines, kept in the merge
  bool merged = false;                // already in main
  bool based_on_main_tip = false;     // main has not moved since the branch was made
};

// May `actor` approve? Errc::unauthorized for the author or a role the environment does not let
// approve, Errc::conflict for a second approval by the same key or a merged promotion.
Status decide_approval(const ProposedPromotion& proposed, const EnvironmentFile& environment, const Actor& actor);
// May it be merged? Errc::conflict without an approval by another key of an approving role,
// or when main moved since (another promotion won: make the promotion again on the new main).
Status decide_merge(const ProposedPromotion& proposed, const EnvironmentFile& environment);
// The approval commit's message and the merge commit's (with Kiln-Approved-By and Kiln-Merged-By).
std::string approval_message(const ProposedPromotion& proposed, const Actor& actor);
std::string merge_message(const ProposedPromotion& proposed, const Actor& merged_by);

// One commit of main's first-parent history that changed an environment's bundle.
struct EnvironmentChange {
  std::string commit;
  std::string environment;
  std::string bundle_id;           // after; empty: none
  std::string previous_bundle_id;  // before
  std::string action;              // the Kiln-Action trailer: promote, rollback; empty: a hand edit
  std::string reverts;             // Kiln-Reverts: the commit a rollback reverted
  std::string author;              // Kiln-Promoted-By / Kiln-Rolled-Back-By, else git's author
  std::vector<std::string> approved_by;
  TimeMs committed_at_ms = 0;
};
// The coordinator's promotion record of a change (kiln.promotion/1), keyed
// "<environment>@<commit>".
std::string promotion_record_key(const EnvironmentChange& change);
nlohmann::json promotion_record_json(const EnvironmentChange& change);

// When did the environment's current bundle arrive? `history`: the environment's changes,
// newest first. The time of the oldest change in the unbroken run of changes that left it on
// `bundle_id`; nullopt when it does not run it.
std::optional<TimeMs> arrived_at_ms(const std::vector<EnvironmentChange>& history, const std::string& bundle_id);

struct Rollback {
  std::string environment;
  std::string revert_commit;   // the promotion to revert
  std::string from_bundle_id;  // what the environment runs now
  std::string to_bundle_id;    // what it runs after; empty: nothing
};
// The last promotion of `environment` that no rollback reverted yet, from its changes newest
// first. Errc::not_found when there is none, Errc::conflict when the environment no longer
// runs what that promotion brought (a later hand edit) or when the bundle it runs has one-way
// firmware (saying why and to fix forward instead), Errc::unauthorized for a role the
// environment does not let approve.
Result<Rollback> decide_rollback(const Snapshot& snapshot, const std::string& environment,
                                 const std::vector<EnvironmentChange>& history, const Actor& actor);
std::string rollback_message(const Rollback& rollback, const Actor& actor);

}  // namespace kiln::release

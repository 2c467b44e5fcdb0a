#include "release/promotion.h"

#include <algorithm>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

namespace kiln::release {

using nlohmann::json;

namespace {

std::string short_id(std::string_view id) { return std::string(id.substr(0, 12)); }

bool contains(const std::vector<std::string>& values, const std::string& value) {
  return std::find(values.begin(), values.end(), value) != values.end();
}

// The verdicts of docs/qualification.md that fail a run, split by what they say.
bool correctness_failed(const std::string& verdict) {
  return verdict == "correctness_regression" || verdict == "hardware_suspect" || verdict == "error" ||
         verdict == "pending";
}

std::string hours(double value) { return fmt::format("{:.1f} h", value); }

}  // namespace

std::string to_string(const Actor& actor) { return fmt::format("{} ({})", actor.key, actor.role); }

std::optional<Actor> actor_from_string(std::string_view text) {
  const auto open = text.rfind(" (");
  if (open == std::string_view::npos || !text.ends_with(')') || open == 0) return std::nullopt;
  Actor actor{std::string(text.substr(0, open)), std::string(text.substr(open + 2, text.size() - open - 3))};
  if (actor.role.empty()) return std::nullopt;
  return actor;
}

Result<GateRun> gate_run_from_json(const json& report) {
  auto bad = [&](std::string_view what) {
    return fail(Errc::bad_message, fmt::format("run report {}: '{}' is missing or of the wrong type; the coordinator's "
                                               "qualification_run records are written by kiln-qualifier",
                                               report.value("run_id", std::string("?")), what));
  };
  if (!report.is_object()) return bad("the report");
  for (const char* key : {"run_id", "tier", "candidate_bundle_id"}) {
    if (auto it = report.find(key); it == report.end() || !it->is_string()) return bad(key);
  }
  for (const char* key : {"finished", "passed"}) {
    if (auto it = report.find(key); it == report.end() || !it->is_boolean()) return bad(key);
  }
  auto models = report.find("models");
  if (models == report.end() || !models->is_array()) return bad("models");
  for (const auto& entry : *models) {
    if (!entry.is_object() || !entry.contains("model") || !entry["model"].is_string() || !entry.contains("verdict") ||
        !entry["verdict"].is_string()) {
      return bad("models[].model and verdict");
    }
  }
  for (const char* key : {"waivers", "lapsed_waivers"}) {
    if (auto list = report.find(key); list != report.end() && list->is_array()) {
      for (const auto& entry : *list) {
        if (!entry.is_object()) return bad(fmt::format("{}[]", key));
      }
    }
  }
  return qualification::gate_run_from_report(report);
}

std::vector<std::string> required_gates(const Snapshot& snapshot, const std::string& environment) {
  std::vector<std::string> chain;  // the environment and those it follows, the earliest first
  for (std::string at = environment; !at.empty(); at = snapshot.environments.at(at).follows) chain.insert(chain.begin(), at);
  std::vector<std::string> gates;
  for (const auto& name : chain) {
    for (const auto& gate : snapshot.environments.at(name).requires_gates) {
      if (!contains(gates, gate)) gates.push_back(gate);
    }
  }
  return gates;
}

std::string promotion_branch(std::string_view environment, std::string_view bundle_id) {
  return fmt::format("promote/{}/{}", environment, short_id(bundle_id));
}

std::string evidence_path(std::string_view environment, std::string_view bundle_id) {
  return fmt::format("evidence/{}/{}.json", environment, bundle_id);
}

namespace {

// The first waiver of the run expired at `now_ms`, if any.
const RecordedWaiver* expired_waiver(const GateRun& run, TimeMs now_ms) {
  for (const auto& waiver : run.waivers) {
    if (waiver.expires_at_ms <= now_ms) return &waiver;
  }
  return nullptr;
}

// Why a release run is not the release gate's evidence, if it is not: a waiver covers the gate it
// names, never the soak, so the soak rounds it asked for must all have run, and at least one.
std::optional<std::string> missing_soak(const GateRun& run) {
  if (run.tier != "release") return std::nullopt;
  if (!run.soak) return "its report records no soak rounds";
  if (run.soak->asked == 0) return "it asked for no soak round";
  if (run.soak->run < run.soak->asked) {
    return fmt::format("it ran {} of its {} soak rounds", run.soak->run, run.soak->asked);
  }
  return std::nullopt;
}

// The newest passing run of `gate` for the bundle, or why there is none. A run that passed by a
// waiver passes while every waiver it relies on is in force; a release run needs its soak.
Result<GateRun> passing_run(const std::vector<GateRun>& runs, const std::string& gate, const std::string& bundle_id,
                            const std::string& environment, TimeMs now_ms) {
  const GateRun* newest_passed = nullptr;
  const GateRun* newest_other = nullptr;
  for (const auto& run : runs) {
    if (run.tier != gate || run.bundle_id != bundle_id) continue;
    const bool passes = run.finished && run.passed && expired_waiver(run, now_ms) == nullptr && !missing_soak(run);
    const GateRun*& slot = passes ? newest_passed : newest_other;
    if (slot == nullptr || run.finished_at_ms > slot->finished_at_ms) slot = &run;
  }
  if (newest_passed != nullptr) return *newest_passed;
  if (newest_other != nullptr && !newest_other->passed && !newest_other->lapsed_waivers.empty()) {
    const RecordedWaiver& lapsed = newest_other->lapsed_waivers.front();
    return fail(Errc::conflict,
                fmt::format("{} requires a passing {} run of bundle {}: {} passed only by a waiver that is no longer "
                            "in force (gate {} {}, {}); the gate blocks again: fix it, or have an approver waive it "
                            "again (`kiln waive`)",
                            environment, gate, short_id(bundle_id), newest_other->run_id, lapsed.model, lapsed.metric,
                            fmt::format("{}: {}", lapsed.text, lapsed.why)));
  }
  if (const auto why = newest_other != nullptr && newest_other->passed ? missing_soak(*newest_other) : std::nullopt) {
    return fail(Errc::conflict, fmt::format("{} requires a release run of bundle {} with its soak evidence: {} passed, "
                                            "but {}; qualify it again with soak rounds (`kiln qualify-release "
                                            "--bundle {} --wait`)",
                                            environment, short_id(bundle_id), newest_other->run_id, *why,
                                            short_id(bundle_id)));
  }
  if (const RecordedWaiver* expired = newest_other != nullptr && newest_other->passed ? expired_waiver(*newest_other, now_ms)
                                                                                   : nullptr) {
    return fail(Errc::conflict, fmt::format("{} requires a passing {} run of bundle {}: {} passed only by a waiver that "
                                            "has expired (gate {} {}, {}); the gate blocks again: fix it, or have an "
                                            "approver waive it again (`kiln waive`)",
                                            environment, gate, short_id(bundle_id), newest_other->run_id,
                                            expired->model, expired->metric, expired->text));
  }
  const std::string command = gate == "release" ? "qualify-release" : gate;
  if (newest_other == nullptr) {
    return fail(Errc::conflict, fmt::format("{} requires a passing {} run of bundle {}, and none is recorded; run "
                                            "`kiln {} --bundle {} --wait` first",
                                            environment, gate, short_id(bundle_id), command, short_id(bundle_id)));
  }
  return fail(Errc::conflict,
              fmt::format("{} requires a passing {} run of bundle {}: {} {}; fix what it found and qualify a new "
                          "bundle, or rerun it (`kiln {} --bundle {} --wait`) if it was the fleet's fault",
                          environment, gate, short_id(bundle_id), newest_other->run_id,
                          newest_other->finished ? "failed" : "has not finished", command, short_id(bundle_id)));
}

Status check_pins(const BundleFile& file, const RecordedBundle& recorded) {
  for (const auto& [layer, pin] : file.layers) {
    auto it = recorded.versions.find(layer);
    const std::string recorded_version = it == recorded.versions.end() ? std::string() : it->second;
    if (pin.version != recorded_version) {
      return fail(Errc::integrity, fmt::format("{} pins {} {}, but the coordinator's bundle {} has {} {}; the file must "
                                               "describe the bundle that was qualified: fix it in a reviewed commit",
                                               bundle_path(file.id), layer, pin.version, short_id(recorded.id), layer,
                                               recorded_version));
    }
  }
  auto revisions = file.hardware_revisions;
  std::sort(revisions.begin(), revisions.end());
  auto recorded_revisions = recorded.hardware_revisions;
  std::sort(recorded_revisions.begin(), recorded_revisions.end());
  if (revisions != recorded_revisions) {
    return fail(Errc::integrity, fmt::format("{} supports revisions {}, the coordinator's bundle {}; make them the same",
                                             bundle_path(file.id), fmt::join(revisions, ","),
                                             fmt::join(recorded_revisions, ",")));
  }
  return {};
}

ModelEvidence model_evidence(const ModelResult& result, const GateRun& run, std::optional<double> threshold) {
  ModelEvidence evidence{result.model, result.revision, run.run_id, result.verdict, "", "", std::nullopt, threshold, ""};
  evidence.correctness = correctness_failed(result.verdict) ? fmt::format("failed: {}", result.detail)
                         : result.verdict == "skipped"      ? fmt::format("not run: {}", result.detail)
                                                            : "passed";
  evidence.performance = result.verdict == "performance_regression" ? fmt::format("regressed: {}", result.detail)
                         : result.verdict == "improved"             ? fmt::format("improved: {}", result.detail)
                         : result.verdict == "inconclusive"         ? fmt::format("inconclusive: {}", result.detail)
                         : correctness_failed(result.verdict) || result.verdict == "skipped" ? "not measured"
                                                                                              : "passed";
  if (result.eval_score && result.eval_reference && *result.eval_reference > 0) {
    evidence.eval_share = *result.eval_score / *result.eval_reference;
    evidence.eval = threshold ? fmt::format("{:.4f} of the reference, threshold {:.4f}", *evidence.eval_share, *threshold)
                              : fmt::format("{:.4f} of the reference", *evidence.eval_share);
  } else {
    evidence.eval = "no eval score recorded; the correctness gate held";
  }
  return evidence;
}

}  // namespace

Result<Promotion> decide_promotion(const Snapshot& snapshot, const PromotionRequest& request,
                                   const std::vector<GateRun>& runs, const RecordedBundle& recorded,
                                   std::optional<TimeMs> arrived_in_previous_ms) {
  const std::string& name = request.environment;
  auto env_it = snapshot.environments.find(name);
  if (env_it == snapshot.environments.end()) {
    std::vector<std::string> names;
    for (const auto& [known, _] : snapshot.environments) names.push_back(known);
    return fail(Errc::not_found, fmt::format("the repository has no environment '{}' ({} is missing); the "
                                             "environments are: {}",
                                             name, environment_path(name), fmt::join(names, ", ")));
  }
  const EnvironmentFile& env = env_it->second;
  auto bundle_it = snapshot.bundles.find(request.bundle_id);
  if (bundle_it == snapshot.bundles.end()) {
    return fail(Errc::not_found, fmt::format("{} is not in the repository; add the bundle's file (its pins, digests and "
                                             "serving configs, docs/releases.md) in a reviewed commit first",
                                             bundle_path(request.bundle_id)));
  }
  const BundleFile& bundle = bundle_it->second;
  if (auto ok = check_pins(bundle, recorded); !ok) return tl::unexpected(ok.error());
  if (env.bundle == bundle.id) {
    return fail(Errc::conflict, fmt::format("{} already runs bundle {}; nothing to promote", name, short_id(bundle.id)));
  }

  Promotion promotion;
  promotion.environment = name;
  promotion.bundle_id = bundle.id;
  promotion.previous_bundle_id = env.bundle;
  promotion.branch = promotion_branch(name, bundle.id);
  promotion.promoted_by = request.actor;
  promotion.decided_at_ms = request.now_ms;
  promotion.soak_hours_required = env.soak_hours;

  // The previous environment: the bundle runs there now, and long enough.
  if (!env.follows.empty()) {
    const EnvironmentFile& previous = snapshot.environments.at(env.follows);
    if (previous.bundle != bundle.id) {
      return fail(Errc::conflict,
                  fmt::format("bundle {} is not running in {} ({} runs {}); bundles go {} -> {}: promote it to {} "
                              "first (`kiln release promote {} --to {}`)",
                              short_id(bundle.id), previous.name, previous.name,
                              previous.bundle.empty() ? "nothing" : short_id(previous.bundle), previous.name, name,
                              previous.name, short_id(bundle.id), previous.name));
    }
    if (arrived_in_previous_ms) {
      promotion.soaked_hours = static_cast<double>(request.now_ms - *arrived_in_previous_ms) / kHourMs;
    }
    if (env.soak_hours > 0 && (!promotion.soaked_hours || *promotion.soaked_hours < env.soak_hours)) {
      const double done = promotion.soaked_hours.value_or(0);
      return fail(Errc::conflict,
                  fmt::format("{} requires bundle {} to soak {} in {} first; it has run there for {}; promote it in "
                              "{} (soak_hours in {})",
                              name, short_id(bundle.id), hours(env.soak_hours), previous.name, hours(done),
                              hours(env.soak_hours - done), environment_path(name)));
    }
  }

  // The gates, for this exact bundle.
  for (const auto& gate : required_gates(snapshot, name)) {
    auto run = passing_run(runs, gate, bundle.id, name, request.now_ms);
    if (!run) return tl::unexpected(run.error());
    promotion.gates.push_back(std::move(*run));
  }

  // The compatibility matrix.
  if (auto problems = compatibility_problems(snapshot.compatibility, bundle); !problems.empty()) {
    return fail(Errc::conflict, fmt::format("the compatibility matrix forbids bundle {}: {}; add the combination to {} "
                                            "in a reviewed commit if it was qualified, or build a bundle that fits",
                                            short_id(bundle.id), fmt::join(problems, "; "), kCompatibilityPath));
  }

  // Per model evidence; where the environment holds an eval threshold, every served model must
  // have been run by a gate and keep its eval above the threshold.
  const bool eval_gated = env.eval_threshold.has_value() || !env.eval_thresholds.empty();
  std::set<std::string> served;
  for (const auto& config : bundle.models) served.insert(config.model);
  for (const auto& run : promotion.gates) {
    for (const auto& result : run.models) {
      std::optional<double> threshold;
      if (auto it = env.eval_thresholds.find(result.model); it != env.eval_thresholds.end()) threshold = it->second;
      else threshold = env.eval_threshold;
      if (!eval_gated || !served.contains(result.model)) threshold.reset();
      promotion.models.push_back(model_evidence(result, run, threshold));
    }
  }
  if (eval_gated) {
    for (const auto& model : served) {
      bool evidenced = false;
      for (const auto& evidence : promotion.models) {
        if (evidence.model != model) continue;
        if (evidence.correctness != "passed") {
          return fail(Errc::conflict, fmt::format("{} serves {}, and {} has no passing result for it on revision {} "
                                                  "({}); qualify it before it serves",
                                                  name, model, evidence.run_id, evidence.revision, evidence.correctness));
        }
        if (evidence.eval_share && evidence.eval_threshold && *evidence.eval_share < *evidence.eval_threshold) {
          return fail(Errc::conflict,
                      fmt::format("{}'s eval would fall below {}'s accepted threshold: {:.4f} of the reference on "
                                  "revision {} in {}, threshold {:.4f}; it may not serve with bundle {}",
                                  model, name, *evidence.eval_share, evidence.revision, evidence.run_id,
                                  *evidence.eval_threshold, short_id(bundle.id)));
        }
        evidenced = true;
      }
      if (!evidenced) {
        return fail(Errc::conflict, fmt::format("{} serves {}, and none of the gate runs ({}) ran it; a served model's "
                                                "eval must be evidenced: run the gate with it in the model set",
                                                name, model, fmt::join(required_gates(snapshot, name), ", ")));
      }
    }
  }

  // One-way firmware: allowed only with a reason on record, since no rollback goes past it.
  promotion.one_way_firmware = bundle.one_way_firmware;
  if (!bundle.one_way_firmware.empty() && request.one_way_override.empty()) {
    return fail(Errc::conflict, fmt::format("bundle {} has one-way firmware ({}): once promoted, {} cannot be rolled "
                                            "back past it; if that is intended, promote again with --override-one-way "
                                            "REASON, which is recorded in the commit",
                                            short_id(bundle.id), bundle.one_way_firmware, name));
  }
  if (bundle.one_way_firmware.empty() && !request.one_way_override.empty()) {
    return fail(Errc::invalid_argument, fmt::format("bundle {} has no one-way firmware; leave out --override-one-way",
                                                    short_id(bundle.id)));
  }
  promotion.one_way_override = request.one_way_override;
  return promotion;
}

json evidence_json(const Promotion& promotion) {
  json gates = json::array();
  for (const auto& run : promotion.gates) {
    json waivers = json::array();
    for (const auto& w : run.waivers) {
      waivers.push_back({{"model", w.model}, {"metric", w.metric}, {"text", w.text}, {"expires_at_ms", w.expires_at_ms}});
    }
    gates.push_back({{"gate", run.tier}, {"run_id", run.run_id}, {"passed", run.passed},
                     {"finished_at_ms", run.finished_at_ms}, {"waivers", std::move(waivers)}});
  }
  json models = json::array();
  for (const auto& m : promotion.models) {
    json entry = {{"model", m.model},         {"revision", m.revision},       {"run_id", m.run_id},
                  {"verdict", m.verdict},     {"correctness", m.correctness}, {"performance", m.performance},
                  {"eval", m.eval},           {"eval_share", nullptr},        {"eval_threshold", nullptr}};
    if (m.eval_share) entry["eval_share"] = *m.eval_share;
    if (m.eval_threshold) entry["eval_threshold"] = *m.eval_threshold;
    models.push_back(std::move(entry));
  }
  json soak = {{"required_hours", promotion.soak_hours_required}, {"soaked_hours", nullptr}};
  if (promotion.soaked_hours) soak["soaked_hours"] = *promotion.soaked_hours;
  return {{"schema", "kiln.promotion-evidence/1"},
          {"environment", promotion.environment},
          {"bundle_id", promotion.bundle_id},
          {"previous_bundle_id", promotion.previous_bundle_id},
          {"promoted_by", to_string(promotion.promoted_by)},
          {"decided_at_ms", promotion.decided_at_ms},
          {"gates", std::move(gates)},
          {"soak", std::move(soak)},
          {"one_way_firmware", promotion.one_way_firmware},
          {"one_way_override", promotion.one_way_override},
          {"models", std::move(models)}};
}

std::string promotion_message(const Promotion& p) {
  std::string body;
  for (const auto& run : p.gates) {
    std::size_t failing = 0;
    for (const auto& m : run.models) failing += m.verdict != "passed" && m.verdict != "improved";
    body += fmt::format("- {} gate: {} passed ({} model results, {} not plain passes)\n", run.tier, run.run_id,
                        run.models.size(), failing);
    for (const auto& w : run.waivers) body += fmt::format("  - gate {} {} {}\n", w.model, w.metric, w.text);
  }
  if (p.soaked_hours) body += fmt::format("- soaked {} in the previous environment\n", hours(*p.soaked_hours));
  std::string trailers = fmt::format("Kiln-Action: promote\nKiln-Environment: {}\nKiln-Bundle: {}\n", p.environment,
                                     p.bundle_id);
  if (!p.previous_bundle_id.empty()) trailers += fmt::format("Kiln-Previous-Bundle: {}\n", p.previous_bundle_id);
  for (const auto& run : p.gates) {
    trailers += fmt::format("Kiln-Gate: {} {} passed\n", run.tier, run.run_id);
    for (const auto& w : run.waivers) {
      trailers += fmt::format("Kiln-Waiver: {} {} {} {}: {}\n", run.tier, run.run_id, w.model, w.metric, w.text);
    }
  }
  trailers += fmt::format("Kiln-Evidence: {}\n", evidence_path(p.environment, p.bundle_id));
  if (!p.one_way_override.empty()) trailers += fmt::format("Kiln-One-Way-Override: {}\n", p.one_way_override);
  trailers += fmt::format("Kiln-Promoted-By: {}\n", to_string(p.promoted_by));
  return fmt::format("Promote {} to {}\n\n{}\n{}", short_id(p.bundle_id), p.environment, body, trailers);
}

Status decide_approval(const ProposedPromotion& proposed, const EnvironmentFile& environment, const Actor& actor) {
  if (proposed.merged) {
    return fail(Errc::conflict, fmt::format("{} is already merged; nothing to approve", proposed.branch));
  }
  if (proposed.promoted_by && proposed.promoted_by->key == actor.key) {
    return fail(Errc::unauthorized, fmt::format("{} made the promotion {}; another person must approve it",
                                                actor.key, proposed.branch));
  }
  if (!contains(environment.approver_roles, actor.role)) {
    return fail(Errc::unauthorized, fmt::format("role {} may not approve promotions to {} (approver_roles: {}); ask a "
                                                "person with one of those roles",
                                                actor.role, environment.name, fmt::join(environment.approver_roles, ", ")));
  }
  for (const auto& approval : proposed.approvals) {
    if (approval.key == actor.key) {
      return fail(Errc::conflict, fmt::format("{} has already approved {}", actor.key, proposed.branch));
    }
  }
  return {};
}

Status decide_merge(const ProposedPromotion& proposed, const EnvironmentFile& environment) {
  if (proposed.merged) return fail(Errc::conflict, fmt::format("{} is already merged", proposed.branch));
  // Trailers can be written by any git client, so the rule is checked again here.
  const bool approved = std::any_of(proposed.approvals.begin(), proposed.approvals.end(), [&](const Actor& a) {
    return (!proposed.promoted_by || a.key != proposed.promoted_by->key) && contains(environment.approver_roles, a.role);
  });
  if (!approved) {
    return fail(Errc::conflict, fmt::format("{} is not approved: someone other than its author, with a role of {}'s "
                                            "approver_roles ({}), must run `kiln release approve {}` first",
                                            proposed.branch, environment.name,
                                            fmt::join(environment.approver_roles, ", "), proposed.branch));
  }
  if (!proposed.based_on_main_tip) {
    return fail(Errc::conflict,
                fmt::format("main has moved since {} was made (another change to the environments merged first); "
                            "rebase: make the promotion again on the new main (`kiln release promote {} --to {}`), "
                            "which checks its gates against what main says now",
                            proposed.branch, short_id(proposed.bundle_id), proposed.environment));
  }
  return {};
}

std::string approval_message(const ProposedPromotion& proposed, const Actor& actor) {
  return fmt::format("Approve promotion of {} to {}\n\nKiln-Approved-By: {}\n", short_id(proposed.bundle_id),
                     proposed.environment, to_string(actor));
}

std::string merge_message(const ProposedPromotion& proposed, const Actor& merged_by) {
  std::string trailers;
  for (const auto& line : proposed.trailers) trailers += line + "\n";
  for (const auto& approval : proposed.approvals) trailers += fmt::format("Kiln-Approved-By: {}\n", to_string(approval));
  trailers += fmt::format("Kiln-Promotion: {}\nKiln-Merged-By: {}\n", proposed.branch, to_string(merged_by));
  return fmt::format("{}\n\nMerge branch '{}'.\n\n{}", proposed.promotion_subject, proposed.branch, trailers);
}

std::string promotion_record_key(const EnvironmentChange& change) {
  return fmt::format("{}@{}", change.environment, change.commit);
}

json promotion_record_json(const EnvironmentChange& c) {
  return {{"schema", "kiln.promotion/1"},
          {"environment", c.environment},
          {"commit", c.commit},
          {"action", c.action.empty() ? std::string("edit") : c.action},
          {"bundle_id", c.bundle_id},
          {"previous_bundle_id", c.previous_bundle_id},
          {"reverts", c.reverts},
          {"author", c.author},
          {"approved_by", c.approved_by},
          {"committed_at_ms", c.committed_at_ms}};
}

std::optional<TimeMs> arrived_at_ms(const std::vector<EnvironmentChange>& history, const std::string& bundle_id) {
  std::optional<TimeMs> arrived;
  for (const auto& change : history) {
    if (change.bundle_id != bundle_id) break;
    arrived = change.committed_at_ms;
    if (change.previous_bundle_id != bundle_id) break;
  }
  return arrived;
}

Result<Rollback> decide_rollback(const Snapshot& snapshot, const std::string& environment,
                                 const std::vector<EnvironmentChange>& history, const Actor& actor) {
  auto env_it = snapshot.environments.find(environment);
  if (env_it == snapshot.environments.end()) {
    return fail(Errc::not_found, fmt::format("the repository has no environment '{}'; `kiln release status` lists them",
                                             environment));
  }
  const EnvironmentFile& env = env_it->second;
  if (!contains(env.approver_roles, actor.role)) {
    return fail(Errc::unauthorized, fmt::format("role {} may not roll back {} (approver_roles: {})", actor.role,
                                                environment, fmt::join(env.approver_roles, ", ")));
  }
  std::set<std::string> reverted;
  for (const auto& change : history) {
    if (change.action == "rollback" && !change.reverts.empty()) reverted.insert(change.reverts);
    if (change.action != "promote" || reverted.contains(change.commit)) continue;
    if (change.bundle_id != env.bundle) {
      return fail(Errc::conflict, fmt::format("the last promotion of {} ({}) brought bundle {}, but {} runs {} now (a "
                                              "later edit); revert by hand with a reviewed commit",
                                              environment, short_id(change.commit), short_id(change.bundle_id),
                                              environment, env.bundle.empty() ? "nothing" : short_id(env.bundle)));
    }
    const BundleFile& current = snapshot.bundles.at(env.bundle);
    if (!current.one_way_firmware.empty()) {
      return fail(Errc::conflict, fmt::format("{} cannot be rolled back past bundle {}: its firmware is one-way ({}); "
                                              "fix forward by promoting a newer bundle",
                                              environment, short_id(current.id), current.one_way_firmware));
    }
    return Rollback{environment, change.commit, change.bundle_id, change.previous_bundle_id};
  }
  return fail(Errc::not_found, fmt::format("{} has no promotion left to roll back", environment));
}

std::string rollback_message(const Rollback& r, const Actor& actor) {
  std::string trailers = fmt::format("Kiln-Action: rollback\nKiln-Environment: {}\nKiln-Bundle: {}\n", r.environment,
                                     r.to_bundle_id.empty() ? std::string("none") : r.to_bundle_id);
  trailers += fmt::format("Kiln-Previous-Bundle: {}\nKiln-Reverts: {}\nKiln-Rolled-Back-By: {}\n", r.from_bundle_id,
                          r.revert_commit, to_string(actor));
  return fmt::format("Roll back {} to {}\n\nThis reverts commit {}, the promotion of {}.\n\n{}", r.environment,
                     r.to_bundle_id.empty() ? std::string("nothing") : short_id(r.to_bundle_id), r.revert_commit,
                     short_id(r.from_bundle_id), trailers);
}

}  // namespace kiln::release

#include "qualification/run_service.h"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/stats/rng.h"
#include "qualification/selection.h"

namespace kiln::qualification {

std::vector<std::string> runs_to_take_up(const std::vector<RunRequest>& requests,
                                         const std::set<std::string>& finished_run_ids,
                                         const std::set<std::string>& driving) {
  std::vector<std::string> runs;
  for (const auto& request : requests) {
    if (finished_run_ids.count(request.run_id) || driving.count(request.run_id)) continue;
    runs.push_back(request.run_id);
  }
  return runs;
}

std::vector<std::string> revisions_skipped(const Bundle& candidate, const std::vector<std::string>& fleet_revisions) {
  std::vector<std::string> skipped;
  for (const auto& revision : candidate.hardware_revisions) {
    if (std::find(fleet_revisions.begin(), fleet_revisions.end(), revision) == fleet_revisions.end()) {
      skipped.push_back(revision);
    }
  }
  return skipped;
}

namespace {

Result<std::vector<QualificationModel>> tier_models(const RunRequest& request, const RunFacts& facts) {
  const ModelSet& set = facts.set;
  if (request.tier != Tier::smoke) {
    std::vector<QualificationModel> models = set.models;
    if (request.max_models > 0 && models.size() > request.max_models) models.resize(request.max_models);
    return models;
  }
  const std::string change_id = request.change.empty() ? facts.candidate.last_change : request.change;
  auto change = std::find_if(facts.history.begin(), facts.history.end(),
                             [&](const Change& ch) { return ch.id == change_id; });
  if (auto ok = check_change_under_test(change_id, change != facts.history.end()); !ok) {
    return tl::unexpected(ok.error());
  }
  PresubmitOptions presubmit;
  presubmit.max_models = request.max_models == 0 ? set.models.size() : request.max_models;
  std::vector<QualificationModel> models;
  for (const auto& picked : select_presubmit(*change, set, presubmit)) models.push_back(*set.find(picked.name));
  return models;
}

}  // namespace

Status check_change_under_test(const std::string& change_id, bool recorded) {
  if (recorded) return {};
  return fail(Errc::invalid_argument, fmt::format("change {} is not recorded, so there is nothing to smoke; give a "
                                                  "change `kiln changes` lists, or leave --change out for the "
                                                  "bundle's last",
                                                  change_id));
}

Status check_not_older_than_baselines(const Bundle& candidate, const std::map<std::string, Bundle>& baselines) {
  for (const auto& [revision, baseline] : baselines) {
    if (baseline.change_count <= candidate.change_count) continue;
    return fail(Errc::invalid_argument,
                fmt::format("bundle {} (changes up to {}) is older than the accepted baseline {} of revision {} "
                            "(changes up to {}): a run compares a bundle with an earlier one; ask for a bundle built "
                            "at or after change {} (kiln bundle build)",
                            candidate.id.substr(0, 12), candidate.last_change.empty() ? "none" : candidate.last_change,
                            baseline.id.substr(0, 12), revision, baseline.last_change, baseline.last_change));
  }
  return {};
}

Result<RunInput> run_input_for(const RunRequest& request, const RunFacts& facts) {
  const Bundle& candidate = facts.candidate;
  if (candidate.change_count == 0) {
    return fail(Errc::invalid_argument, fmt::format("bundle {} has no changes to qualify", candidate.id));
  }
  RunInput input;
  input.candidate = candidate;
  input.set = facts.set;
  input.history = facts.history;
  auto& settings = input.settings;
  settings.tier = request.tier;
  settings.run_id = request.run_id;
  settings.repeats_per_side = request.repeats;
  settings.repeats_multiplier = request.tier == Tier::release ? 2 : 1;
  settings.max_jobs_in_flight = request.max_jobs;
  settings.seed = stats::stable_hash(request.run_id);
  settings.perf.rule = perf_rule_for(request);
  if (settings.perf.rule == stats::GateRule::sequential) input.baseline_history = facts.baseline_history;
  for (const auto& revision : candidate.hardware_revisions) {
    if (std::find(facts.fleet_revisions.begin(), facts.fleet_revisions.end(), revision) != facts.fleet_revisions.end()) {
      settings.revisions.push_back(revision);
    }
  }
  if (settings.revisions.empty()) {
    return fail(Errc::unavailable, fmt::format("no registered node has any of the bundle's revisions ({}); start "
                                               "agents of those revisions",
                                               fmt::join(candidate.hardware_revisions, ", ")));
  }
  const auto& baseline_ids = facts.recorded_baseline_ids.empty() ? facts.accepted_ids : facts.recorded_baseline_ids;
  for (const auto& revision : settings.revisions) {
    auto id = baseline_ids.find(revision);
    if (id == baseline_ids.end() || id->second == candidate.id) continue;
    auto bundle = facts.bundles.find(id->second);
    if (bundle == facts.bundles.end()) {
      return fail(Errc::not_found, fmt::format("the baseline of revision {} is bundle {}, which is not recorded; "
                                               "accept a recorded bundle (`kiln bundle accept`)",
                                               revision, id->second));
    }
    input.baselines[revision] = bundle->second;
  }
  if (auto ok = check_not_older_than_baselines(candidate, input.baselines); !ok) return tl::unexpected(ok.error());
  auto models = tier_models(request, facts);
  if (!models) return tl::unexpected(models.error());
  input.models = std::move(*models);
  return input;
}

std::optional<RunInput> next_soak_round(const RunRequest& request, const RunInput& first, const RunReport& whole,
                                        std::uint32_t rounds_done) {
  // Whatever the first round found: a waiver covers the gate it names, never the soak.
  if (request.tier != Tier::release || !whole.finished || rounds_done >= request.soak_rounds) return std::nullopt;
  RunInput again = first;
  again.settings.run_id = fmt::format("{}-soak{}", first.settings.run_id, rounds_done + 1);
  again.settings.seed = stats::stable_hash(again.settings.run_id);
  return again;
}

void add_soak_round(RunReport& whole, const RunReport& round_report, std::uint32_t round) {
  for (auto model : round_report.models) {
    model.detail = fmt::format("soak round {}: {}", round, model.detail);
    whole.models.push_back(std::move(model));
  }
  whole.tickets.insert(whole.tickets.end(), round_report.tickets.begin(), round_report.tickets.end());
  whole.jobs_started += round_report.jobs_started;
  whole.passed = whole.passed && round_report.passed;
  if (whole.soak) whole.soak->run = round;
  whole.finished_at_ms = round_report.finished_at_ms;
}

std::vector<std::string> revisions_to_accept(const RunRequest& request, const RunInput& input,
                                             const RunReport& whole) {
  if (!whole.finished || !whole.passed || request.tier == Tier::smoke || !request.accept) return {};
  return input.settings.revisions;
}

std::vector<ReproductionPick> reproducibility_sample(const std::vector<RunReport>& earlier, const std::string& run_id,
                                                     const ModelSet& set,
                                                     const std::vector<std::string>& fleet_revisions,
                                                     std::size_t count, std::uint64_t seed) {
  std::vector<ReproductionPick> eligible;
  for (const RunReport& report : earlier) {
    if (!report.finished || report.run_id == run_id) continue;
    for (const ModelReport& m : report.models) {
      if (!m.measure_job || set.find(m.model) == nullptr) continue;
      if (std::find(fleet_revisions.begin(), fleet_revisions.end(), m.revision) == fleet_revisions.end()) continue;
      eligible.push_back({report.run_id, m.model, m.revision, *m.measure_job});
    }
  }
  // The order the coordinator lists reports in may change; the draw must not.
  std::sort(eligible.begin(), eligible.end(),
            [](const ReproductionPick& a, const ReproductionPick& b) { return a.job.job_id < b.job.job_id; });
  eligible.erase(std::unique(eligible.begin(), eligible.end(),
                             [](const ReproductionPick& a, const ReproductionPick& b) {
                               return a.job.job_id == b.job.job_id;
                             }),
                 eligible.end());
  stats::Rng rng(stats::derive_seed(seed, stats::stable_hash("reproducibility sample")));
  const std::size_t picked = std::min(count, eligible.size());
  for (std::size_t i = 0; i < picked; ++i) {
    std::swap(eligible[i], eligible[i + rng.below(eligible.size() - i)]);
  }
  eligible.resize(picked);
  return eligible;
}

std::optional<bool> met_deadline(const RunRequest& request, const RunReport& report) {
  if (request.deadline_ms == 0 || !report.finished) return std::nullopt;
  return report.finished_at_ms <= request.deadline_ms;
}

}  // namespace kiln::qualification

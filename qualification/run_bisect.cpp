#include "qualification/run_bisect.h"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/stats/rng.h"
#include "qualification/noise_history.h"
#include "qualification/run_evidence.h"
#include "qualification/run_measure.h"

namespace kiln::qualification {

RunBisections::RunBisections(const RunInput& input, JobBook& book, const FleetView& fleet,
                             std::vector<BisectionProgress>& progress, std::function<void(std::size_t)> finished)
    : input_(input), book_(book), fleet_(fleet), progress_(progress), finished_(std::move(finished)) {
  for (std::size_t i = 0; i < input_.history.size(); ++i) history_index_[input_.history[i].id] = i;
}

Result<std::size_t> RunBisections::start(const std::vector<Regression>& regressions,
                                         const std::string& baseline_bundle_id) {
  KILN_ASSERT(!regressions.empty(), "a bisection looks for at least one regression");
  const std::string& revision = regressions.front().revision;
  if (baseline_bundle_id.empty()) {
    return fail(Errc::not_found, fmt::format("revision {} has no accepted baseline bundle to bisect from", revision));
  }
  auto candidates = changes_between(input_.history, input_.baselines.at(revision), input_.candidate);
  if (!candidates) return tl::unexpected(candidates.error());
  std::vector<std::size_t> indexes;
  for (const auto& id : *candidates) indexes.push_back(history_index_.at(id));
  std::vector<BisectionTarget> targets;
  for (const Regression& regression : regressions) {
    const QualificationModel* proxy = input_.set.probe_model_for(regression.model->name);
    const QualificationModel& probe = proxy != nullptr ? *proxy : *regression.model;
    auto same = std::find_if(targets.begin(), targets.end(), [&](const BisectionTarget& target) {
      return target.probe_model.name == probe.name && target.kind == regression.kind;
    });
    if (same != targets.end()) {
      same->pairs.push_back(regression.pair);
      continue;
    }
    BisectionTarget target{regression.kind, probe, regression.revision, regression.model->name, {regression.pair},
                           std::nullopt};
    if (regression.kind == TicketKind::performance_regression &&
        input_.settings.perf.rule == stats::GateRule::sequential) {
      static const std::vector<std::vector<double>> no_records;
      auto records = input_.baseline_history.find({probe.name, regression.revision});
      std::string note;
      target.plan = plan_for_pair(records == input_.baseline_history.end() ? no_records : records->second,
                                  input_.settings.perf, &note);
      if (!note.empty()) {
        book_.log(fmt::format("probes of {} on revision {}: {}", probe.name, regression.revision, note));
      }
      book_.log(fmt::format("probes of {} on revision {}: {}", probe.name, regression.revision,
                            describe_plan(*target.plan)));
    }
    targets.push_back(std::move(target));
  }
  return add(baseline_bundle_id, std::move(*candidates), std::move(indexes), std::move(targets));
}

std::size_t RunBisections::follow_up(std::size_t b) {
  const BisectionRun& done = runs_[b];
  KILN_ASSERT(done.result && done.result->outcome == BisectOutcome::culprit_found, "a follow-up comes after a culprit");
  const std::size_t after = done.result->culprit_index + 1;
  std::vector<std::string> candidates(done.result->candidates.begin() + static_cast<std::ptrdiff_t>(after),
                                      done.result->candidates.end());
  std::vector<std::size_t> indexes(done.history_index.begin() + static_cast<std::ptrdiff_t>(after),
                                   done.history_index.end());
  std::vector<BisectionTarget> targets;
  for (std::size_t t = 0; t < done.targets.size(); ++t) {
    if (!done.explained[t]) targets.push_back(done.targets[t]);
  }
  KILN_ASSERT(!targets.empty() && !candidates.empty(), "a target good at the culprit regressed after it");
  return add(done.baseline_bundle_id, std::move(candidates), std::move(indexes), std::move(targets));
}

std::size_t RunBisections::add(std::string baseline_bundle_id, std::vector<std::string> candidates,
                               std::vector<std::size_t> indexes, std::vector<BisectionTarget> targets) {
  const std::size_t count = candidates.size();
  auto bisection = Bisection::start(std::move(candidates), input_.settings.bisect);
  KILN_ASSERT(bisection.has_value(), "validated options and unique change ids make a bisection");
  std::vector<std::string> names;
  for (const BisectionTarget& target : targets) {
    names.push_back(fmt::format("{} of {} (probed with {} on revision {})", to_string(target.kind), target.model,
                                target.probe_model.name, target.revision));
  }
  book_.log(fmt::format("bisecting over {} changes, one probe job per target: {}", count, fmt::join(names, "; ")));
  runs_.push_back(BisectionRun{std::move(baseline_bundle_id), std::move(*bisection), std::move(indexes),
                               std::move(targets), std::nullopt, {}, {}, {}, {}});
  return runs_.size() - 1;
}

void RunBisections::pump_all() {
  for (std::size_t b = 0; b < runs_.size(); ++b) pump(b);
}

void RunBisections::pump(std::size_t b) {
  advance(b);
  publish_progress();
}

void RunBisections::publish_progress() {
  progress_.clear();
  for (const BisectionRun& run : runs_) {
    if (run.result) continue;
    const BisectionTarget& first = run.targets.front();
    progress_.push_back({first.model, first.revision, run.bisection.rounds(), run.bisection.probes_started()});
  }
}

void RunBisections::advance(std::size_t b) {
  for (;;) {
    BisectionRun& run = runs_[b];
    if (run.result) return;
    // k is the healthy nodes (not the free ones): a round's probes queue for them like any job,
    // and a round never shrinks because the fleet was busy when it was planned.
    const std::size_t k = std::max<std::size_t>(
        1, std::min<std::size_t>(input_.settings.max_probes_per_bisection,
                                 static_cast<std::size_t>(fleet_.healthy_nodes(run.targets.front().revision))));
    BisectPlan plan = run.bisection.next_probes(k);
    for (std::size_t candidate : plan.cancel) {
      auto it = run.probes.find(candidate);
      if (it == run.probes.end()) continue;
      for (const auto& target : it->second.targets) {
        if (target.tag != 0) book_.cancel(target.tag);
      }
      run.probes.erase(it);
    }
    if (plan.finished) {
      finish(b);
      return;
    }
    bool resolved_now = false;
    for (const Probe& probe : plan.start) {
      if (start_probe(b, probe.change_index)) resolved_now = true;
    }
    if (!resolved_now) return;
  }
}

// Starts (or waits for the bundle of) a probe; true when it was answered at once (a bundle that
// failed to build makes it inconclusive).
bool RunBisections::start_probe(std::size_t b, std::size_t candidate) {
  BisectionRun& run = runs_[b];
  const std::size_t index = run.history_index[candidate];
  run.probes[candidate].targets.assign(run.targets.size(), BisectionRun::TargetProbe{});
  auto it = builds_.find(index);
  if (it == builds_.end()) {
    builds_[index].waiting.emplace_back(b, candidate);
    book_.push(run_action::BuildBundle{index});
    return false;
  }
  BundleBuild& build = it->second;
  switch (build.state) {
    case BuildState::building: build.waiting.emplace_back(b, candidate); return false;
    case BuildState::built: launch_probe_jobs(b, candidate); return false;
    case BuildState::failed:
      run.probes.erase(candidate);
      (void)run.bisection.on_probe_result(candidate, ProbeVerdict::inconclusive,
                                          "the bundle at this change did not build: " + build.error);
      return true;
  }
  return false;
}

std::uint32_t RunBisections::first_repeats(const BisectionTarget& target) const {
  if (target.plan) return static_cast<std::uint32_t>(target.plan->repeats_per_look);
  return repeats_for(target.probe_model, input_.settings);
}

void RunBisections::launch_probe_jobs(std::size_t b, std::size_t candidate) {
  const BisectionRun& run = runs_[b];
  for (std::size_t t = 0; t < run.targets.size(); ++t) launch_probe_job(b, candidate, t, first_repeats(run.targets[t]));
}

void RunBisections::launch_probe_job(std::size_t b, std::size_t candidate, std::size_t target,
                                     std::uint32_t repeats_per_side) {
  BisectionRun& run = runs_[b];
  const BisectionTarget& of = run.targets[target];
  const bool performance = of.kind == TicketKind::performance_regression;
  JobRequest job = job_for_model(JobPurpose::bisect_probe, of.probe_model, of.revision,
                                 builds_.at(run.history_index[candidate]).bundle.id, input_.chips_per_node);
  job.baseline_bundle_id = performance ? run.baseline_bundle_id : std::string();
  job.repeats_per_side = performance ? repeats_per_side : 0;
  job.seed = of.probe_model.seed;
  run.probes[candidate].targets[target].tag =
      book_.enqueue(std::move(job), JobOwner{of.pairs.front(), b, candidate}, true);
}

// The probe's verdict once every target has one: bad when any target is bad (the first culprit
// of any of them), inconclusive when none is bad and one is inconclusive, else good.
void RunBisections::answer_target(std::size_t b, std::size_t candidate, std::size_t target, ProbeVerdict verdict,
                                  std::string detail) {
  BisectionRun& run = runs_[b];
  BisectionRun::Probe& probe = run.probes.at(candidate);
  BisectionRun::TargetProbe& answered = probe.targets[target];
  answered.tag = 0;
  answered.verdict = verdict;
  answered.detail = std::move(detail);
  if (std::any_of(probe.targets.begin(), probe.targets.end(), [](const auto& t) { return !t.verdict; })) return;
  std::vector<ProbeVerdict> verdicts;
  std::vector<std::string> details;
  std::vector<std::string> by_target;
  for (std::size_t t = 0; t < probe.targets.size(); ++t) {
    verdicts.push_back(*probe.targets[t].verdict);
    const std::string& detail_of = probe.targets[t].detail;
    details.push_back(run.targets.size() == 1 ? detail_of
                                              : fmt::format("{}: {}", run.targets[t].probe_model.name, detail_of));
    by_target.push_back(detail_of);
  }
  auto has = [&](ProbeVerdict v) { return std::find(verdicts.begin(), verdicts.end(), v) != verdicts.end(); };
  const ProbeVerdict combined = has(ProbeVerdict::bad)            ? ProbeVerdict::bad
                                : has(ProbeVerdict::inconclusive) ? ProbeVerdict::inconclusive
                                                                  : ProbeVerdict::good;
  run.verdicts[candidate] = std::move(verdicts);
  answer_probe(b, candidate, combined, fmt::format("{}", fmt::join(details, "; ")), std::move(by_target));
}

void RunBisections::answer_probe(std::size_t b, std::size_t candidate, ProbeVerdict verdict, std::string detail,
                                 std::vector<std::string> by_target) {
  BisectionRun& run = runs_[b];
  run.probes.erase(candidate);
  if (by_target.empty()) by_target.assign(run.targets.size(), detail);
  if (run.bisection.on_probe_result(candidate, verdict, std::move(detail))) {
    run.target_details.push_back(std::move(by_target));
  }
  pump(b);
}

std::optional<std::size_t> RunBisections::current_target(const RunJob& job) const {
  const BisectionRun& run = runs_[*job.owner.bisection];
  auto it = run.probes.find(job.owner.candidate);
  if (run.result || it == run.probes.end()) return std::nullopt;
  const auto& targets = it->second.targets;
  for (std::size_t t = 0; t < targets.size(); ++t) {
    if (targets[t].tag == job.request.tag) return t;
  }
  return std::nullopt;
}

void RunBisections::on_probe_result(const RunJob& job, const JobResult& result) {
  const auto target = current_target(job);
  if (!target) return;  // obsolete
  const std::size_t b = *job.owner.bisection;
  const std::size_t candidate = job.owner.candidate;
  if (runs_[b].targets[*target].kind == TicketKind::correctness_regression) {
    answer_target(b, candidate, *target, probe_verdict_from_correctness(result.correct),
                  result.correct ? "outputs correct" : result.correctness_detail);
    return;
  }
  if (!result.correct) {
    answer_target(b, candidate, *target, ProbeVerdict::inconclusive,
                  "outputs incorrect at this change, performance not judged: " + result.correctness_detail);
    return;
  }
  judge_performance(job, *target, result);
}

// The run's gate rule on the probe's samples against the baseline's: the sequential plan's
// looks, or one comparison at alpha with the fixed rule's extra rounds while unsure.
void RunBisections::judge_performance(const RunJob& job, std::size_t target, const JobResult& result) {
  const std::size_t b = *job.owner.bisection;
  const std::size_t candidate = job.owner.candidate;
  const BisectionTarget& of = runs_[b].targets[target];
  BisectionRun::TargetProbe& probe = runs_[b].probes.at(candidate).targets[target];
  probe.baseline.insert(probe.baseline.end(), result.baseline_samples.begin(), result.baseline_samples.end());
  probe.candidate.insert(probe.candidate.end(), result.candidate_samples.begin(), result.candidate_samples.end());
  const int look = probe.looks++;
  const stats::PerfGateOptions& options = input_.settings.perf;
  auto comparison = stats::compare(probe.baseline, probe.candidate, options,
                                   stats::derive_seed(input_.settings.seed, job.request.tag));
  if (!comparison) {
    answer_target(b, candidate, target, ProbeVerdict::inconclusive,
                  "the samples could not be compared: " + comparison.error().message);
    return;
  }
  stats::Verdict verdict = stats::Verdict::inconclusive;
  if (of.plan) {
    const double z = stats::worse_rank_z(comparison->test, options.higher_is_better);
    switch (stats::decide_look(*of.plan, look, z)) {
      case stats::LookDecision::go_on:
        launch_probe_job(b, candidate, target, static_cast<std::uint32_t>(of.plan->repeats_per_look));
        return;
      case stats::LookDecision::regression: verdict = stats::Verdict::regression; break;
      case stats::LookDecision::improvement: verdict = stats::Verdict::improvement; break;
      case stats::LookDecision::no_change: verdict = stats::Verdict::no_change; break;
    }
  } else {
    verdict = stats::decide(*comparison, comparison->test.p_value, options.alpha, options);
    if (stats::next_step(verdict, stats::GateProgress{true, look}, options) == stats::NextStep::add_repeats) {
      launch_probe_job(b, candidate, target, static_cast<std::uint32_t>(options.extra_repeats_per_round));
      return;
    }
  }
  answer_target(b, candidate, target, probe_verdict_from(verdict),
                fmt::format("{} after {} look{}, {} repeats a side: {}", stats::to_string(verdict), probe.looks,
                            probe.looks == 1 ? "" : "s", probe.candidate.size(),
                            describe_comparison(*comparison, comparison->test.p_value)));
}

void RunBisections::on_probe_given_up(const RunJob& job, std::string why) {
  const auto target = current_target(job);
  if (!target) return;
  answer_target(*job.owner.bisection, job.owner.candidate, *target, ProbeVerdict::inconclusive, std::move(why));
}

void RunBisections::on_probe_retried(const RunJob& job, std::uint64_t new_tag) {
  const auto target = current_target(job);
  if (!target) return;
  runs_[*job.owner.bisection].probes.at(job.owner.candidate).targets[*target].tag = new_tag;
}

void RunBisections::on_bundle_built(std::size_t history_index, Result<Bundle> bundle) {
  auto it = builds_.find(history_index);
  if (it == builds_.end() || it->second.state != BuildState::building) return;
  BundleBuild& build = it->second;
  const auto& history = input_.history;
  if (!bundle) {
    build.state = BuildState::failed;
    build.error = bundle.error().message;
  } else if (history_index >= history.size() || bundle->change_count != history_index + 1 ||
             bundle->last_change != history[history_index].id) {
    build.state = BuildState::failed;
    const std::string expected = history_index < history.size() ? history[history_index].id : "?";
    build.error = fmt::format("the built bundle {} does not end with change {}; the builder built the wrong change",
                              bundle->id, expected);
  } else {
    build.state = BuildState::built;
    build.bundle = std::move(*bundle);
  }
  const auto waiting = std::move(build.waiting);
  build.waiting.clear();
  const bool built = build.state == BuildState::built;
  const std::string error = build.error;
  for (const auto& [b, candidate] : waiting) {
    BisectionRun& run = runs_[b];
    if (run.result || !run.probes.contains(candidate)) continue;  // cancelled meanwhile
    if (built) {
      launch_probe_jobs(b, candidate);
    } else {
      answer_probe(b, candidate, ProbeVerdict::inconclusive, "the bundle at this change did not build: " + error);
    }
  }
}

void RunBisections::finish(std::size_t b) {
  BisectionRun& run = runs_[b];
  run.result = run.bisection.result();
  for (auto& [candidate, probe] : run.probes) {
    for (const auto& target : probe.targets) {
      if (target.tag != 0) book_.cancel(target.tag);
    }
  }
  run.probes.clear();
  // A target good at the culprit regressed after it; the last candidate is bad for every target.
  const auto at_culprit = run.verdicts.find(run.result->culprit_index);
  for (std::size_t t = 0; t < run.targets.size(); ++t) {
    const bool good_there = run.result->outcome == BisectOutcome::culprit_found && at_culprit != run.verdicts.end() &&
                            at_culprit->second[t] == ProbeVerdict::good;
    run.explained.push_back(!good_there);
  }
  finished_(b);
}

}  // namespace kiln::qualification

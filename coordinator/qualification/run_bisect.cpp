#include "coordinator/qualification/run_bisect.h"

#include <algorithm>

#include <fmt/format.h>

#include "common/stats/rng.h"
#include "coordinator/qualification/run_evidence.h"
#include "coordinator/qualification/run_measure.h"

namespace kiln::qualification {

RunBisections::RunBisections(const RunInput& input, JobBook& book, const FleetView& fleet,
                             std::vector<BisectionProgress>& progress, std::function<void(std::size_t)> finished)
    : input_(input), book_(book), fleet_(fleet), progress_(progress), finished_(std::move(finished)) {
  for (std::size_t i = 0; i < input_.history.size(); ++i) history_index_[input_.history[i].id] = i;
}

Result<RunBisections::Joined> RunBisections::join(std::size_t pair, TicketKind kind, const QualificationModel& model,
                                                  const std::string& revision,
                                                  const std::string& baseline_bundle_id) {
  const QualificationModel* probe = input_.set.probe_model_for(model.name);
  const auto key = std::make_tuple(probe != nullptr ? probe->name : model.name, kind, baseline_bundle_id);
  if (auto it = by_probe_.find(key); it != by_probe_.end()) {
    BisectionRun& run = runs_[it->second];
    if (!run.result) run.pairs.push_back(pair);
    return Joined{it->second, false};
  }
  if (baseline_bundle_id.empty()) {
    return fail(Errc::not_found,
                fmt::format("revision {} has no accepted baseline bundle to bisect from", revision));
  }
  auto candidates = changes_between(input_.history, input_.baselines.at(revision), input_.candidate);
  if (!candidates) return tl::unexpected(candidates.error());
  std::vector<std::size_t> indexes;
  for (const auto& id : *candidates) indexes.push_back(history_index_.at(id));
  auto bisection = Bisection::start(*candidates, input_.settings.bisect);
  if (!bisection) return tl::unexpected(bisection.error());
  const std::size_t b = runs_.size();
  by_probe_[key] = b;
  runs_.push_back(BisectionRun{pair, kind, probe != nullptr ? *probe : model, revision, baseline_bundle_id,
                               std::move(*bisection), std::move(indexes), {pair}, std::nullopt, {}, model.name, {}});
  book_.log(fmt::format("bisecting the {} of {} on revision {} over {} changes with {}", to_string(kind), model.name,
                        revision, candidates->size(), runs_.back().probe_model.name));
  return Joined{b, true};
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
    progress_.push_back({run.model, run.revision, run.bisection.rounds(), run.bisection.probes_started()});
  }
}

void RunBisections::advance(std::size_t b) {
  for (;;) {
    BisectionRun& run = runs_[b];
    if (run.result) return;
    const std::size_t running = run.bisection.running().size();
    const std::size_t parallel = std::max<std::size_t>(
        1, std::min(input_.settings.max_probes_per_bisection, fleet_.free_nodes(run.revision) + running));
    BisectPlan plan = run.bisection.next_probes(parallel > running ? parallel - running : 0);
    for (std::size_t candidate : plan.cancel) {
      auto it = run.probes.find(candidate);
      if (it == run.probes.end()) continue;
      if (it->second.tag != 0) book_.cancel(it->second.tag);
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
  run.probes[candidate] = BisectionRun::Probe{};
  auto it = builds_.find(index);
  if (it == builds_.end()) {
    builds_[index].waiting.emplace_back(b, candidate);
    book_.push(run_action::BuildBundle{index});
    return false;
  }
  BundleBuild& build = it->second;
  switch (build.state) {
    case BuildState::building: build.waiting.emplace_back(b, candidate); return false;
    case BuildState::built: launch_probe_job(b, candidate, repeats_for(run.probe_model, input_.settings)); return false;
    case BuildState::failed:
      run.probes.erase(candidate);
      (void)run.bisection.on_probe_result(candidate, ProbeVerdict::inconclusive,
                                          "the bundle at this change did not build: " + build.error);
      return true;
  }
  return false;
}

void RunBisections::launch_probe_job(std::size_t b, std::size_t candidate, std::uint32_t repeats_per_side) {
  BisectionRun& run = runs_[b];
  const bool performance = run.kind == TicketKind::performance_regression;
  JobRequest job = job_for_model(JobPurpose::bisect_probe, run.probe_model, run.revision,
                                 builds_.at(run.history_index[candidate]).bundle.id, input_.chips_per_node);
  job.baseline_bundle_id = performance ? run.baseline_bundle_id : std::string();
  job.repeats_per_side = performance ? repeats_per_side : 0;
  job.seed = run.probe_model.seed;
  run.probes[candidate].tag = book_.enqueue(std::move(job), JobOwner{run.owner_pair, b, candidate}, true);
}

void RunBisections::answer_probe(std::size_t b, std::size_t candidate, ProbeVerdict verdict, std::string detail) {
  BisectionRun& run = runs_[b];
  run.probes.erase(candidate);
  (void)run.bisection.on_probe_result(candidate, verdict, std::move(detail));
  pump(b);
}

bool RunBisections::current_probe(const RunJob& job) const {
  const BisectionRun& run = runs_[*job.owner.bisection];
  auto it = run.probes.find(job.owner.candidate);
  return !run.result && it != run.probes.end() && it->second.tag == job.request.tag;
}

void RunBisections::on_probe_result(const RunJob& job, const JobResult& result) {
  if (!current_probe(job)) return;  // obsolete
  const std::size_t b = *job.owner.bisection;
  const std::size_t candidate = job.owner.candidate;
  BisectionRun& run = runs_[b];
  if (run.kind == TicketKind::correctness_regression) {
    answer_probe(b, candidate, probe_verdict_from_correctness(result.correct),
                 result.correct ? "outputs correct" : result.correctness_detail);
    return;
  }
  if (!result.correct) {
    answer_probe(b, candidate, ProbeVerdict::inconclusive,
                 "outputs incorrect at this change, performance not judged: " + result.correctness_detail);
    return;
  }
  // One targeted comparison at alpha, with the gate's extra rounds while unsure (the
  // confirmation stage's rule: stats::decide at alpha, stats::next_step).
  BisectionRun::Probe& probe = run.probes.at(candidate);
  probe.baseline.insert(probe.baseline.end(), result.baseline_samples.begin(), result.baseline_samples.end());
  probe.candidate.insert(probe.candidate.end(), result.candidate_samples.begin(), result.candidate_samples.end());
  const stats::PerfGateOptions& options = input_.settings.perf;
  auto comparison = stats::compare(probe.baseline, probe.candidate, options,
                                   stats::derive_seed(input_.settings.seed, job.request.tag));
  if (!comparison) {
    answer_probe(b, candidate, ProbeVerdict::inconclusive,
                 "the samples could not be compared: " + comparison.error().message);
    return;
  }
  const stats::Verdict verdict = stats::decide(*comparison, comparison->test.p_value, options.alpha, options);
  const stats::GateProgress progress{true, probe.extra_rounds};
  if (stats::next_step(verdict, progress, options) == stats::NextStep::add_repeats) {
    ++probe.extra_rounds;
    launch_probe_job(b, candidate, static_cast<std::uint32_t>(options.extra_repeats_per_round));
    return;
  }
  answer_probe(b, candidate, probe_verdict_from(verdict),
               fmt::format("{}: {}", stats::to_string(verdict),
                           describe_comparison(*comparison, comparison->test.p_value)));
}

void RunBisections::on_probe_given_up(const RunJob& job, std::string why) {
  if (!current_probe(job)) return;
  answer_probe(*job.owner.bisection, job.owner.candidate, ProbeVerdict::inconclusive, std::move(why));
}

void RunBisections::on_probe_retried(const RunJob& job, std::uint64_t new_tag) {
  auto& probes = runs_[*job.owner.bisection].probes;
  if (auto probe = probes.find(job.owner.candidate); probe != probes.end() && probe->second.tag == job.request.tag) {
    probe->second.tag = new_tag;
  }
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
    auto probe = run.probes.find(candidate);
    if (run.result || probe == run.probes.end() || probe->second.tag != 0) continue;  // cancelled meanwhile
    if (built) {
      launch_probe_job(b, candidate, repeats_for(run.probe_model, input_.settings));
    } else {
      answer_probe(b, candidate, ProbeVerdict::inconclusive, "the bundle at this change did not build: " + error);
    }
  }
}

void RunBisections::finish(std::size_t b) {
  BisectionRun& run = runs_[b];
  run.result = run.bisection.result();
  for (auto& [candidate, probe] : run.probes) {
    if (probe.tag != 0) book_.cancel(probe.tag);
  }
  run.probes.clear();
  finished_(b);
}

}  // namespace kiln::qualification

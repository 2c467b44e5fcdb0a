#include "qualification/run.h"

#include <algorithm>
#include <map>
#include <set>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "qualification/run_bisect.h"
#include "qualification/run_context.h"
#include "qualification/run_evidence.h"
#include "qualification/noise_history.h"
#include "qualification/run_gate.h"
#include "qualification/run_tickets.h"
#include "qualification/run_triage.h"

namespace kiln::qualification {

// The composition: each (model, revision) pair moves through the phases, and this routes what
// one phase concludes to the next and every verdict into the report.
struct QualificationRun::State {
  enum class Stage { waiting, measuring, performance, triage, bisection, done };

  struct Pair {
    std::size_t model = 0;  // into input.models
    std::string revision;
    std::string baseline_bundle_id;  // empty: correctness only
    Stage stage = Stage::waiting;
    bool started = false;
    TimeMs first_start_ms = 0;
    std::uint64_t measure_tag = 0;
    std::optional<std::size_t> bisection;  // in Stage::bisection, none until it starts
    TicketKind regression_kind = TicketKind::performance_regression;
    ModelVerdict regression_verdict = ModelVerdict::performance_regression;
    std::string regression_detail;
    std::uint64_t failing_job_id = 0;  // the coordinator's job whose outputs were wrong, when known
  };

  static std::vector<Pair> make_pairs(const RunInput& input) {
    std::vector<Pair> pairs;
    for (std::size_t m = 0; m < input.models.size(); ++m) {
      for (const auto& revision : input.settings.revisions) {
        Pair pair;
        pair.model = m;
        pair.revision = revision;
        if (auto it = input.baselines.find(revision); it != input.baselines.end()) {
          pair.baseline_bundle_id = it->second.id;
        }
        pairs.push_back(std::move(pair));
      }
    }
    return pairs;
  }

  static std::vector<bool> with_baseline(const std::vector<Pair>& pairs) {
    std::vector<bool> judged;
    for (const Pair& pair : pairs) judged.push_back(!pair.baseline_bundle_id.empty());
    return judged;
  }

  State(RunInput run_input, TimeMs now)
      : input(std::move(run_input)),
        now_ms(now),
        pairs(make_pairs(input)),
        tickets(book, report),
        plans(plans_for(input, pairs, book)),
        gate(with_baseline(pairs), input.settings.perf, input.settings.seed, plans),
        triage(input.settings.triage, pairs.size()),
        bisections(input, book, fleet, report.bisections_running, [this](std::size_t b) { finish_bisection(b); }) {}

  // The sequential rule: every judged pair's plan from its recorded noise; logged, because the
  // repeats a model gets are a decision people should be able to read back.
  static std::vector<stats::SequentialPlan> plans_for(const RunInput& input, const std::vector<Pair>& pairs,
                                                      JobBook& book) {
    std::vector<stats::SequentialPlan> plans;
    if (input.settings.perf.rule != stats::GateRule::sequential) return plans;
    static const std::vector<std::vector<double>> no_records;
    for (const Pair& pair : pairs) {
      const std::string& model = input.models[pair.model].name;
      auto records = input.baseline_history.find({model, pair.revision});
      std::string note;
      plans.push_back(plan_for_pair(records == input.baseline_history.end() ? no_records : records->second,
                                    input.settings.perf, &note));
      if (pair.baseline_bundle_id.empty()) continue;
      if (!note.empty()) book.log(fmt::format("{} on revision {}: {}", model, pair.revision, note));
      book.log(fmt::format("{} on revision {}: {}", model, pair.revision, describe_plan(plans.back())));
    }
    return plans;
  }

  RunInput input;
  RunReport report;
  TimeMs now_ms = 0;
  std::vector<Pair> pairs;
  JobBook book;
  FleetView fleet;
  RunTickets tickets;
  std::vector<stats::SequentialPlan> plans;  // by pair; empty under the fixed rule
  RunGate gate;
  RunTriage triage;
  RunBisections bisections;

  const QualificationModel& model_of(const Pair& pair) const { return input.models[pair.model]; }
  ModelReport& report_of(std::size_t pair) { return report.models[pair]; }

  static void add_unique(std::vector<std::string>& list, const std::string& value) {
    if (!value.empty() && std::find(list.begin(), list.end(), value) == list.end()) list.push_back(value);
  }

  // A follow-up job of the pair: the model on its revision with the candidate, its own seed.
  std::uint64_t enqueue_followup(std::size_t p, JobRequest job) {
    job.seed = model_of(pairs[p]).seed;
    return book.enqueue(std::move(job), JobOwner{p, std::nullopt, 0}, true);
  }

  JobRequest pair_job(std::size_t p, JobPurpose purpose) const {
    const Pair& pair = pairs[p];
    return job_for_model(purpose, model_of(pair), pair.revision, input.candidate.id, input.chips_per_node);
  }

  // -- verdicts -----------------------------------------------------------------------------

  void finalize(std::size_t p, ModelVerdict verdict, std::string detail) {
    Pair& pair = pairs[p];
    if (pair.stage == Stage::done) return;
    pair.stage = Stage::done;
    ModelReport& model_report = report_of(p);
    model_report.verdict = verdict;
    model_report.detail = std::move(detail);
    model_report.duration_ms = pair.started ? now_ms - pair.first_start_ms : 0;
    if (fails_run(verdict)) {
      book.log(fmt::format("{} on revision {}: {}: {}", model_report.model, pair.revision, to_string(verdict),
                           model_report.detail));
    }
    start_ready_bisections();
    check_finished();
  }

  void check_finished() {
    if (report.finished) return;
    if (std::any_of(pairs.begin(), pairs.end(), [](const Pair& pair) { return pair.stage != Stage::done; })) return;
    // Every verdict is in: nothing left to measure.
    book.cancel_all_unfinished();
    report.finished = true;
    report.finished_at_ms = now_ms;
    report.passed = std::none_of(report.models.begin(), report.models.end(),
                                 [](const ModelReport& m) { return fails_run(m.verdict); });
    book.log(fmt::format("qualification run {} finished: {}", report.run_id, report.passed ? "passed" : "failed"));
  }

  // -- gate ---------------------------------------------------------------------------------

  void apply(const GateStep& step) {
    for (const GateJob& request : step.jobs) {
      JobRequest job = pair_job(request.pair, request.purpose);
      job.baseline_bundle_id = pairs[request.pair].baseline_bundle_id;
      job.repeats_per_side = request.repeats_per_side;
      enqueue_followup(request.pair, std::move(job));
    }
    for (const GateConclusion& conclusion : step.concluded) conclude_performance(conclusion.pair, conclusion.outcome);
  }

  void conclude_performance(std::size_t p, const stats::ModelGateOutcome& outcome) {
    report_of(p).performance = outcome;
    const std::string detail = describe_outcome(outcome);
    if (outcome.error) {
      finalize(p, ModelVerdict::error, detail);
      return;
    }
    if (outcome.regression_confirmed) {
      start_bisection(p, TicketKind::performance_regression, detail);
      return;
    }
    switch (outcome.verdict) {
      case stats::Verdict::improvement: finalize(p, ModelVerdict::improved, detail); return;
      case stats::Verdict::no_change: finalize(p, ModelVerdict::passed, detail); return;
      case stats::Verdict::inconclusive:
        finalize(p, ModelVerdict::inconclusive, detail + "; still undecided after the extra rounds: look at it");
        return;
      case stats::Verdict::regression:  // only reported once confirmed, handled above
        finalize(p, ModelVerdict::performance_regression, detail);
        return;
    }
  }

  // -- triage -------------------------------------------------------------------------------

  void begin_triage(std::size_t p, const JobResult& failed) {
    const std::string& node = failed.node_id;
    const std::string& detail = failed.correctness_detail;
    apply(gate.leave(p));
    Pair& pair = pairs[p];
    if (pair.stage == Stage::done || pair.stage == Stage::triage || pair.stage == Stage::bisection) return;
    pair.stage = Stage::triage;
    pair.failing_job_id = failed.job_id;
    const QualificationModel& model = model_of(pair);
    const TriageStart start =
        triage.begin(p, FailedRun{model.name, model.owner_team, node, pair.revision, input.candidate.id}, detail,
                     nodes_for(model, input.chips_per_node), fleet.healthy());
    if (start.unconfirmed) {
      start_bisection(p, TicketKind::correctness_regression, *start.unconfirmed);
      return;
    }
    for (const TriageRerun& rerun : start.reruns) {
      JobRequest job = pair_job(p, rerun.purpose);
      job.node_id = rerun.node_id;
      enqueue_followup(p, std::move(job));
    }
    book.log(fmt::format("{} failed on node {} (revision {}): rerunning on {} to tell hardware from software",
                         model.name, node, pair.revision, triage.rerun_node(p)));
  }

  void decide_triage(std::size_t p, const Result<TriageAction>& action) {
    if (!action) {
      finalize(p, ModelVerdict::error, "triage failed: " + action.error().message);
      return;
    }
    report_of(p).triage = *action;
    const Pair& pair = pairs[p];
    switch (action->decision) {
      case TriageDecision::hardware_suspect: {
        const std::string node = *action->quarantine_node;
        if (fleet.quarantine(node)) book.push(run_action::QuarantineNode{node, action->reason, pair.failing_job_id});
        const std::string id = tickets.file(hardware_suspect_ticket(
            {report.run_id, model_of(pair).name, pair.revision, input.candidate.id, triage.rerun_node(p),
             triage.failure_detail(p), *action, triage.options().lab_team},
            now_ms));
        add_unique(report_of(p).ticket_ids, id);
        finalize(p, ModelVerdict::hardware_suspect, action->reason + "; node quarantined, ticket " + id);
        return;
      }
      case TriageDecision::software_regression:
        start_bisection(p, TicketKind::correctness_regression, triage.failure_detail(p) + "; " + action->reason);
        return;
      case TriageDecision::flaky:
        finalize(p, ModelVerdict::flaky, action->reason + "; performance not judged this run");
        return;
    }
  }

  // A rerun on a node quarantined when it started or while it ran says nothing about the stack:
  // its result is no evidence. One on the other node runs again on another healthy node; the one
  // on the failing node was optional evidence anyway.
  void discard_rerun(std::size_t p, const RunJob& job, const JobResult& result) {
    const std::string& model = model_of(pairs[p]).name;
    book.log(fmt::format("{} {} on node {} not counted as triage evidence: the node was quarantined while it ran ({})",
                         model, to_string(job.request.purpose), result.node_id, result.node_quarantined));
    if (job.request.purpose == JobPurpose::triage_rerun) {
      if (auto other = triage.rerun_elsewhere(p, result.node_id, fleet.healthy())) {
        JobRequest again = pair_job(p, JobPurpose::triage_rerun);
        again.node_id = *other;
        enqueue_followup(p, std::move(again));
        book.log(fmt::format("{}: rerunning on {} instead", model, *other));
        return;
      }
      book.log(fmt::format("{}: no other healthy node of revision {} to rerun on", model, pairs[p].revision));
    }
    if (auto decision = triage.on_rerun(p, job.request.purpose, std::nullopt)) decide_triage(p, *decision);
  }

  // -- bisection and tickets ----------------------------------------------------------------

  void start_bisection(std::size_t p, TicketKind kind, std::string detail) {
    Pair& pair = pairs[p];
    pair.regression_kind = kind;
    pair.regression_verdict = kind == TicketKind::performance_regression ? ModelVerdict::performance_regression
                                                                         : ModelVerdict::correctness_regression;
    pair.regression_detail = std::move(detail);
    if (!input.settings.bisect_regressions) {
      finalize(p, pair.regression_verdict, pair.regression_detail + "; not bisected (bisection is off)");
      return;
    }
    pair.stage = Stage::bisection;
    pair.bisection.reset();
    start_ready_bisections();
  }

  // One bisection per culprit: the regressions between one baseline and the candidate are
  // bisected together, so it waits until no other pair of that baseline can still regress (every
  // one has its verdict or waits for a bisection).
  void start_ready_bisections() {
    for (;;) {
      std::optional<std::string> ready;
      for (const Pair& pair : pairs) {
        if (pair.stage == Stage::bisection && !pair.bisection && !undecided(pair.baseline_bundle_id)) {
          ready = pair.baseline_bundle_id;
          break;
        }
      }
      if (!ready) return;
      std::vector<std::size_t> waiting;
      std::vector<Regression> regressions;
      for (std::size_t p = 0; p < pairs.size(); ++p) {
        const Pair& pair = pairs[p];
        if (pair.stage != Stage::bisection || pair.bisection || pair.baseline_bundle_id != *ready) continue;
        waiting.push_back(p);
        regressions.push_back({p, pair.regression_kind, &model_of(pair), pair.revision});
      }
      auto started = bisections.start(regressions, *ready);
      if (!started) {
        for (std::size_t p : waiting) {
          finalize(p, pairs[p].regression_verdict,
                   pairs[p].regression_detail + "; not bisected: " + started.error().message);
        }
        continue;
      }
      for (std::size_t p : waiting) pairs[p].bisection = *started;
      bisections.pump(*started);
    }
  }

  bool undecided(const std::string& baseline_bundle_id) const {
    return std::any_of(pairs.begin(), pairs.end(), [&](const Pair& pair) {
      return pair.baseline_bundle_id == baseline_bundle_id && pair.stage != Stage::bisection &&
             pair.stage != Stage::done;
    });
  }

  void finish_bisection(std::size_t b) {
    const BisectionRun& run = bisections.at(b);
    const BisectResult result = *run.result;
    const std::vector<BisectionTarget> targets = run.targets;
    const std::vector<bool> explained = run.explained;
    std::map<std::size_t, std::vector<std::string>> tickets_of;  // by pair
    if (result.outcome == BisectOutcome::culprit_found) {
      const Change& culprit = input.history[run.history_index[result.culprit_index]];
      for (TicketKind kind : {TicketKind::performance_regression, TicketKind::correctness_regression}) {
        std::optional<CulpritFound> found;
        std::vector<std::size_t> explained_pairs;
        for (std::size_t t = 0; t < targets.size(); ++t) {
          if (!explained[t] || targets[t].kind != kind) continue;
          for (std::size_t p : targets[t].pairs) {
            if (!found) found = culprit_found(p, targets[t], run.baseline_bundle_id, result, culprit);
            add_unique(found->models, model_of(pairs[p]).name);
            explained_pairs.push_back(p);
          }
        }
        if (!found) continue;
        const std::string id = tickets.file(culprit_ticket(*found, now_ms));
        for (std::size_t p : explained_pairs) tickets_of[p].push_back(id);
      }
    } else {
      // Confirmed but not pinned down: the models' owners hear of it, with the range.
      for (const BisectionTarget& target : targets) {
        for (std::size_t p : target.pairs) {
          const ModelReport& model_report = report_of(p);
          tickets_of[p].push_back(tickets.file(unpinned_ticket(
              {report.run_id, target.kind, model_report.model, model_report.owner_team, pairs[p].revision,
               target.probe_model.name, input.candidate.id, run.baseline_bundle_id, pairs[p].regression_detail,
               result, model_report.performance, model_report.triage},
              now_ms)));
        }
      }
    }
    book.log(fmt::format("bisection of {} in {} rounds (at most {} for {} changes with {} probes a round): {}",
                         targets.front().model, result.rounds, result.round_bound, result.candidates.size(),
                         result.probes_per_round, result.detail));
    const bool all_explained = std::all_of(explained.begin(), explained.end(), [](bool e) { return e; });
    const std::optional<std::size_t> next =
        all_explained ? std::nullopt : std::optional<std::size_t>(bisections.follow_up(b));
    for (std::size_t t = 0; t < targets.size(); ++t) {
      for (std::size_t p : targets[t].pairs) {
        if (explained[t]) {
          conclude_from_bisection(p, b, t, targets, tickets_of[p]);
        } else {
          pairs[p].bisection = next;
        }
      }
    }
    if (next) bisections.pump(*next);
  }

  CulpritFound culprit_found(std::size_t p, const BisectionTarget& target, const std::string& baseline_bundle_id,
                             const BisectResult& result, const Change& culprit) {
    const Pair& pair = pairs[p];
    const ModelReport& model_report = report_of(p);
    return CulpritFound{report.run_id,          target.kind,      model_of(pair).name,      pair.revision,
                        target.probe_model.name, input.candidate.id, baseline_bundle_id,     pair.regression_detail,
                        result,                 culprit,          model_report.performance, model_report.triage,
                        {}};
  }

  void conclude_from_bisection(std::size_t p, std::size_t b, std::size_t target,
                               const std::vector<BisectionTarget>& targets, const std::vector<std::string>& ticket_ids) {
    Pair& pair = pairs[p];
    const BisectionRun& run = bisections.at(b);
    const BisectResult& result = *run.result;
    ModelReport& model_report = report_of(p);
    model_report.bisection = result;
    // Its own evidence of each probe: the shared bisection's is every model's.
    auto& probes = model_report.bisection->evidence;
    for (std::size_t i = 0; i < probes.size() && i < run.target_details.size(); ++i) {
      probes[i].detail = run.target_details[i][target];
    }
    for (const auto& id : ticket_ids) add_unique(model_report.ticket_ids, id);
    std::string detail = pair.regression_detail;
    std::vector<std::string> others;
    for (const BisectionTarget& target : targets) {
      for (std::size_t other : target.pairs) {
        if (other == p) continue;
        add_unique(others, fmt::format("{} on revision {}", model_of(pairs[other]).name, pairs[other].revision));
      }
    }
    // Named up to a few: a night where a hundred models regress together would otherwise name
    // every other one in each model's detail.
    constexpr std::size_t kNamed = 3;
    if (others.size() > kNamed) {
      detail += fmt::format("; bisected once, together with {} and {} more",
                            fmt::join(others.begin(), others.begin() + kNamed, ", "), others.size() - kNamed);
    } else if (!others.empty()) {
      detail += fmt::format("; bisected once, together with {}", fmt::join(others, ", "));
    }
    if (result.outcome == BisectOutcome::culprit_found) {
      const Change& culprit = input.history[run.history_index[result.culprit_index]];
      detail += fmt::format("; culprit {} ({}, {}): {}", culprit.id, to_string(culprit.layer), culprit.owner_team,
                            culprit.summary);
    } else {
      detail += fmt::format("; the bisection could not pin the culprit down: suspects {}, ticketed to {} with the "
                            "range",
                            fmt::join(result.suspects, ", "), model_report.owner_team);
    }
    if (!ticket_ids.empty()) detail += fmt::format("; ticket {}", fmt::join(ticket_ids, ", "));
    finalize(p, pair.regression_verdict, std::move(detail));
  }

  // -- job results --------------------------------------------------------------------------

  // A job that could not run after its last attempt.
  void give_up(const RunJob& job, const JobResult& result) {
    const std::string why = fmt::format("{} job did not run after {} attempts{}", to_string(job.request.purpose),
                                        job.attempt, result.detail.empty() ? "" : ": " + result.detail);
    if (job.request.purpose == JobPurpose::bisect_probe) {
      bisections.on_probe_given_up(job, why);
      return;
    }
    const std::size_t p = job.owner.pair;
    if (job.request.purpose == JobPurpose::origin_rerun && pairs[p].stage == Stage::triage) {
      // The rerun on the failing node is optional evidence (a dead node cannot run it).
      book.log(fmt::format("{}; triaging {} without it", why, job.request.model));
      if (auto decision = triage.on_rerun(p, job.request.purpose, std::nullopt)) decide_triage(p, *decision);
      return;
    }
    apply(gate.leave(p));
    finalize(p, ModelVerdict::error, why);
  }

  void on_pair_result(const RunJob& job, const JobResult& result) {
    const std::size_t p = job.owner.pair;
    Pair& pair = pairs[p];
    if (pair.stage == Stage::done) return;
    if (job.request.purpose == JobPurpose::measure && result.training) report_of(p).training = result.training;
    switch (job.request.purpose) {
      case JobPurpose::measure:
      case JobPurpose::extra_repeats:
      case JobPurpose::confirmation:
        if (!result.correct) {
          begin_triage(p, result);
          return;
        }
        if (!gate.judges(p)) {
          finalize(p, ModelVerdict::passed,
                   fmt::format("outputs correct; no baseline on revision {}: performance not judged", pair.revision));
          return;
        }
        if (gate.left(p)) return;
        if (job.request.purpose == JobPurpose::measure) {
          pair.stage = Stage::performance;
          apply(gate.add_first_samples(p, result.baseline_samples, result.candidate_samples));
        } else {
          apply(gate.add_more_samples(p, result.baseline_samples, result.candidate_samples));
        }
        return;
      case JobPurpose::triage_rerun:
      case JobPurpose::origin_rerun:
        if (pair.stage != Stage::triage) return;
        if (!result.node_quarantined.empty()) {
          discard_rerun(p, job, result);
          return;
        }
        if (auto decision = triage.on_rerun(p, job.request.purpose, result.correct)) decide_triage(p, *decision);
        return;
      case JobPurpose::bisect_probe: return;
    }
  }
};

QualificationRun::QualificationRun(std::unique_ptr<State> state) : state_(std::move(state)) {}
QualificationRun::QualificationRun(QualificationRun&&) noexcept = default;
QualificationRun& QualificationRun::operator=(QualificationRun&&) noexcept = default;
QualificationRun::~QualificationRun() = default;

namespace {

Status validate_input(const RunInput& input) {
  const RunSettings& settings = input.settings;
  if (settings.revisions.empty()) {
    return fail(Errc::invalid_argument, "the run has no hardware revision to qualify on; list the candidate's "
                                        "revisions the fleet has");
  }
  std::set<std::string> revisions;
  for (const auto& revision : settings.revisions) {
    if (revision.empty() || !revisions.insert(revision).second) {
      return fail(Errc::invalid_argument, fmt::format("revision '{}' is empty or listed twice; list each revision once",
                                                      revision));
    }
  }
  if (input.models.empty()) return fail(Errc::invalid_argument, "the run has no model to qualify; select some models");
  std::set<std::string> names;
  for (const auto& model : input.models) {
    if (model.name.empty()) return fail(Errc::invalid_argument, "a model of the run has no name; name every model");
    if (!names.insert(model.name).second) {
      return fail(Errc::invalid_argument, fmt::format("model {} is listed twice; list each model once", model.name));
    }
    if (model.chips < 1) {
      return fail(Errc::invalid_argument, fmt::format("model {} needs {} chips; a model needs at least one",
                                                      model.name, model.chips));
    }
  }
  if (settings.max_jobs_in_flight < 1 || settings.max_probes_per_bisection < 1 || settings.max_job_attempts < 1 ||
      settings.repeats_per_side < 1 || settings.repeats_multiplier < 1 || input.chips_per_node < 1) {
    return fail(Errc::invalid_argument, "max_jobs_in_flight, max_probes_per_bisection, max_job_attempts, "
                                        "repeats_per_side, repeats_multiplier and chips_per_node must all be at least 1");
  }
  if (auto ok = stats::validate(settings.perf); !ok) return ok;
  if (auto ok = validate(settings.bisect); !ok) return ok;
  if (input.candidate.id.empty()) return fail(Errc::invalid_argument, "the candidate bundle has no id; seal() it");
  std::set<std::string> history_ids;
  for (const auto& change : input.history) {
    if (!history_ids.insert(change.id).second) {
      return fail(Errc::invalid_argument, fmt::format("change {} appears twice in the history; ids must be unique",
                                                      change.id));
    }
  }
  if (auto ok = bundle_changes(input.history, input.candidate); !ok) return tl::unexpected(ok.error());
  for (const auto& [revision, baseline] : input.baselines) {
    if (auto ok = bundle_changes(input.history, baseline); !ok) return tl::unexpected(ok.error());
    if (baseline.change_count > input.candidate.change_count) {
      return fail(Errc::invalid_argument,
                  fmt::format("the baseline {} of revision {} is not an ancestor of the candidate (it holds {} changes, "
                              "the candidate {}); pick the last accepted bundle of the same history",
                              baseline.id, revision, baseline.change_count, input.candidate.change_count));
    }
  }
  return {};
}

}  // namespace

Result<QualificationRun> QualificationRun::start(RunInput input, TimeMs now) {
  if (auto ok = validate_input(input); !ok) return tl::unexpected(ok.error());
  auto state = std::make_unique<State>(std::move(input), now);
  State& s = *state;
  const RunSettings& settings = s.input.settings;
  s.report.run_id = settings.run_id;
  s.report.tier = settings.tier;
  s.report.candidate_bundle_id = s.input.candidate.id;
  s.report.candidate_bundle = s.input.candidate;
  s.report.started_at_ms = now;
  for (const auto& revision : settings.revisions) {
    if (auto it = s.input.baselines.find(revision); it != s.input.baselines.end()) {
      s.report.baseline_bundle_ids[revision] = it->second.id;
      s.report.baseline_bundles[revision] = it->second;
    }
  }
  for (std::size_t p = 0; p < s.pairs.size(); ++p) {
    State::Pair& pair = s.pairs[p];
    const QualificationModel& model = s.model_of(pair);
    ModelReport model_report;
    model_report.model = model.name;
    model_report.revision = pair.revision;
    model_report.owner_team = model.owner_team;
    s.report.models.push_back(std::move(model_report));
    JobRequest job =
        measure_job(model, pair.revision, s.input.candidate.id, pair.baseline_bundle_id, settings, s.input.chips_per_node);
    if (!s.plans.empty() && job.repeats_per_side > 0) {
      job.repeats_per_side = static_cast<std::uint32_t>(s.plans[p].repeats_per_look);
    }
    pair.measure_tag = s.book.enqueue(std::move(job), JobOwner{p, std::nullopt, 0}, false);
  }
  return QualificationRun(std::move(state));
}

void QualificationRun::set_nodes(std::vector<NodeCandidate> nodes, TimeMs now) {
  State& s = *state_;
  s.now_ms = now;
  s.fleet.set(std::move(nodes));
  // A revision with no healthy node gets nothing measured: its pairs that have not started are
  // skipped. An empty list says nothing (the shell may not have heard from any agent yet).
  if (s.fleet.known()) {
    for (std::size_t p = 0; p < s.pairs.size(); ++p) {
      State::Pair& pair = s.pairs[p];
      if (pair.stage != State::Stage::waiting) continue;
      const auto skipped = skip_reason(s.model_of(pair), pair.revision, s.fleet.healthy_nodes(pair.revision),
                                       s.input.chips_per_node);
      if (!skipped) continue;
      s.book.cancel(pair.measure_tag);
      s.apply(s.gate.leave(p));
      s.finalize(p, ModelVerdict::skipped, *skipped);
    }
  }
  // More free nodes: more parallel probes.
  s.bisections.pump_all();
}

Status QualificationRun::on_job_result(JobResult result, TimeMs now) {
  State& s = *state_;
  auto answered = s.book.answer(result.tag, s.report.run_id);
  if (!answered) return tl::unexpected(answered.error());
  if (*answered == nullptr) return {};  // a late answer to a cancelled job
  s.now_ms = now;
  const RunJob job = **answered;
  const bool probe = job.request.purpose == JobPurpose::bisect_probe;
  if (!probe) {
    ModelReport& report = s.report_of(job.owner.pair);
    State::add_unique(report.nodes, result.node_id);
    if (!result.backend.empty()) report.node_backends.emplace(result.node_id, result.backend);
  }
  if (!result.ran) {
    if (job.attempt >= s.input.settings.max_job_attempts) {
      s.give_up(job, result);
      return {};
    }
    const std::uint64_t tag = s.book.enqueue(job.request, job.owner, false, job.attempt + 1);
    if (probe) s.bisections.on_probe_retried(job, tag);
    if (job.request.purpose == JobPurpose::measure) s.pairs[job.owner.pair].measure_tag = tag;
    s.book.log(fmt::format("{} job {} of {} did not run ({}); starting it again as job {}",
                           to_string(job.request.purpose), job.request.tag, job.request.model,
                           result.detail.empty() ? "no detail" : result.detail, tag));
    return {};
  }
  if (probe) {
    s.bisections.on_probe_result(job, result);
  } else {
    s.on_pair_result(job, result);
  }
  return {};
}

void QualificationRun::on_bundle_built(std::size_t history_index, Result<Bundle> bundle, TimeMs now) {
  state_->now_ms = now;
  state_->bisections.on_bundle_built(history_index, std::move(bundle));
}

std::optional<RunAction> QualificationRun::poll_action() {
  State& s = *state_;
  if (auto action = s.book.pop_action()) return action;
  RunJob* job = s.book.start_next(s.input.settings.max_jobs_in_flight);
  if (job == nullptr) return std::nullopt;
  ++s.report.jobs_started;
  if (job->request.purpose != JobPurpose::bisect_probe) {
    State::Pair& pair = s.pairs[job->owner.pair];
    if (!pair.started) {
      pair.started = true;
      pair.first_start_ms = s.now_ms;
    }
    if (pair.stage == State::Stage::waiting) pair.stage = State::Stage::measuring;
  }
  return run_action::StartJob{job->request};
}

bool QualificationRun::finished() const { return state_->report.finished && !state_->book.has_actions(); }

const RunReport& QualificationRun::report() const { return state_->report; }

}  // namespace kiln::qualification

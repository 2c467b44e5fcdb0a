#include "coordinator/qualification/run.h"

#include <algorithm>
#include <cmath>
#include <tuple>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "common/stats/rng.h"

namespace kiln::qualification {

std::string_view to_string(Tier tier) {
  switch (tier) {
    case Tier::smoke: return "smoke";
    case Tier::nightly: return "nightly";
    case Tier::release: return "release";
  }
  return "unknown";
}

std::optional<Tier> tier_from_string(std::string_view name) {
  for (Tier tier : {Tier::smoke, Tier::nightly, Tier::release}) {
    if (to_string(tier) == name) return tier;
  }
  return std::nullopt;
}

std::string_view to_string(JobPurpose purpose) {
  switch (purpose) {
    case JobPurpose::measure: return "measure";
    case JobPurpose::extra_repeats: return "extra_repeats";
    case JobPurpose::confirmation: return "confirmation";
    case JobPurpose::triage_rerun: return "triage_rerun";
    case JobPurpose::origin_rerun: return "origin_rerun";
    case JobPurpose::bisect_probe: return "bisect_probe";
  }
  return "unknown";
}

std::string_view to_string(ModelVerdict verdict) {
  switch (verdict) {
    case ModelVerdict::pending: return "pending";
    case ModelVerdict::passed: return "passed";
    case ModelVerdict::improved: return "improved";
    case ModelVerdict::performance_regression: return "performance_regression";
    case ModelVerdict::correctness_regression: return "correctness_regression";
    case ModelVerdict::hardware_suspect: return "hardware_suspect";
    case ModelVerdict::flaky: return "flaky";
    case ModelVerdict::inconclusive: return "inconclusive";
    case ModelVerdict::skipped: return "skipped";
    case ModelVerdict::error: return "error";
  }
  return "unknown";
}

bool fails_run(ModelVerdict verdict) {
  switch (verdict) {
    case ModelVerdict::pending:
    case ModelVerdict::passed:
    case ModelVerdict::improved:
    case ModelVerdict::flaky:
    case ModelVerdict::inconclusive:
    case ModelVerdict::skipped: return false;
    default: return true;
  }
}

namespace {

using json = nlohmann::json;

constexpr std::string_view kWorkloadResultSchema = "kiln.workload-result/1";
constexpr std::string_view kBenchmarkReportSchema = "kiln.benchmark-report/1";

// A model's first measurement: its own repeats where the set declares them, else the run's.
std::uint32_t repeats_for(const QualificationModel& model, const RunSettings& settings) {
  return model.benchmark.repeats.value_or(settings.repeats_per_side) * settings.repeats_multiplier;
}

// How many whole nodes a model takes: 1 unless it needs more chips than one node has.
int nodes_for(const QualificationModel& model, int chips_per_node) {
  return (model.chips + chips_per_node - 1) / chips_per_node;
}

// The job's size for the model: its chips on one node, or whole nodes.
void size_for(JobRequest& job, const QualificationModel& model, int chips_per_node) {
  job.nodes = nodes_for(model, chips_per_node);
  job.chips = job.nodes > 1 ? chips_per_node : model.chips;
}

// A follow-up job's seed: independent of every other job's, and within the protocol's 63 bits.
std::uint64_t job_seed(std::uint64_t model_seed, std::uint64_t tag) {
  return stats::derive_seed(model_seed, tag) & static_cast<std::uint64_t>(INT64_MAX);
}

// JSON has no NaN or infinity: they are written as strings (docs/workloads.md).
json number(double value) {
  if (std::isfinite(value)) return value;
  return std::isnan(value) ? json("nan") : json(value > 0 ? "inf" : "-inf");
}

std::string percent(double fraction) { return fmt::format("{:+.2f}%", fraction * 100.0); }

json to_json(const stats::Comparison& c) {
  json out = {{"p_value", number(c.test.p_value)},
              {"method", stats::to_string(c.test.method)},
              {"n_baseline", c.test.n_baseline},
              {"n_candidate", c.test.n_candidate},
              {"baseline_median", number(c.shift.baseline_median)},
              {"hodges_lehmann", number(c.shift.hodges_lehmann)},
              {"relative_shift", number(c.shift.relative)},
              {"interval_method", stats::to_string(c.interval_method)},
              {"relative_ci", {number(c.relative_ci.low), number(c.relative_ci.high)}},
              {"ci_confidence", c.relative_ci.confidence}};
  if (c.bootstrap_ci) out["bootstrap_ci"] = {number(c.bootstrap_ci->low), number(c.bootstrap_ci->high)};
  return out;
}

json to_json(const stats::ModelGateOutcome& o) {
  json out = {{"finished", o.finished},
              {"verdict", stats::to_string(o.verdict)},
              {"regression_confirmed", o.regression_confirmed},
              {"regression_unconfirmed", o.regression_unconfirmed},
              {"initial_adjusted_p_value", number(o.initial_adjusted_p_value)},
              {"initial_extra_rounds", o.initial_extra_rounds},
              {"confirmation_extra_rounds", o.confirmation_extra_rounds}};
  out["initial"] = o.initial ? to_json(*o.initial) : json(nullptr);
  out["confirmation"] = o.confirmation ? to_json(*o.confirmation) : json(nullptr);
  out["error"] = o.error ? json(o.error->describe()) : json(nullptr);
  return out;
}

json to_json(const TriageAction& a) {
  return {{"decision", to_string(a.decision)},
          {"reason", a.reason},
          {"quarantine_node", a.quarantine_node ? json(*a.quarantine_node) : json(nullptr)},
          {"ticket_team", a.ticket_team ? json(*a.ticket_team) : json(nullptr)},
          {"start_bisection", a.start_bisection},
          {"count_flake", a.count_flake}};
}

// "throughput -3.05% (interval -3.9% .. -2.2%, p 1.2e-05)" from the comparison the verdict used.
std::string describe_comparison(const stats::Comparison& c, double p_value) {
  return fmt::format("throughput {} ({:.1f}% interval {} .. {}, p {:.2g}, {} vs {} samples)", percent(c.shift.relative),
                     c.relative_ci.confidence * 100.0, percent(c.relative_ci.low), percent(c.relative_ci.high), p_value,
                     c.test.n_candidate, c.test.n_baseline);
}

std::string describe_outcome(const stats::ModelGateOutcome& o) {
  if (o.error) return "the samples could not be compared: " + o.error->message;
  std::string text;
  if (o.initial) text = describe_comparison(*o.initial, o.initial_adjusted_p_value) + " (BH-adjusted p)";
  if (o.confirmation) {
    text += fmt::format("; confirmation rerun: {}", describe_comparison(*o.confirmation, o.confirmation->test.p_value));
  }
  if (o.regression_confirmed) text += "; regression confirmed by the rerun";
  if (o.regression_unconfirmed) {
    text += fmt::format("; the first measurement said regression, the rerun said {}: not reported",
                        stats::to_string(o.verdict));
  }
  return text;
}

// A number in a workload result: JSON numbers, or the strings "nan", "inf", "-inf".
Result<double> read_number(const json& value, std::string_view what) {
  if (value.is_number()) return value.get<double>();
  if (value.is_null()) return std::nan("");
  if (value.is_string()) {
    const auto& text = value.get_ref<const std::string&>();
    if (text == "nan") return std::nan("");
    if (text == "inf") return HUGE_VAL;
    if (text == "-inf") return -HUGE_VAL;
  }
  return fail(Errc::bad_message, fmt::format("{} is {}, not a number; the workload must write numbers (or \"nan\", "
                                             "\"inf\", \"-inf\")",
                                             what, value.dump()));
}

Result<std::vector<double>> read_timed_samples(const json& benchmark, std::string_view field) {
  std::vector<double> samples;
  if (benchmark.is_null()) return samples;
  if (!benchmark.is_object()) {
    return fail(Errc::bad_message, fmt::format("`{}` must be an object or null (docs/workloads.md)", field));
  }
  if (!benchmark.contains("samples")) return samples;
  const json& list = benchmark.at("samples");
  if (!list.is_array()) return fail(Errc::bad_message, fmt::format("`{}.samples` must be an array", field));
  for (const json& sample : list) {
    if (!sample.is_object()) return fail(Errc::bad_message, fmt::format("`{}.samples` holds a non-object", field));
    if (sample.value("phase", std::string()) != "timed") continue;
    if (!sample.contains("throughput")) {
      return fail(Errc::bad_message, fmt::format("a timed sample of `{}` has no throughput", field));
    }
    auto value = read_number(sample.at("throughput"), fmt::format("a timed throughput of `{}`", field));
    if (!value) return tl::unexpected(value.error());
    if (!std::isfinite(*value) || *value <= 0) {
      return fail(Errc::bad_message, fmt::format("a timed throughput of `{}` is {}, not a positive finite number; the "
                                                 "benchmark is broken, rerun the job",
                                                 field, *value));
    }
    samples.push_back(*value);
  }
  return samples;
}

Result<std::vector<LossPoint>> read_loss_curve(const json& curve, std::string_view what) {
  std::vector<LossPoint> points;
  if (!curve.is_array()) return fail(Errc::bad_message, fmt::format("{} must be an array of {{step, loss}}", what));
  for (const json& point : curve) {
    if (!point.is_object() || !point.contains("step") || !point.at("step").is_number_integer() ||
        !point.contains("loss")) {
      return fail(Errc::bad_message, fmt::format("{} holds {}, not a {{step, loss}} point", what, point.dump()));
    }
    auto loss = read_number(point.at("loss"), fmt::format("a loss in {}", what));
    if (!loss) return tl::unexpected(loss.error());
    points.push_back({point.at("step").get<int>(), *loss});
  }
  return points;
}

// The failing outputs' summaries, or the training detail: why the workload said "incorrect".
std::string incorrect_detail(const json& document) {
  std::vector<std::string> reasons;
  const json* correctness = document.contains("correctness") ? &document.at("correctness") : nullptr;
  if (correctness != nullptr && correctness->is_object()) {
    if (correctness->contains("outputs") && correctness->at("outputs").is_array()) {
      for (const json& output : correctness->at("outputs")) {
        if (output.is_object() && !output.value("passed", true)) {
          reasons.push_back(fmt::format("{}: {}", output.value("name", std::string("output")),
                                        output.value("summary", std::string("outside tolerance"))));
        }
      }
    }
    if (correctness->contains("training") && correctness->at("training").is_object()) {
      const json& training = correctness->at("training");
      if (!training.value("passed", true)) reasons.push_back(training.value("detail", std::string("training gate")));
    }
  }
  if (reasons.empty()) return "the workload reported its outputs incorrect against the golden";
  return fmt::format("{}", fmt::join(reasons, "; "));
}

// The timed throughputs the agent kept (throttled samples left out) from its benchmark report.
Result<std::vector<double>> read_unflagged(const json& report, std::string_view field) {
  std::vector<double> samples;
  if (!report.contains("unflagged_timed_throughputs") || !report.at("unflagged_timed_throughputs").is_array()) {
    return fail(Errc::bad_message, fmt::format("`{}unflagged_timed_throughputs` must be an array (docs/workloads.md)",
                                               field));
  }
  for (const json& value : report.at("unflagged_timed_throughputs")) {
    auto number = read_number(value, fmt::format("a throughput of `{}unflagged_timed_throughputs`", field));
    if (!number) return tl::unexpected(number.error());
    if (!std::isfinite(*number) || *number <= 0) {
      return fail(Errc::bad_message, fmt::format("a throughput of `{}unflagged_timed_throughputs` is {}, not a positive "
                                                 "finite number; rerun the job",
                                                 field, *number));
    }
    samples.push_back(*number);
  }
  return samples;
}

Status apply_training_gate(const json& document, const QualificationModel& model, JobResult& result);

// A benchmark job's result is the agent's report on the workload's document
// (kiln.benchmark-report/1, agent/bench): samples taken while a chip throttled are left out.
Result<JobResult> read_benchmark_report(const json& report, const QualificationModel& model) {
  if (!report.contains("correctness_passed") || !report.at("correctness_passed").is_boolean()) {
    return fail(Errc::bad_message, "the benchmark report has no boolean `correctness_passed`");
  }
  JobResult result;
  result.correct = report.at("correctness_passed").get<bool>();
  if (!result.correct) result.correctness_detail = incorrect_detail(report);
  auto candidate = read_unflagged(report, "");
  if (!candidate) return tl::unexpected(candidate.error());
  result.candidate_samples = std::move(*candidate);
  if (report.contains("baseline") && report.at("baseline").is_object()) {
    auto baseline = read_unflagged(report.at("baseline"), "baseline.");
    if (!baseline) return tl::unexpected(baseline.error());
    result.baseline_samples = std::move(*baseline);
  }
  if (report.contains("training") && report.at("training").is_object()) {
    if (auto ok = apply_training_gate(report, model, result); !ok) return tl::unexpected(ok.error());
  }
  return result;
}

Result<JobResult> read_workload_result_json(const json& document, const QualificationModel& model) {
  if (!document.is_object()) return fail(Errc::bad_message, "a workload result must be a JSON object");
  if (document.value("schema", std::string()) == kBenchmarkReportSchema) return read_benchmark_report(document, model);
  if (document.value("schema", std::string()) != kWorkloadResultSchema) {
    return fail(Errc::bad_message, fmt::format("the document's schema is {}, expected \"{}\" (docs/workloads.md)",
                                               document.contains("schema") ? document.at("schema").dump() : "missing",
                                               kWorkloadResultSchema));
  }
  if (!document.contains("passed") || !document.at("passed").is_boolean()) {
    return fail(Errc::bad_message, "the workload result has no boolean `passed`; the workload must write its verdict");
  }
  JobResult result;
  result.correct = document.at("passed").get<bool>();
  if (!result.correct) result.correctness_detail = incorrect_detail(document);

  if (document.contains("job") && document.at("job").is_object() && document.at("job").contains("chips") &&
      document.at("job").at("chips").is_array()) {
    for (const json& chip : document.at("job").at("chips")) {
      if (chip.is_number_unsigned()) result.chips.push_back(chip.get<std::uint32_t>());
    }
  }
  if (document.contains("benchmark")) {
    auto samples = read_timed_samples(document.at("benchmark"), "benchmark");
    if (!samples) return tl::unexpected(samples.error());
    result.candidate_samples = std::move(*samples);
  }
  if (document.contains("baseline_benchmark")) {
    auto samples = read_timed_samples(document.at("baseline_benchmark"), "baseline_benchmark");
    if (!samples) return tl::unexpected(samples.error());
    result.baseline_samples = std::move(*samples);
  }

  if (document.value("kind", std::string()) != "training") return result;
  if (auto ok = apply_training_gate(document, model, result); !ok) return tl::unexpected(ok.error());
  return result;
}

// Training: the coordinator's own gate on the curve the workload reports, against the reference
// curve the workload read from its golden.
Status apply_training_gate(const json& document, const QualificationModel& model, JobResult& result) {
  const json* reference_json = nullptr;
  if (document.contains("correctness") && document.at("correctness").is_object() &&
      document.at("correctness").contains("training") && document.at("correctness").at("training").is_object()) {
    reference_json = &document.at("correctness").at("training");
  }
  if (reference_json == nullptr || !reference_json->contains("reference_loss_curve")) return {};

  TrainingReference reference;
  auto reference_curve = read_loss_curve(reference_json->at("reference_loss_curve"),
                                         "correctness.training.reference_loss_curve");
  if (!reference_curve) return tl::unexpected(reference_curve.error());
  reference.loss_curve = std::move(*reference_curve);
  if (reference_json->contains("eval_reference")) {
    auto eval_reference = read_number(reference_json->at("eval_reference"), "correctness.training.eval_reference");
    if (!eval_reference) return tl::unexpected(eval_reference.error());
    reference.eval_score = *eval_reference;
  }

  TrainingRun run;
  if (document.contains("training") && document.at("training").is_object()) {
    const json& training = document.at("training");
    if (training.contains("loss_curve")) {
      auto curve = read_loss_curve(training.at("loss_curve"), "training.loss_curve");
      if (!curve) return tl::unexpected(curve.error());
      run.loss_curve = std::move(*curve);
    }
    if (training.contains("eval") && training.at("eval").is_object() && training.at("eval").contains("score")) {
      auto score = read_number(training.at("eval").at("score"), "training.eval.score");
      if (!score) return tl::unexpected(score.error());
      run.eval_score = *score;
    }
  }
  auto verdict = check_training(reference, run, model.eval_threshold);
  if (!verdict) {
    return fail(Errc::bad_message, fmt::format("the training reference of {} in this result is broken ({}); regenerate "
                                               "the golden",
                                               model.name, verdict.error().message));
  }
  if (!verdict->passed) {
    if (result.correct) {
      result.correctness_detail = verdict->summary;
    } else {
      result.correctness_detail += "; " + verdict->summary;
    }
    result.correct = false;
  }
  return {};
}

}  // namespace

Result<JobResult> read_workload_result(std::string_view document, const QualificationModel& model) {
  try {
    const json parsed = json::parse(document);
    return read_workload_result_json(parsed, model);
  } catch (const json::exception& e) {
    return fail(Errc::bad_message,
                fmt::format("the workload result of {} is not a valid result document ({}); see docs/workloads.md",
                            model.name, e.what()));
  }
}

// ---------------------------------------------------------------------------------------------
// The run.

struct QualificationRun::State {
  enum class Stage { waiting, measuring, performance, triage, bisection, done };

  struct Pair {
    std::size_t model = 0;  // into input.models
    std::string revision;
    std::string baseline_bundle_id;      // empty: correctness only
    std::optional<std::size_t> gate;     // index in the perf gate
    Stage stage = Stage::waiting;
    bool first_samples_in = false;
    bool out_of_gate = false;
    bool started = false;
    TimeMs first_start_ms = 0;
    std::uint64_t measure_tag = 0;
    // Triage.
    std::string failed_node;
    std::string rerun_node;
    std::string correctness_detail;
    std::vector<RunOutcome> outcomes;
    std::vector<RunOutcome> origin_outcomes;
    std::size_t triage_outstanding = 0;
    // Bisection.
    std::optional<std::size_t> bisection;
    ModelVerdict regression_verdict = ModelVerdict::performance_regression;
    std::string regression_detail;
  };

  enum class JobState { queued, running, answered, cancelled };

  struct Job {
    JobRequest request;
    std::size_t pair = 0;
    std::optional<std::size_t> bisection;
    std::size_t candidate = 0;  // into the bisection's candidates
    int attempt = 1;
    JobState state = JobState::queued;
  };

  struct ProbeState {
    std::uint64_t tag = 0;  // the job measuring it now; 0 while its bundle is being built
    std::vector<double> baseline;
    std::vector<double> candidate;
    int extra_rounds = 0;
  };

  struct BisectionRun {
    std::size_t owner_pair = 0;
    TicketKind kind = TicketKind::performance_regression;
    QualificationModel probe_model;
    std::string revision;
    std::string baseline_bundle_id;
    Bisection bisection;
    std::vector<std::size_t> history_index;   // per candidate
    std::map<std::size_t, ProbeState> probes;  // running probes by candidate
    std::vector<std::size_t> pairs;            // waiting for the result, the owner first
    std::optional<BisectResult> result;
    std::vector<std::string> ticket_ids;
  };

  enum class BuildState { building, built, failed };
  struct BundleBuild {
    BuildState state = BuildState::building;
    Bundle bundle;
    std::string error;
    std::vector<std::pair<std::size_t, std::size_t>> waiting;  // (bisection, candidate)
  };

  RunInput input;
  RunReport report;
  TimeMs now_ms = 0;
  std::vector<Pair> pairs;
  std::map<std::string, std::size_t> history_index;

  std::map<std::uint64_t, Job> jobs;
  std::deque<std::uint64_t> followup_queue;  // triage, gate rounds, probes: before new measures
  std::deque<std::uint64_t> measure_queue;
  std::size_t in_flight = 0;
  std::uint64_t next_tag = 1;
  std::deque<RunAction> actions;

  std::optional<stats::RunPerfGate> gate;
  std::vector<std::size_t> gate_pairs;
  std::size_t gate_waiting_first = 0;
  bool gate_started = false;

  std::vector<BisectionRun> bisections;
  // One bisection per probe model, kind and baseline: a model and the larger ones it is the proxy
  // of run the same probes over the same changes, on every revision with that baseline.
  std::map<std::tuple<std::string, TicketKind, std::string>, std::size_t> bisection_by_probe;
  std::map<std::size_t, BundleBuild> builds;
  std::map<std::string, std::string> ticket_by_dedupe_key;

  std::vector<NodeCandidate> nodes;
  std::set<std::string> quarantined;

  // -- helpers ------------------------------------------------------------------------------

  const QualificationModel& model_of(const Pair& pair) const { return input.models[pair.model]; }
  ModelReport& report_of(std::size_t pair) { return report.models[pair]; }
  void log(std::string text) { actions.push_back(run_action::Log{std::move(text)}); }

  std::uint64_t enqueue(JobRequest request, std::size_t pair, std::optional<std::size_t> bisection = std::nullopt,
                        std::size_t candidate = 0, int attempt = 1) {
    const std::uint64_t tag = next_tag++;
    request.tag = tag;
    const bool measure = request.purpose == JobPurpose::measure && attempt == 1;
    jobs[tag] = Job{std::move(request), pair, bisection, candidate, attempt, JobState::queued};
    (measure ? measure_queue : followup_queue).push_back(tag);
    return tag;
  }

  void cancel(std::uint64_t tag) {
    auto it = jobs.find(tag);
    if (it == jobs.end()) return;
    Job& job = it->second;
    if (job.state == JobState::queued) {
      std::erase(followup_queue, tag);
      std::erase(measure_queue, tag);
      job.state = JobState::cancelled;
    } else if (job.state == JobState::running) {
      job.state = JobState::cancelled;
      --in_flight;
      actions.push_back(run_action::CancelJob{tag});
    }
  }

  // Free healthy nodes of a revision, from set_nodes' view.
  std::size_t free_nodes(const std::string& revision) const {
    std::size_t count = 0;
    for (const auto& node : nodes) {
      if (node.revision == revision && node.healthy && node.free && quarantined.count(node.id) == 0) ++count;
    }
    return count;
  }

  std::vector<NodeCandidate> healthy_nodes() const {
    std::vector<NodeCandidate> out;
    for (const auto& node : nodes) {
      if (node.healthy && quarantined.count(node.id) == 0) out.push_back(node);
    }
    return out;
  }

  std::string file_ticket(Ticket ticket) {
    const std::string key = dedupe_key(ticket);
    if (auto it = ticket_by_dedupe_key.find(key); it != ticket_by_dedupe_key.end()) return it->second;
    ticket_by_dedupe_key[key] = ticket.id;
    report.tickets.push_back(ticket);
    const std::string id = ticket.id;
    actions.push_back(run_action::FileTicket{std::move(ticket)});
    return id;
  }

  static void add_unique(std::vector<std::string>& list, const std::string& value) {
    if (!value.empty() && std::find(list.begin(), list.end(), value) == list.end()) list.push_back(value);
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
      log(fmt::format("{} on revision {}: {}: {}", model_report.model, pair.revision, to_string(verdict),
                      model_report.detail));
    }
    check_finished();
  }

  void check_finished() {
    if (report.finished) return;
    for (const Pair& pair : pairs) {
      if (pair.stage != Stage::done) return;
    }
    // Every verdict is in: nothing left to measure.
    for (auto& [tag, job] : jobs) {
      if (job.state == JobState::queued || job.state == JobState::running) cancel(tag);
    }
    report.finished = true;
    report.finished_at_ms = now_ms;
    report.passed = std::none_of(report.models.begin(), report.models.end(),
                                 [](const ModelReport& m) { return fails_run(m.verdict); });
    log(fmt::format("qualification run {} finished: {}", report.run_id, report.passed ? "passed" : "failed"));
  }

  // -- performance gate ---------------------------------------------------------------------

  void leave_gate(std::size_t p) {
    Pair& pair = pairs[p];
    if (!pair.gate || pair.out_of_gate) return;
    pair.out_of_gate = true;
    if (!pair.first_samples_in) {
      --gate_waiting_first;
      maybe_start_gate();
    }
  }

  void maybe_start_gate() {
    if (gate_started || !gate || gate_waiting_first > 0) return;
    gate_started = true;
    run_gate();
  }

  void run_gate() {
    const std::vector<stats::GateRequest> requests = gate->evaluate();
    for (const stats::GateRequest& request : requests) {
      const std::size_t p = gate_pairs[request.model];
      const Pair& pair = pairs[p];
      const QualificationModel& model = model_of(pair);
      JobRequest job;
      job.purpose = request.kind == stats::GateRequest::Kind::extra_repeats ? JobPurpose::extra_repeats
                                                                              : JobPurpose::confirmation;
      job.model = model.name;
      job.revision = pair.revision;
      size_for(job, model, input.chips_per_node);
      job.bundle_id = input.candidate.id;
      job.baseline_bundle_id = pair.baseline_bundle_id;
      job.repeats_per_side = static_cast<std::uint32_t>(std::max(request.repeats_per_side, 1));
      const std::uint64_t tag = enqueue(std::move(job), p);
      jobs[tag].request.seed = job_seed(model.seed, tag);
    }
    for (std::size_t g = 0; g < gate_pairs.size(); ++g) {
      const std::size_t p = gate_pairs[g];
      Pair& pair = pairs[p];
      if (pair.out_of_gate || pair.stage != Stage::performance) continue;
      const stats::ModelGateOutcome& outcome = gate->outcomes()[g];
      if (outcome.finished) conclude_performance(p, outcome);
    }
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

  FailedRun failed_run(const Pair& pair) const {
    return FailedRun{model_of(pair).name, model_of(pair).owner_team, pair.failed_node, pair.revision,
                     input.candidate.id};
  }

  JobRequest correctness_job(const Pair& pair, JobPurpose purpose, std::string node_id) const {
    JobRequest job;
    job.purpose = purpose;
    job.model = model_of(pair).name;
    job.revision = pair.revision;
    size_for(job, model_of(pair), input.chips_per_node);
    job.bundle_id = input.candidate.id;
    job.node_id = std::move(node_id);
    return job;
  }

  void begin_triage(std::size_t p, const std::string& node, const std::string& detail) {
    leave_gate(p);
    Pair& pair = pairs[p];
    if (pair.stage == Stage::done || pair.stage == Stage::triage || pair.stage == Stage::bisection) return;
    pair.stage = Stage::triage;
    pair.failed_node = node;
    pair.correctness_detail = detail.empty() ? "outputs incorrect against the golden" : detail;
    if (nodes_for(model_of(pair), input.chips_per_node) > 1) {
      // A run over several nodes points at no one node: rerunning elsewhere cannot tell hardware
      // from software, so it is bisected (on its one-node proxy where it has one).
      start_bisection(p, TicketKind::correctness_regression,
                      fmt::format("{} on {} nodes; a multi-node model has no single node to suspect, bisected as a "
                                  "software regression",
                                  pair.correctness_detail, nodes_for(model_of(pair), input.chips_per_node)));
      return;
    }
    const std::vector<NodeCandidate> candidates = healthy_nodes();
    const auto other = choose_rerun_node(failed_run(pair), candidates);
    if (!other) {
      start_bisection(p, TicketKind::correctness_regression,
                      fmt::format("{} on node {}; unconfirmed: no other healthy node of revision {} to rerun on, "
                                  "bisected as a software regression",
                                  pair.correctness_detail, node.empty() ? "?" : node, pair.revision));
      return;
    }
    pair.rerun_node = *other;
    const QualificationModel& model = model_of(pair);
    const std::size_t reruns = std::max<std::size_t>(input.settings.triage.min_reruns, 1);
    for (std::size_t i = 0; i < reruns; ++i) {
      const std::uint64_t tag = enqueue(correctness_job(pair, JobPurpose::triage_rerun, *other), p);
      jobs[tag].request.seed = job_seed(model.seed, tag);
    }
    pair.triage_outstanding = reruns;
    if (!node.empty()) {
      const std::uint64_t tag = enqueue(correctness_job(pair, JobPurpose::origin_rerun, node), p);
      jobs[tag].request.seed = job_seed(model.seed, tag);
      ++pair.triage_outstanding;
    }
    log(fmt::format("{} failed on node {} (revision {}): rerunning on {} to tell hardware from software", model.name,
                    node, pair.revision, *other));
  }

  void decide_triage(std::size_t p) {
    Pair& pair = pairs[p];
    const RerunReport rerun{pair.rerun_node, pair.revision, input.candidate.id, true, pair.outcomes,
                            pair.origin_outcomes};
    auto action = triage(failed_run(pair), rerun, input.settings.triage);
    if (!action) {
      finalize(p, ModelVerdict::error, "triage failed: " + action.error().message);
      return;
    }
    report_of(p).triage = *action;
    switch (action->decision) {
      case TriageDecision::hardware_suspect: {
        const std::string node = *action->quarantine_node;
        if (quarantined.insert(node).second) {
          actions.push_back(run_action::QuarantineNode{node, action->reason});
        }
        const json evidence = {{"run_id", report.run_id},
                               {"model", model_of(pair).name},
                               {"revision", pair.revision},
                               {"bundle", input.candidate.id},
                               {"node", node},
                               {"failure", pair.correctness_detail},
                               {"triage", to_json(*action)}};
        const std::string id = file_ticket(make_ticket(
            TicketKind::hardware_suspect, action->ticket_team.value_or(input.settings.triage.lab_team),
            fmt::format("node {} (revision {}) suspect: {} fails there and passes on {}", node, pair.revision,
                        model_of(pair).name, pair.rerun_node),
            "node:" + node, std::nullopt, evidence.dump(), now_ms));
        add_unique(report_of(p).ticket_ids, id);
        finalize(p, ModelVerdict::hardware_suspect, action->reason + "; node quarantined, ticket " + id);
        return;
      }
      case TriageDecision::software_regression:
        start_bisection(p, TicketKind::correctness_regression, pair.correctness_detail + "; " + action->reason);
        return;
      case TriageDecision::flaky:
        finalize(p, ModelVerdict::flaky, action->reason + "; performance not judged this run");
        return;
    }
  }

  // -- bisection ----------------------------------------------------------------------------

  void start_bisection(std::size_t p, TicketKind kind, std::string detail) {
    Pair& pair = pairs[p];
    pair.regression_verdict = kind == TicketKind::performance_regression ? ModelVerdict::performance_regression
                                                                         : ModelVerdict::correctness_regression;
    pair.regression_detail = std::move(detail);
    if (!input.settings.bisect_regressions) {
      finalize(p, pair.regression_verdict, pair.regression_detail + "; not bisected (bisection is off)");
      return;
    }
    const QualificationModel& model = model_of(pair);
    const QualificationModel* probe = input.set.probe_model_for(model.name);
    const auto key = std::make_tuple(probe != nullptr ? probe->name : model.name, kind, pair.baseline_bundle_id);
    if (auto it = bisection_by_probe.find(key); it != bisection_by_probe.end()) {
      pair.stage = Stage::bisection;
      pair.bisection = it->second;
      BisectionRun& run = bisections[it->second];
      if (run.result) {
        conclude_from_bisection(p);
      } else {
        run.pairs.push_back(p);
      }
      return;
    }
    if (pair.baseline_bundle_id.empty()) {
      finalize(p, pair.regression_verdict,
               pair.regression_detail +
                   fmt::format("; not bisected: revision {} has no accepted baseline bundle to bisect from",
                               pair.revision));
      return;
    }
    const Bundle& baseline = input.baselines.at(pair.revision);
    auto candidates = changes_between(baseline, input.candidate);
    if (!candidates) {
      finalize(p, pair.regression_verdict, pair.regression_detail + "; not bisected: " + candidates.error().message);
      return;
    }
    std::vector<std::size_t> indexes;
    for (const auto& id : *candidates) indexes.push_back(history_index.at(id));
    auto bisection = Bisection::start(*candidates, input.settings.bisect);
    if (!bisection) {
      finalize(p, pair.regression_verdict, pair.regression_detail + "; not bisected: " + bisection.error().message);
      return;
    }
    pair.stage = Stage::bisection;
    pair.bisection = bisections.size();
    bisection_by_probe[key] = bisections.size();
    bisections.push_back(BisectionRun{p, kind, probe != nullptr ? *probe : model, pair.revision,
                                      pair.baseline_bundle_id, std::move(*bisection), std::move(indexes), {}, {p},
                                      std::nullopt, {}});
    log(fmt::format("bisecting the {} of {} on revision {} over {} changes with {}", to_string(kind), model.name,
                    pair.revision, candidates->size(), bisections.back().probe_model.name));
    pump(bisections.size() - 1);
  }

  void pump(std::size_t b) {
    for (;;) {
      BisectionRun& run = bisections[b];
      if (run.result) return;
      const std::size_t running = run.bisection.running().size();
      const std::size_t parallel = std::max<std::size_t>(
          1, std::min(input.settings.max_probes_per_bisection, free_nodes(run.revision) + running));
      BisectPlan plan = run.bisection.next_probes(parallel > running ? parallel - running : 0);
      for (std::size_t candidate : plan.cancel) {
        auto it = run.probes.find(candidate);
        if (it == run.probes.end()) continue;
        if (it->second.tag != 0) cancel(it->second.tag);
        run.probes.erase(it);
      }
      if (plan.finished) {
        finish_bisection(b);
        return;
      }
      bool resolved_now = false;
      for (const Probe& probe : plan.start) {
        if (start_probe(b, probe.change_index)) resolved_now = true;
      }
      if (!resolved_now) return;
    }
  }

  // Starts (or waits for the bundle of) a probe; true when it was answered at once (a bundle
  // that failed to build makes it inconclusive).
  bool start_probe(std::size_t b, std::size_t candidate) {
    BisectionRun& run = bisections[b];
    const std::size_t index = run.history_index[candidate];
    run.probes[candidate] = ProbeState{};
    auto it = builds.find(index);
    if (it == builds.end()) {
      builds[index].waiting.emplace_back(b, candidate);
      actions.push_back(run_action::BuildBundle{index});
      return false;
    }
    BundleBuild& build = it->second;
    switch (build.state) {
      case BuildState::building: build.waiting.emplace_back(b, candidate); return false;
      case BuildState::built:
        launch_probe_job(b, candidate, repeats_for(bisections[b].probe_model, input.settings));
        return false;
      case BuildState::failed:
        run.probes.erase(candidate);
        (void)run.bisection.on_probe_result(candidate, ProbeVerdict::inconclusive,
                                            "the bundle at this change did not build: " + build.error);
        return true;
    }
    return false;
  }

  void launch_probe_job(std::size_t b, std::size_t candidate, std::uint32_t repeats_per_side) {
    BisectionRun& run = bisections[b];
    const Bundle& bundle = builds.at(run.history_index[candidate]).bundle;
    const bool performance = run.kind == TicketKind::performance_regression;
    JobRequest job;
    job.purpose = JobPurpose::bisect_probe;
    job.model = run.probe_model.name;
    job.revision = run.revision;
    size_for(job, run.probe_model, input.chips_per_node);
    job.bundle_id = bundle.id;
    job.baseline_bundle_id = performance ? run.baseline_bundle_id : std::string();
    job.repeats_per_side = performance ? repeats_per_side : 0;
    const std::uint64_t tag = enqueue(std::move(job), run.owner_pair, b, candidate);
    jobs[tag].request.seed = job_seed(run.probe_model.seed, tag);
    run.probes[candidate].tag = tag;
  }

  void on_probe_answer(std::size_t b, std::size_t candidate, ProbeVerdict verdict, std::string detail) {
    BisectionRun& run = bisections[b];
    run.probes.erase(candidate);
    (void)run.bisection.on_probe_result(candidate, verdict, std::move(detail));
    pump(b);
  }

  void on_probe_result(const Job& job, const JobResult& result) {
    const std::size_t b = *job.bisection;
    BisectionRun& run = bisections[b];
    auto it = run.probes.find(job.candidate);
    if (run.result || it == run.probes.end() || it->second.tag != job.request.tag) return;  // obsolete
    if (!result.correct) {
      if (run.kind == TicketKind::correctness_regression) {
        on_probe_answer(b, job.candidate, probe_verdict_from_correctness(false), result.correctness_detail);
      } else {
        on_probe_answer(b, job.candidate, ProbeVerdict::inconclusive,
                        "outputs incorrect at this change, performance not judged: " + result.correctness_detail);
      }
      return;
    }
    if (run.kind == TicketKind::correctness_regression) {
      on_probe_answer(b, job.candidate, probe_verdict_from_correctness(true), "outputs correct");
      return;
    }
    // Performance: one targeted comparison at alpha, with the gate's extra rounds while unsure
    // (the confirmation stage's rule: stats::decide at alpha, stats::next_step).
    ProbeState& probe = it->second;
    probe.baseline.insert(probe.baseline.end(), result.baseline_samples.begin(), result.baseline_samples.end());
    probe.candidate.insert(probe.candidate.end(), result.candidate_samples.begin(), result.candidate_samples.end());
    const stats::PerfGateOptions& options = input.settings.perf;
    auto comparison = stats::compare(probe.baseline, probe.candidate, options,
                                     stats::derive_seed(input.settings.seed, job.request.tag));
    if (!comparison) {
      on_probe_answer(b, job.candidate, ProbeVerdict::inconclusive,
                      "the samples could not be compared: " + comparison.error().message);
      return;
    }
    const stats::Verdict verdict = stats::decide(*comparison, comparison->test.p_value, options.alpha, options);
    const stats::GateProgress progress{true, probe.extra_rounds};
    if (stats::next_step(verdict, progress, options) == stats::NextStep::add_repeats) {
      ++probe.extra_rounds;
      launch_probe_job(b, job.candidate, static_cast<std::uint32_t>(options.extra_repeats_per_round));
      return;
    }
    on_probe_answer(b, job.candidate, probe_verdict_from(verdict),
                    fmt::format("{}: {}", stats::to_string(verdict),
                                describe_comparison(*comparison, comparison->test.p_value)));
  }

  void finish_bisection(std::size_t b) {
    BisectionRun& run = bisections[b];
    run.result = run.bisection.result();
    for (auto& [candidate, probe] : run.probes) {
      if (probe.tag != 0) cancel(probe.tag);
    }
    run.probes.clear();
    const Pair& owner = pairs[run.owner_pair];
    const QualificationModel& model = model_of(owner);
    if (run.result->outcome == BisectOutcome::culprit_found) {
      const Change& culprit = input.history[run.history_index[run.result->culprit_index]];
      json evidence = {{"run_id", report.run_id},
                       {"model", model.name},
                       {"revision", owner.revision},
                       {"probe_model", run.probe_model.name},
                       {"candidate_bundle", input.candidate.id},
                       {"baseline_bundle", run.baseline_bundle_id},
                       {"detail", owner.regression_detail},
                       {"bisection", to_json(*run.result)}};
      const ModelReport& owner_report = report_of(run.owner_pair);
      if (owner_report.performance) evidence["performance"] = to_json(*owner_report.performance);
      if (owner_report.triage) evidence["triage"] = to_json(*owner_report.triage);
      std::string title;
      if (run.kind == TicketKind::performance_regression) {
        const auto& outcome = owner_report.performance;
        const double shift = outcome && outcome->initial ? outcome->initial->shift.relative : 0.0;
        title = fmt::format("{}: throughput {} on revision {} since change {} ({}, {})", model.name, percent(shift),
                            owner.revision, culprit.id, to_string(culprit.layer), culprit.owner_team);
      } else {
        title = fmt::format("{}: outputs incorrect on revision {} since change {} ({}, {})", model.name,
                            owner.revision, culprit.id, to_string(culprit.layer), culprit.owner_team);
      }
      run.ticket_ids.push_back(file_ticket(make_culprit_ticket(culprit, run.kind, title, evidence.dump(), now_ms)));
    }
    log(fmt::format("bisection of {} ({}): {}", model.name, to_string(run.kind), run.result->detail));
    const std::vector<std::size_t> waiting = run.pairs;
    for (std::size_t p : waiting) conclude_from_bisection(p);
  }

  void conclude_from_bisection(std::size_t p) {
    Pair& pair = pairs[p];
    const BisectionRun& run = bisections[*pair.bisection];
    const BisectResult& result = *run.result;
    ModelReport& model_report = report_of(p);
    model_report.bisection = result;
    for (const auto& id : run.ticket_ids) add_unique(model_report.ticket_ids, id);
    std::string detail = pair.regression_detail;
    if (run.owner_pair != p) {
      detail += fmt::format("; bisected once, with {} on revision {}", model_of(pairs[run.owner_pair]).name,
                            pairs[run.owner_pair].revision);
    }
    if (result.outcome == BisectOutcome::culprit_found) {
      const Change& culprit = input.history[run.history_index[result.culprit_index]];
      detail += fmt::format("; culprit {} ({}, {}): {}", culprit.id, to_string(culprit.layer), culprit.owner_team,
                            culprit.summary);
      if (!run.ticket_ids.empty()) detail += fmt::format("; ticket {}", fmt::join(run.ticket_ids, ", "));
    } else {
      detail += fmt::format("; bisection ambiguous, no ticket: suspects {}", fmt::join(result.suspects, ", "));
    }
    finalize(p, pair.regression_verdict, std::move(detail));
  }

  // -- job results --------------------------------------------------------------------------

  // A job that could not run after its last attempt.
  void give_up(const Job& job, const JobResult& result) {
    const std::string why = fmt::format("{} job did not run after {} attempts{}", to_string(job.request.purpose),
                                        job.attempt, result.detail.empty() ? "" : ": " + result.detail);
    if (job.request.purpose == JobPurpose::bisect_probe) {
      const BisectionRun& run = bisections[*job.bisection];
      auto it = run.probes.find(job.candidate);
      if (run.result || it == run.probes.end() || it->second.tag != job.request.tag) return;
      on_probe_answer(*job.bisection, job.candidate, ProbeVerdict::inconclusive, why);
      return;
    }
    Pair& pair = pairs[job.pair];
    if (job.request.purpose == JobPurpose::origin_rerun && pair.stage == Stage::triage) {
      // The rerun on the failing node is optional evidence (a dead node cannot run it).
      log(fmt::format("{}; triaging {} without it", why, job.request.model));
      if (--pair.triage_outstanding == 0) decide_triage(job.pair);
      return;
    }
    leave_gate(job.pair);
    finalize(job.pair, ModelVerdict::error, why);
  }

  void on_pair_result(const Job& job, const JobResult& result) {
    const std::size_t p = job.pair;
    Pair& pair = pairs[p];
    if (pair.stage == Stage::done) return;
    switch (job.request.purpose) {
      case JobPurpose::measure:
      case JobPurpose::extra_repeats:
      case JobPurpose::confirmation:
        if (!result.correct) {
          begin_triage(p, result.node_id, result.correctness_detail);
          return;
        }
        if (!pair.gate) {
          finalize(p, ModelVerdict::passed,
                   fmt::format("outputs correct; no baseline on revision {}: performance not judged", pair.revision));
          return;
        }
        if (pair.out_of_gate) return;
        gate->add_samples(*pair.gate, result.baseline_samples, result.candidate_samples);
        if (job.request.purpose == JobPurpose::measure) {
          pair.stage = Stage::performance;
          pair.first_samples_in = true;
          --gate_waiting_first;
          maybe_start_gate();
        } else {
          run_gate();
        }
        return;
      case JobPurpose::triage_rerun:
      case JobPurpose::origin_rerun: {
        if (pair.stage != Stage::triage) return;
        auto& outcomes = job.request.purpose == JobPurpose::triage_rerun ? pair.outcomes : pair.origin_outcomes;
        outcomes.push_back(result.correct ? RunOutcome::passed : RunOutcome::failed);
        if (--pair.triage_outstanding == 0) decide_triage(p);
        return;
      }
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
  for (const auto& id : input.candidate.change_ids) {
    if (history_ids.count(id) == 0) {
      return fail(Errc::invalid_argument, fmt::format("the candidate's change {} is not in the history; pass every "
                                                      "merged change the candidate contains",
                                                      id));
    }
  }
  for (const auto& [revision, baseline] : input.baselines) {
    const auto& good = baseline.change_ids;
    const auto& bad = input.candidate.change_ids;
    if (good.size() > bad.size() || !std::equal(good.begin(), good.end(), bad.begin())) {
      return fail(Errc::invalid_argument,
                  fmt::format("the baseline {} of revision {} is not an ancestor of the candidate (its changes are not "
                              "a prefix of the candidate's); pick the last accepted bundle of the same history",
                              baseline.id, revision));
    }
  }
  return {};
}

}  // namespace

Result<QualificationRun> QualificationRun::start(RunInput input, TimeMs now) {
  if (auto ok = validate_input(input); !ok) return tl::unexpected(ok.error());
  auto state = std::make_unique<State>();
  State& s = *state;
  s.input = std::move(input);
  s.now_ms = now;
  const RunSettings& settings = s.input.settings;
  for (std::size_t i = 0; i < s.input.history.size(); ++i) s.history_index[s.input.history[i].id] = i;

  s.report.run_id = settings.run_id;
  s.report.tier = settings.tier;
  s.report.candidate_bundle_id = s.input.candidate.id;
  s.report.started_at_ms = now;
  for (const auto& revision : settings.revisions) {
    if (auto it = s.input.baselines.find(revision); it != s.input.baselines.end()) {
      s.report.baseline_bundle_ids[revision] = it->second.id;
    }
  }

  for (std::size_t m = 0; m < s.input.models.size(); ++m) {
    const QualificationModel& model = s.input.models[m];
    for (const auto& revision : settings.revisions) {
      State::Pair pair;
      pair.model = m;
      pair.revision = revision;
      if (auto it = s.report.baseline_bundle_ids.find(revision); it != s.report.baseline_bundle_ids.end()) {
        pair.baseline_bundle_id = it->second;
      }
      ModelReport model_report;
      model_report.model = model.name;
      model_report.revision = revision;
      model_report.owner_team = model.owner_team;
      const std::size_t p = s.pairs.size();
      if (!pair.baseline_bundle_id.empty()) {
        pair.gate = s.gate_pairs.size();
        s.gate_pairs.push_back(p);
      }
      s.pairs.push_back(std::move(pair));
      s.report.models.push_back(std::move(model_report));
    }
  }
  s.gate_waiting_first = s.gate_pairs.size();
  if (!s.gate_pairs.empty()) s.gate.emplace(s.gate_pairs.size(), settings.perf, settings.seed);

  for (std::size_t p = 0; p < s.pairs.size(); ++p) {
    State::Pair& pair = s.pairs[p];
    const QualificationModel& model = s.model_of(pair);
    JobRequest job;
    job.purpose = JobPurpose::measure;
    job.model = model.name;
    job.revision = pair.revision;
    size_for(job, model, s.input.chips_per_node);
    job.bundle_id = s.input.candidate.id;
    job.baseline_bundle_id = pair.baseline_bundle_id;
    job.repeats_per_side = pair.baseline_bundle_id.empty() ? 0 : repeats_for(model, settings);
    job.seed = model.seed;
    pair.measure_tag = s.enqueue(std::move(job), p);
  }
  return QualificationRun(std::move(state));
}

void QualificationRun::set_nodes(std::vector<NodeCandidate> nodes, TimeMs now) {
  State& s = *state_;
  s.now_ms = now;
  s.nodes = std::move(nodes);
  // A revision with no healthy node gets nothing measured: its pairs that have not started are
  // skipped. An empty list says nothing (the shell may not have heard from any agent yet).
  if (!s.nodes.empty()) {
    for (std::size_t p = 0; p < s.pairs.size(); ++p) {
      State::Pair& pair = s.pairs[p];
      if (pair.stage != State::Stage::waiting) continue;
      const auto healthy = std::count_if(s.nodes.begin(), s.nodes.end(), [&](const NodeCandidate& node) {
        return node.revision == pair.revision && node.healthy && s.quarantined.count(node.id) == 0;
      });
      const QualificationModel& model = s.model_of(pair);
      const int needed = nodes_for(model, s.input.chips_per_node);
      if (healthy >= needed) continue;
      s.cancel(pair.measure_tag);
      s.leave_gate(p);
      s.finalize(p, ModelVerdict::skipped,
                 needed == 1 ? fmt::format("no healthy node of revision {} in the fleet", pair.revision)
                             : fmt::format("needs {} chips: {} whole nodes of revision {}, and the fleet has {} healthy",
                                           model.chips, needed, pair.revision, healthy));
    }
  }
  // More free nodes: more parallel probes.
  for (std::size_t b = 0; b < s.bisections.size(); ++b) s.pump(b);
}

Status QualificationRun::on_job_result(JobResult result, TimeMs now) {
  State& s = *state_;
  auto it = s.jobs.find(result.tag);
  if (it == s.jobs.end()) {
    return fail(Errc::conflict, fmt::format("no job with tag {} in run {}; answer only the jobs it started",
                                            result.tag, s.report.run_id));
  }
  if (it->second.state == State::JobState::cancelled) return {};  // a late answer to a cancelled job
  if (it->second.state != State::JobState::running) {
    return fail(Errc::conflict, fmt::format("job {} of run {} was {}; answer each started job once", result.tag,
                                            s.report.run_id,
                                            it->second.state == State::JobState::queued ? "never started"
                                                                                        : "already answered"));
  }
  s.now_ms = now;
  State::Job& job = it->second;
  job.state = State::JobState::answered;
  --s.in_flight;
  if (job.request.purpose != JobPurpose::bisect_probe) State::add_unique(s.report_of(job.pair).nodes, result.node_id);

  if (!result.ran) {
    if (job.attempt < s.input.settings.max_job_attempts) {
      const State::Job copy = job;
      const std::uint64_t tag =
          s.enqueue(copy.request, copy.pair, copy.bisection, copy.candidate, copy.attempt + 1);
      if (copy.bisection) {
        auto& probes = s.bisections[*copy.bisection].probes;
        if (auto probe = probes.find(copy.candidate); probe != probes.end() && probe->second.tag == copy.request.tag) {
          probe->second.tag = tag;
        }
      }
      if (copy.request.purpose == JobPurpose::measure) s.pairs[copy.pair].measure_tag = tag;
      s.log(fmt::format("{} job {} of {} did not run ({}); starting it again as job {}",
                        to_string(copy.request.purpose), copy.request.tag, copy.request.model,
                        result.detail.empty() ? "no detail" : result.detail, tag));
      return {};
    }
    const State::Job copy = job;
    s.give_up(copy, result);
    return {};
  }
  const State::Job copy = job;
  if (copy.request.purpose == JobPurpose::bisect_probe) {
    s.on_probe_result(copy, result);
  } else {
    s.on_pair_result(copy, result);
  }
  return {};
}

void QualificationRun::on_bundle_built(std::size_t history_index, Result<Bundle> bundle, TimeMs now) {
  State& s = *state_;
  s.now_ms = now;
  auto it = s.builds.find(history_index);
  if (it == s.builds.end() || it->second.state != State::BuildState::building) return;
  State::BundleBuild& build = it->second;
  if (!bundle) {
    build.state = State::BuildState::failed;
    build.error = bundle.error().message;
  } else if (history_index >= s.input.history.size() || bundle->change_ids.empty() ||
             bundle->change_ids.back() != s.input.history[history_index].id) {
    build.state = State::BuildState::failed;
    const std::string expected = history_index < s.input.history.size() ? s.input.history[history_index].id : "?";
    build.error = fmt::format("the built bundle {} does not end with change {}; the builder built the wrong change",
                              bundle->id, expected);
  } else {
    build.state = State::BuildState::built;
    build.bundle = std::move(*bundle);
  }
  const auto waiting = std::move(build.waiting);
  build.waiting.clear();
  const bool built = build.state == State::BuildState::built;
  const std::string error = build.error;
  for (const auto& [b, candidate] : waiting) {
    State::BisectionRun& run = s.bisections[b];
    auto probe = run.probes.find(candidate);
    if (run.result || probe == run.probes.end() || probe->second.tag != 0) continue;  // cancelled meanwhile
    if (built) {
      s.launch_probe_job(b, candidate, repeats_for(run.probe_model, s.input.settings));
    } else {
      s.on_probe_answer(b, candidate, ProbeVerdict::inconclusive, "the bundle at this change did not build: " + error);
    }
  }
}

std::optional<RunAction> QualificationRun::poll_action() {
  State& s = *state_;
  if (!s.actions.empty()) {
    RunAction action = std::move(s.actions.front());
    s.actions.pop_front();
    return action;
  }
  if (s.in_flight >= s.input.settings.max_jobs_in_flight) return std::nullopt;
  for (auto* queue : {&s.followup_queue, &s.measure_queue}) {
    if (queue->empty()) continue;
    const std::uint64_t tag = queue->front();
    queue->pop_front();
    State::Job& job = s.jobs.at(tag);
    job.state = State::JobState::running;
    ++s.in_flight;
    ++s.report.jobs_started;
    if (job.request.purpose != JobPurpose::bisect_probe) {
      State::Pair& pair = s.pairs[job.pair];
      if (!pair.started) {
        pair.started = true;
        pair.first_start_ms = s.now_ms;
      }
      if (pair.stage == State::Stage::waiting) pair.stage = State::Stage::measuring;
    }
    return run_action::StartJob{job.request};
  }
  return std::nullopt;
}

bool QualificationRun::finished() const { return state_->report.finished && state_->actions.empty(); }

const RunReport& QualificationRun::report() const { return state_->report; }

// ---------------------------------------------------------------------------------------------
// Reports.

nlohmann::json to_json(const RunReport& report) {
  json models = json::array();
  for (const ModelReport& m : report.models) {
    json entry = {{"model", m.model},
                  {"revision", m.revision},
                  {"owner_team", m.owner_team},
                  {"verdict", to_string(m.verdict)},
                  {"fails_run", fails_run(m.verdict)},
                  {"detail", m.detail},
                  {"ticket_ids", m.ticket_ids},
                  {"nodes", m.nodes},
                  {"duration_ms", m.duration_ms}};
    entry["performance"] = m.performance ? to_json(*m.performance) : json(nullptr);
    entry["triage"] = m.triage ? to_json(*m.triage) : json(nullptr);
    entry["bisection"] = m.bisection ? to_json(*m.bisection) : json(nullptr);
    models.push_back(std::move(entry));
  }
  json tickets = json::array();
  for (const Ticket& t : report.tickets) tickets.push_back(json::parse(to_json_text(t)));
  std::map<std::string, std::size_t> counts;
  for (const ModelReport& m : report.models) ++counts[std::string(to_string(m.verdict))];
  return {{"schema", "kiln.qualification-run/1"},
          {"run_id", report.run_id},
          {"tier", to_string(report.tier)},
          {"candidate_bundle_id", report.candidate_bundle_id},
          {"baseline_bundle_ids", report.baseline_bundle_ids},
          {"finished", report.finished},
          {"passed", report.passed},
          {"started_at_ms", report.started_at_ms},
          {"finished_at_ms", report.finished_at_ms},
          {"jobs_started", report.jobs_started},
          {"verdict_counts", counts},
          {"models", std::move(models)},
          {"tickets", std::move(tickets)}};
}

std::string summary_text(const RunReport& report) {
  std::string out = fmt::format("kiln {} {}: {} (candidate {})\n", to_string(report.tier), report.run_id,
                                !report.finished ? "running"
                                : report.passed  ? "passed"
                                                 : "FAILED",
                                report.candidate_bundle_id.substr(0, 12));
  std::map<ModelVerdict, std::size_t> counts;
  for (const ModelReport& m : report.models) ++counts[m.verdict];
  std::vector<std::string> parts;
  for (const auto& [verdict, count] : counts) parts.push_back(fmt::format("{} {}", count, to_string(verdict)));
  out += fmt::format("  {} model runs: {}\n", report.models.size(), fmt::join(parts, ", "));
  for (const ModelReport& m : report.models) {
    if (!fails_run(m.verdict) && m.verdict != ModelVerdict::inconclusive && m.verdict != ModelVerdict::flaky) continue;
    out += fmt::format("  {} {} on revision {} ({}): {}: {}\n", fails_run(m.verdict) ? "FAIL" : "LOOK", m.model,
                       m.revision, m.owner_team, to_string(m.verdict), m.detail);
  }
  for (const Ticket& t : report.tickets) {
    out += fmt::format("  ticket {} to {}: {} ({})\n", t.id, t.team, t.title, to_string(t.kind));
  }
  return out;
}

namespace {

// XML 1.0 text and attribute values: the five entities, and characters XML forbids dropped.
std::string xml_escape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      case '\n': out += "&#10;"; break;
      case '\t': out += "&#9;"; break;
      case '\r': out += "&#13;"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) continue;
        out += c;
    }
  }
  return out;
}

std::string seconds(DurationMs ms) { return fmt::format("{:.3f}", static_cast<double>(ms) / 1000.0); }

}  // namespace

std::string to_junit_xml(const RunReport& report) {
  std::vector<std::string> revisions;
  for (const ModelReport& m : report.models) {
    if (std::find(revisions.begin(), revisions.end(), m.revision) == revisions.end()) revisions.push_back(m.revision);
  }
  const std::string classname = fmt::format("kiln.{}", to_string(report.tier));
  std::size_t all_failures = 0;
  std::size_t all_skipped = 0;
  std::string suites;
  for (const auto& revision : revisions) {
    std::size_t tests = 0;
    std::size_t failures = 0;
    std::size_t skipped = 0;
    DurationMs total_ms = 0;
    std::string cases;
    for (const ModelReport& m : report.models) {
      if (m.revision != revision) continue;
      ++tests;
      total_ms += m.duration_ms;
      cases += fmt::format("    <testcase name=\"{}\" classname=\"{}\" time=\"{}\">\n", xml_escape(m.model),
                           xml_escape(classname), seconds(m.duration_ms));
      if (m.verdict == ModelVerdict::skipped) {
        ++skipped;
        cases += fmt::format("      <skipped message=\"{}\"/>\n", xml_escape(m.detail));
      } else if (fails_run(m.verdict)) {
        ++failures;
        const std::string message = fmt::format("{}: {}", to_string(m.verdict), m.detail);
        cases += fmt::format("      <failure message=\"{}\" type=\"{}\">{}</failure>\n", xml_escape(message),
                             to_string(m.verdict), xml_escape(message));
      }
      std::string out = fmt::format("verdict: {}\nowner: {}\n", to_string(m.verdict), m.owner_team);
      if (!m.ticket_ids.empty()) out += fmt::format("tickets: {}\n", fmt::join(m.ticket_ids, ", "));
      if (!m.nodes.empty()) out += fmt::format("nodes: {}\n", fmt::join(m.nodes, ", "));
      cases += fmt::format("      <system-out>{}</system-out>\n", xml_escape(out));
      cases += "    </testcase>\n";
    }
    all_failures += failures;
    all_skipped += skipped;
    suites += fmt::format("  <testsuite name=\"{}\" tests=\"{}\" failures=\"{}\" errors=\"0\" skipped=\"{}\" "
                          "time=\"{}\">\n{}  </testsuite>\n",
                          xml_escape(fmt::format("{} revision {}", classname, revision)), tests, failures, skipped,
                          seconds(total_ms), cases);
  }
  return fmt::format("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites name=\"{}\" tests=\"{}\" "
                     "failures=\"{}\" errors=\"0\" skipped=\"{}\" time=\"{}\">\n{}</testsuites>\n",
                     xml_escape(fmt::format("{} {}", classname, report.run_id)), report.models.size(), all_failures,
                     all_skipped, seconds(report.finished ? report.finished_at_ms - report.started_at_ms : 0), suites);
}

}  // namespace kiln::qualification

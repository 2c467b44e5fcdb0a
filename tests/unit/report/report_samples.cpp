#include "tests/unit/report/report_samples.h"

#include <doctest/doctest.h>

#include "qualification/bisect.h"
#include "qualification/correctness.h"
#include "qualification/run_report.h"
#include "qualification/ticket.h"

namespace kiln::testing {

namespace q = kiln::qualification;

namespace {

std::vector<double> around(double center, std::size_t count, double step) {
  std::vector<double> values;
  for (std::size_t i = 0; i < count; ++i) values.push_back(center + step * (static_cast<double>(i % 5) - 2.0));
  return values;
}

q::Bundle bundle(const std::string& compiler, std::vector<std::string> changes) {
  q::Bundle b;
  b.versions = {"fw-1", compiler, "kern-1", "rt-1", "drv-1", "fmw-1"};
  b.model_configs_version = "cfg-1";
  b.hardware_revisions = {"a"};
  b.change_count = changes.size();
  if (!changes.empty()) b.last_change = changes.back();
  return q::seal(std::move(b));
}

stats::Comparison comparison(const std::vector<double>& baseline, const std::vector<double>& candidate) {
  auto compared = stats::compare(baseline, candidate, stats::PerfGateOptions{}, 7);
  REQUIRE(compared.has_value());
  return *compared;
}

// Two probes a round over k2..k6 (merge order), k3 the culprit.
q::BisectResult bisection(const std::vector<std::string>& candidates, std::size_t culprit) {
  auto search = q::Bisection::start(candidates);
  REQUIRE(search.has_value());
  for (int guard = 0; guard < 20; ++guard) {
    const q::BisectPlan plan = search->next_probes(2);
    if (plan.finished) break;
    for (const auto& probe : plan.start) {
      const auto verdict = probe.change_index < culprit ? q::ProbeVerdict::good : q::ProbeVerdict::bad;
      REQUIRE(search->on_probe_result(probe.change_index, verdict, "throughput -3.0%").has_value());
    }
  }
  REQUIRE(search->finished());
  return *search->result();
}

q::TrainingEvidence training_evidence() {
  q::TrainingReference reference;
  q::TrainingRun run;
  for (int i = 0; i < 20; ++i) {
    const double loss = 2.5 - 0.08 * i;
    reference.loss_curve.push_back({5 * (i + 1), loss});
    // One point 7% off: outside the 5% band, where 1% of 20 points allows none: the curve fails.
    run.loss_curve.push_back({5 * (i + 1), i == 12 ? loss * 1.07 : loss * 1.004});
  }
  reference.eval_score = 0.91;
  run.eval_score = 0.905;
  const q::LossCurveGateOptions options;
  auto verdict = q::check_training(reference, run, 0.99, options);
  REQUIRE(verdict.has_value());
  return {reference.loss_curve, run.loss_curve, options, *verdict};
}

}  // namespace

q::RunReport sample_report(const SampleRun& run) {
  const std::vector<std::string> history = {"k1", "k2", run.culprit, "k4", "k5", "k6"};
  q::RunReport report;
  report.run_id = run.run_id;
  report.tier = q::Tier::nightly;
  report.candidate_bundle = bundle("cc-" + run.culprit, history);
  report.candidate_bundle_id = report.candidate_bundle->id;
  report.baseline_bundles["a"] = bundle("cc-0", {"k1"});
  report.baseline_bundle_ids["a"] = report.baseline_bundles["a"].id;
  report.started_at_ms = run.started_at_ms;
  report.finished_at_ms = run.started_at_ms + 272'000;
  report.finished = true;
  report.passed = false;
  report.jobs_started = 31;

  q::ModelReport slow;
  slow.model = run.model;
  slow.revision = "a";
  slow.owner_team = run.owner_team;
  slow.verdict = q::ModelVerdict::performance_regression;
  slow.detail = "throughput -3.00%; culprit " + run.culprit;
  stats::ModelGateOutcome gate;
  gate.finished = true;
  gate.verdict = stats::Verdict::regression;
  gate.regression_confirmed = true;
  gate.initial_samples = {around(1000, 20, 2), around(970, 20, 2)};
  gate.initial = comparison(gate.initial_samples.baseline, gate.initial_samples.candidate);
  gate.initial_adjusted_p_value = 1e-5;
  gate.initial_extra_rounds = 1;
  gate.confirmation_samples = {around(1001, 10, 2), around(969, 10, 2)};
  gate.confirmation = comparison(gate.confirmation_samples.baseline, gate.confirmation_samples.candidate);
  slow.performance = gate;
  slow.bisection = bisection({"k2", run.culprit, "k4", "k5", "k6"}, 1);
  slow.nodes = {"n01", "n02"};
  slow.node_backends = {{"n01", "sim"}};  // n02's result was read before its driver was known
  slow.duration_ms = 200'000;

  const q::Ticket ticket = q::make_ticket(q::TicketKind::performance_regression, "compiler-team", run.ticket_title,
                                          run.culprit, q::Layer::compiler, R"({"note": "<i>evidence</i>"})",
                                          run.started_at_ms + 100'000);
  slow.ticket_ids = {ticket.id};
  report.tickets.push_back(ticket);
  report.models.push_back(slow);

  if (run.training) {
    q::ModelReport trained;
    trained.model = "train-tiny-it";
    trained.revision = "a";
    trained.owner_team = "training-models";
    trained.verdict = q::ModelVerdict::correctness_regression;
    trained.detail = "loss curve outside its band";
    trained.training = training_evidence();
    report.models.push_back(trained);
  }
  return report;
}

nlohmann::json sample_json(const SampleRun& run) { return q::to_json(sample_report(run)); }

nlohmann::json as_old_report(nlohmann::json report) {
  report.erase("candidate_bundle");
  report.erase("baseline_bundles");
  for (auto& model : report.at("models")) {
    model.erase("training");
    if (model.at("performance").is_object()) {
      model.at("performance").erase("initial_samples");
      model.at("performance").erase("confirmation_samples");
    }
    if (model.at("bisection").is_object()) {
      model.at("bisection").erase("candidates");
      for (auto& probe : model.at("bisection").at("probes")) probe.erase("round");
    }
  }
  return report;
}

std::string svg_with_id(const std::string& page, const std::string& id) {
  const auto at = page.find("id=\"" + id + "\"");
  if (at == std::string::npos) return "";
  const auto start = page.rfind("<svg", at);
  const auto end = page.find("</svg>", at);
  if (start == std::string::npos || end == std::string::npos) return "";
  return page.substr(start, end + 6 - start);
}

std::size_t occurrences(std::string_view text, std::string_view needle) {
  std::size_t count = 0;
  for (auto pos = text.find(needle); pos != std::string_view::npos; pos = text.find(needle, pos + 1)) ++count;
  return count;
}

}  // namespace kiln::testing

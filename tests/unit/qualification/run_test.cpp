// A qualification run against a fake fleet: nodes per revision, a history of changes where one
// slows a model by 3% and another breaks a kernel, and an executor that answers each job from a
// seeded noise model and the changes in the job's bundle.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <deque>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/stats/rng.h"
#include "qualification/noise_history.h"
#include "qualification/run.h"
#include "sim/perf/perf_model.h"
#include "sim/workloads/golden.h"
#include "sim/workloads/models.h"

namespace q = kiln::qualification;
using json = nlohmann::json;

namespace {

constexpr std::size_t kPerfCulprit = 7;
constexpr std::size_t kKernelCulprit = 13;
constexpr std::size_t kBaselineIndex = 3;
constexpr std::size_t kCandidateIndex = 19;

std::string team_of(q::Layer layer) { return fmt::format("{}-team", q::to_string(layer)); }

// 20 changes over several layers; #7 slows mlp-bf16 by 3%, #13 breaks the attention kernel.
std::vector<q::Change> make_history() {
  const q::Layer layers[] = {q::Layer::kernels, q::Layer::compiler, q::Layer::runtime, q::Layer::framework,
                             q::Layer::driver,  q::Layer::firmware, q::Layer::model};
  std::vector<q::Change> history;
  for (std::size_t i = 0; i < 20; ++i) {
    q::Change change;
    change.id = fmt::format("c{:02}", i);
    change.layer = i == kPerfCulprit ? q::Layer::compiler : i == kKernelCulprit ? q::Layer::kernels : layers[i % 7];
    change.owner_team = team_of(change.layer);
    change.components = {"gemm-bf16"};
    change.merged_at_ms = static_cast<kiln::TimeMs>(i) * kiln::kMinuteMs;
    change.summary = fmt::format("change {}", i);
    if (i == kPerfCulprit) change.sim_effect = q::SimChangeEffect{{{"mlp-bf16", 0.97}}, {}, {}};
    if (i == kKernelCulprit) change.sim_effect = q::SimChangeEffect{{}, {"attention"}, {}};
    history.push_back(change);
  }
  return history;
}

q::QualificationModel model(std::string name, std::string workload, std::vector<std::string> components, int chips,
                            std::string owner, std::uint64_t seed) {
  q::QualificationModel m;
  m.name = std::move(name);
  m.workload = std::move(workload);
  m.components = std::move(components);
  m.chips = chips;
  m.size_class = chips == 1 ? q::SizeClass::small : q::SizeClass::medium;
  m.owner_team = std::move(owner);
  m.seed = seed;
  return m;
}

std::vector<q::QualificationModel> default_models() {
  auto medium = model("mlp-medium", "mlp-bf16", {"gemm-bf16", "gelu"}, 8, "recsys-models", 21);
  medium.proxy = "mlp-small";
  return {
      model("mlp-small", "mlp-bf16", {"gemm-bf16", "gelu"}, 1, "recsys-models", 11),
      medium,
      model("tfm-small", "transformer-block-bf16", {"attention", "gemm-bf16", "softmax"}, 1, "llm-models", 31),
      model("fp8-small", "mlp-fp8", {"gemm-fp8", "gelu"}, 1, "recsys-models", 41),
      model("llm-large", "transformer-block-bf16", {"attention"}, 32, "llm-models", 51),
  };
}

struct Scenario {
  std::vector<q::QualificationModel> models = default_models();
  std::size_t baseline_index = kBaselineIndex;
  std::size_t candidate_index = kCandidateIndex;
  std::size_t nodes_per_revision = 4;
  std::set<std::string> bad_nodes;            // every job there computes wrong outputs
  std::string flaky_model;                    // fails its 1st and 3rd run
  std::map<std::string, int> lost_runs;       // model -> its first N jobs are lost
  std::set<std::size_t> failing_builds;        // history indexes the builder cannot build
  std::size_t nodes_of_revision_b = 4;
  bool lose_origin_reruns = false;            // the failing node cannot run anything more
  // Faulty too: the coordinator quarantines each while a triage rerun runs there, and the rerun
  // computes wrong outputs.
  std::set<std::string> quarantined_during_reruns;
  std::size_t max_jobs_in_flight = 32;
  std::size_t min_reruns = 1;
  bool tell_nodes = true;
  kiln::stats::GateRule perf_rule = kiln::stats::GateRule::fixed;
  q::BaselineHistory baseline_history;
};

struct Outcome {
  q::RunReport report;
  std::vector<q::Ticket> tickets;  // as filed through the sink
  std::vector<std::string> quarantined;
  std::size_t max_in_flight_seen = 0;
  std::size_t max_probes_in_flight_seen = 0;
  std::size_t cancellations = 0;
  std::size_t builds = 0;
  std::set<std::size_t> built_indexes;
  // The bisections under way, as progress reports showed them: the most at once, and the most
  // rounds each model's reached.
  std::size_t most_bisections_running = 0;
  std::map<std::string, std::size_t> most_rounds;
  std::vector<q::JobRequest> started;
  std::string junit;
  std::string json_text;
};

class FakeFleet {
 public:
  explicit FakeFleet(const Scenario& scenario) : scenario_(scenario), history_(make_history()) {
    for (std::size_t n = 0; n < scenario.nodes_per_revision; ++n) nodes_.push_back(fmt::format("a{}", n));
    for (std::size_t n = 0; n < scenario.nodes_of_revision_b; ++n) nodes_.push_back(fmt::format("b{}", n));
  }

  const std::vector<q::Change>& history() const { return history_; }

  q::Bundle bundle_at(std::size_t index) {
    auto bundle = q::build_bundle_at(history_, index);
    REQUIRE(bundle.has_value());
    bundle_index_[bundle->id] = index;
    return *bundle;
  }

  Outcome run(q::RunInput input) {
    Outcome outcome;
    kiln::TimeMs now = 1'000'000;
    auto started = q::QualificationRun::start(std::move(input), now);
    REQUIRE(started.has_value());
    q::QualificationRun run = std::move(*started);
    q::MemoryTicketSink sink;
    if (scenario_.tell_nodes) run.set_nodes(node_view(), now);
    int steps = 0;
    while (!run.finished()) {
      REQUIRE(++steps < 100000);
      auto action = run.poll_action();
      if (!action) {
        REQUIRE_MESSAGE(!running_.empty(), "the run waits, but no job is running");
        const q::JobRequest request = running_.front();
        running_.pop_front();
        busy_.erase(node_of_.at(request.tag));
        now += 5 * kiln::kMinuteMs;
        REQUIRE(run.on_job_result(execute(request), now).has_value());
        if (scenario_.tell_nodes) run.set_nodes(node_view(), now);
        const auto& bisecting = run.report().bisections_running;
        outcome.most_bisections_running = std::max(outcome.most_bisections_running, bisecting.size());
        for (const auto& b : bisecting) outcome.most_rounds[b.model] = std::max(outcome.most_rounds[b.model], b.rounds);
        continue;
      }
      if (auto* start = std::get_if<q::run_action::StartJob>(&*action)) {
        outcome.started.push_back(start->request);
        node_of_[start->request.tag] = assign_node(start->request);
        busy_.insert(node_of_[start->request.tag]);
        running_.push_back(start->request);
        outcome.max_in_flight_seen = std::max(outcome.max_in_flight_seen, running_.size());
        const auto probes = static_cast<std::size_t>(std::count_if(running_.begin(), running_.end(), [&](const q::JobRequest& r) {
          return r.purpose == q::JobPurpose::bisect_probe && r.model == start->request.model;
        }));
        outcome.max_probes_in_flight_seen = std::max(outcome.max_probes_in_flight_seen, probes);
      } else if (auto* cancel = std::get_if<q::run_action::CancelJob>(&*action)) {
        auto it = std::find_if(running_.begin(), running_.end(),
                               [&](const q::JobRequest& r) { return r.tag == cancel->tag; });
        REQUIRE(it != running_.end());
        ++outcome.cancellations;
        busy_.erase(node_of_.at(it->tag));
        running_.erase(it);
      } else if (auto* build = std::get_if<q::run_action::BuildBundle>(&*action)) {
        ++outcome.builds;
        CHECK(outcome.built_indexes.insert(build->history_index).second);  // once per index
        if (scenario_.failing_builds.count(build->history_index)) {
          run.on_bundle_built(build->history_index, kiln::fail(kiln::Errc::internal, "the compiler crashed"), now);
        } else {
          run.on_bundle_built(build->history_index, bundle_at(build->history_index), now);
        }
      } else if (auto* ticket = std::get_if<q::run_action::FileTicket>(&*action)) {
        auto filed = sink.file(ticket->ticket);
        REQUIRE(filed.has_value());
        CHECK(*filed == q::FileResult::filed);
      } else if (auto* quarantine = std::get_if<q::run_action::QuarantineNode>(&*action)) {
        outcome.quarantined.push_back(quarantine->node_id);
        quarantined_.insert(quarantine->node_id);
      }
    }
    CHECK(running_.empty());
    outcome.report = run.report();
    outcome.tickets = sink.tickets();
    outcome.junit = q::to_junit_xml(run.report());
    outcome.json_text = q::to_json(run.report()).dump();
    return outcome;
  }

 private:
  std::vector<q::NodeCandidate> node_view() const {
    std::vector<q::NodeCandidate> view;
    for (const auto& id : nodes_) {
      if (quarantined_.count(id)) continue;
      view.push_back({id, id.substr(0, 1), true, busy_.count(id) == 0});
    }
    return view;
  }

  std::string assign_node(const q::JobRequest& request) {
    if (!request.node_id.empty()) {
      CHECK(request.node_id.substr(0, 1) == request.revision);
      return request.node_id;
    }
    // Round robin over the revision's nodes that are not quarantined.
    std::vector<std::string> candidates;
    for (const auto& id : nodes_) {
      if (id.substr(0, 1) == request.revision && quarantined_.count(id) == 0) candidates.push_back(id);
    }
    REQUIRE(!candidates.empty());
    return candidates[next_node_[request.revision]++ % candidates.size()];
  }

  const q::QualificationModel& find_model(const std::string& name) const {
    for (const auto& m : scenario_.models) {
      if (m.name == name) return m;
    }
    FAIL("unknown model " << name);
    return scenario_.models.front();
  }

  // What the bundle does to a model: its throughput factor and whether a used kernel is broken.
  std::pair<double, bool> effect(const std::string& bundle_id, const q::QualificationModel& m) const {
    const std::size_t index = bundle_index_.at(bundle_id);
    double factor = 1.0;
    std::set<std::string> broken;
    for (std::size_t i = 0; i <= index; ++i) {
      const auto& e = history_[i].sim_effect;
      if (!e) continue;
      if (auto it = e->throughput_factors.find(*m.workload); it != e->throughput_factors.end()) factor *= it->second;
      broken.insert(e->breaks_kernels.begin(), e->breaks_kernels.end());
    }
    const bool is_broken = std::any_of(m.components.begin(), m.components.end(),
                                       [&](const std::string& c) { return broken.count(c) > 0; });
    return {factor, is_broken};
  }

  q::JobResult execute(const q::JobRequest& request) {
    const q::QualificationModel& m = find_model(request.model);
    q::JobResult result;
    result.tag = request.tag;
    result.node_id = node_of_.at(request.tag);
    if (int& lost = lost_left_[m.name]; scenario_.lost_runs.count(m.name) && lost < scenario_.lost_runs.at(m.name)) {
      ++lost;
      result.ran = false;
      result.detail = "the agent went away";
      return result;
    }
    if (scenario_.lose_origin_reruns && request.purpose == q::JobPurpose::origin_rerun) {
      result.ran = false;
      result.detail = "node down";
      return result;
    }
    const auto [factor, broken] = effect(request.bundle_id, m);
    const int run_number = ++runs_[m.name];
    result.correct = !broken && scenario_.bad_nodes.count(result.node_id) == 0;
    if (request.purpose == q::JobPurpose::triage_rerun && scenario_.quarantined_during_reruns.count(result.node_id)) {
      result.correct = false;
      result.node_quarantined = "health probe failed: ecc chip 2 fail: ecc_uncorrected";
      quarantined_.insert(result.node_id);
    }
    if (m.name == scenario_.flaky_model && (run_number == 1 || run_number == 3)) result.correct = false;
    if (!result.correct) result.correctness_detail = "output: 812 of 8192 elements outside tolerance";
    if (request.repeats_per_side > 0) {
      const double base = 1000.0 * (1.0 + static_cast<double>(m.seed % 7));
      const double baseline_factor = effect(request.baseline_bundle_id, m).first;
      kiln::sim::PerfNoiseModel noise;
      kiln::stats::Rng rng(request.seed);
      for (std::uint32_t i = 0; i < request.repeats_per_side; ++i) {
        const int iteration = 40 + static_cast<int>(i);
        result.baseline_samples.push_back(noise.sample_throughput(base * baseline_factor, iteration, rng));
        result.candidate_samples.push_back(noise.sample_throughput(base * factor, iteration, rng));
      }
    }
    return result;
  }

  Scenario scenario_;
  std::vector<q::Change> history_;
  std::vector<std::string> nodes_;
  std::set<std::string> quarantined_;
  std::set<std::string> busy_;
  std::map<std::string, std::size_t> bundle_index_;
  std::map<std::uint64_t, std::string> node_of_;
  std::map<std::string, std::size_t> next_node_;
  std::map<std::string, int> runs_;
  std::map<std::string, int> lost_left_;
  std::deque<q::JobRequest> running_;
};

q::RunInput make_input(FakeFleet& fleet, const Scenario& scenario) {
  q::RunInput input;
  input.settings.run_id = "nightly-test";
  input.settings.revisions = {"a", "b"};
  input.settings.max_jobs_in_flight = scenario.max_jobs_in_flight;
  input.settings.triage.min_reruns = scenario.min_reruns;
  input.candidate = fleet.bundle_at(scenario.candidate_index);
  input.baselines["a"] = fleet.bundle_at(scenario.baseline_index);
  input.baselines["b"] = fleet.bundle_at(scenario.baseline_index);
  input.models = scenario.models;
  input.set.models = scenario.models;
  input.history = fleet.history();
  input.chips_per_node = 8;
  input.settings.perf.rule = scenario.perf_rule;
  input.baseline_history = scenario.baseline_history;
  return input;
}

Outcome run_scenario(const Scenario& scenario) {
  FakeFleet fleet(scenario);
  return fleet.run(make_input(fleet, scenario));
}

const q::ModelReport& find_report(const q::RunReport& report, const std::string& model, const std::string& revision) {
  for (const auto& m : report.models) {
    if (m.model == model && m.revision == revision) return m;
  }
  FAIL("no report for " << model << " on " << revision);
  return report.models.front();
}

std::size_t count_of(const std::string& text, const std::string& needle) {
  std::size_t count = 0;
  for (auto pos = text.find(needle); pos != std::string::npos; pos = text.find(needle, pos + 1)) ++count;
  return count;
}

}  // namespace

TEST_CASE("a nightly catches a 3% slowdown and a broken kernel, bisects both to their culprits, tickets each once") {
  const Outcome out = run_scenario(Scenario{});
  const q::RunReport& report = out.report;
  INFO(q::summary_text(report));
  REQUIRE(report.finished);
  CHECK_FALSE(report.passed);

  for (const char* revision : {"a", "b"}) {
    const auto& mlp = find_report(report, "mlp-small", revision);
    CHECK(mlp.verdict == q::ModelVerdict::performance_regression);
    REQUIRE(mlp.performance.has_value());
    CHECK(mlp.performance->regression_confirmed);
    REQUIRE(mlp.bisection.has_value());
    CHECK(mlp.bisection->outcome == q::BisectOutcome::culprit_found);
    CHECK(mlp.bisection->culprit_change_id == "c07");
    CHECK(mlp.detail.find("c07 (compiler, compiler-team)") != std::string::npos);

    const auto& medium = find_report(report, "mlp-medium", revision);
    CHECK(medium.verdict == q::ModelVerdict::performance_regression);
    REQUIRE(medium.bisection.has_value());
    CHECK(medium.bisection->culprit_change_id == "c07");
    CHECK(medium.ticket_ids == mlp.ticket_ids);  // another model's culprit: the same ticket

    const auto& tfm = find_report(report, "tfm-small", revision);
    CHECK(tfm.verdict == q::ModelVerdict::correctness_regression);
    REQUIRE(tfm.triage.has_value());
    CHECK(tfm.triage->decision == q::TriageDecision::software_regression);
    REQUIRE(tfm.bisection.has_value());
    CHECK(tfm.bisection->culprit_change_id == "c13");
    CHECK(tfm.ticket_ids.size() == 1);

    CHECK(find_report(report, "fp8-small", revision).verdict == q::ModelVerdict::passed);
    // The report keeps the samples each comparison judged, and the bisection's rounds.
    REQUIRE(mlp.performance->initial.has_value());
    CHECK(mlp.performance->initial_samples.baseline.size() == mlp.performance->initial->test.n_baseline);
    CHECK(mlp.performance->initial_samples.candidate.size() == mlp.performance->initial->test.n_candidate);
    REQUIRE(mlp.performance->confirmation.has_value());
    CHECK(mlp.performance->confirmation_samples.candidate.size() == mlp.performance->confirmation->test.n_candidate);
    CHECK(mlp.bisection->candidates.size() == kCandidateIndex - kBaselineIndex);
    CHECK(tfm.bisection->candidates.size() == kCandidateIndex - kPerfCulprit);
    for (const auto& probe : tfm.bisection->evidence) {
      CHECK(probe.round >= 1);
      CHECK(tfm.bisection->candidates.at(probe.change_index) == probe.change_id);
    }
    // The 32-chip model runs on 4 whole nodes; failing there points at no one node, so it is
    // bisected at once, to the same culprit as tfm-small and under the same ticket.
    const auto& large = find_report(report, "llm-large", revision);
    CHECK(large.verdict == q::ModelVerdict::correctness_regression);
    CHECK(large.detail.find("no single node to suspect") != std::string::npos);
    REQUIRE(large.bisection.has_value());
    CHECK(large.bisection->culprit_change_id == "c13");
    CHECK(large.ticket_ids == tfm.ticket_ids);
    CHECK_FALSE(large.triage.has_value());
  }
  for (const auto& r : out.started) {
    if (r.model != "llm-large") continue;
    CHECK(r.nodes == 4);
    CHECK(r.chips == 8);
    CHECK(r.node_id.empty());
  }
  // One bisection for the regressions of the baseline: rev b's and mlp-medium's (whose proxy is
  // mlp-small) share mlp-small's probe jobs. The broken kernel was good at c07, so a follow-up
  // bisection over the changes after c07 found its culprit.
  CHECK(find_report(report, "mlp-small", "b").detail.find("bisected once, together with mlp-small on revision a") !=
        std::string::npos);
  CHECK(find_report(report, "mlp-medium", "a").detail.find("mlp-small on revision b") != std::string::npos);
  // Seven others were bisected with it: three are named, the rest counted.
  CHECK(find_report(report, "mlp-medium", "a").detail.find("mlp-medium on revision b and 4 more") != std::string::npos);
  const auto& tfm_a = find_report(report, "tfm-small", "a");
  CHECK(tfm_a.detail.find("together with tfm-small on revision b, llm-large on revision a") != std::string::npos);
  CHECK(tfm_a.detail.find("mlp-small") == std::string::npos);
  CHECK(tfm_a.bisection->candidates.front() == "c08");

  REQUIRE(out.tickets.size() == 2);
  REQUIRE(report.tickets.size() == 2);
  const q::Ticket& perf = out.tickets[0].kind == q::TicketKind::performance_regression ? out.tickets[0] : out.tickets[1];
  const q::Ticket& numerics = &perf == &out.tickets[0] ? out.tickets[1] : out.tickets[0];
  CHECK(perf.kind == q::TicketKind::performance_regression);
  CHECK(perf.culprit_change == "c07");
  CHECK(perf.layer == q::Layer::compiler);
  CHECK(perf.team == "compiler-team");
  CHECK(numerics.kind == q::TicketKind::correctness_regression);
  CHECK(numerics.culprit_change == "c13");
  CHECK(numerics.layer == q::Layer::kernels);
  CHECK(numerics.team == "kernels-team");
  CHECK(find_report(report, "mlp-small", "a").ticket_ids == std::vector<std::string>{perf.id});
  CHECK(find_report(report, "tfm-small", "b").ticket_ids == std::vector<std::string>{numerics.id});
  const json evidence = json::parse(perf.evidence_json);
  CHECK(evidence.at("bisection").at("culprit") == "c07");
  CHECK(evidence.contains("performance"));

  // Bundles are built once per history index.
  CHECK(out.builds == out.built_indexes.size());
  CHECK(out.builds > 0);

  // JUnit: 8 failures (mlp-small, mlp-medium, tfm-small, llm-large on two revisions).
  CHECK(count_of(out.junit, "<testsuite ") == 2);
  CHECK(count_of(out.junit, "<failure ") == 8);
  CHECK(count_of(out.junit, "<skipped ") == 0);
  CHECK(out.junit.find("failures=\"8\"") != std::string::npos);
  CHECK(out.junit.find("<testsuite name=\"kiln.nightly revision a\" tests=\"5\" failures=\"4\" errors=\"0\" "
                       "skipped=\"0\"") != std::string::npos);
  CHECK(out.junit.find("classname=\"kiln.nightly\"") != std::string::npos);
  CHECK(out.junit.find(perf.id) != std::string::npos);

  const std::string summary = q::summary_text(report);
  CHECK(summary.find("FAILED") != std::string::npos);
  CHECK(summary.find("c07") != std::string::npos);
  CHECK(summary.find("c13") != std::string::npos);
}

TEST_CASE("probes run in parallel up to max_probes_per_bisection and obsolete probes are cancelled") {
  Scenario scenario;
  scenario.models = {default_models()[0], default_models()[2]};  // one bisection, probes of both
  const Outcome out = run_scenario(scenario);
  CHECK(out.max_probes_in_flight_seen == 3);
  CHECK(out.cancellations > 0);
  // While they ran the report showed both bisections and their rounds; a finished run shows none.
  CHECK(out.most_bisections_running >= 1);
  for (const auto& m : out.report.models) {
    if (!m.bisection || out.most_rounds.count(m.model) == 0) continue;
    CHECK(m.bisection->rounds >= 1);
    CHECK(out.most_rounds.at(m.model) <= m.bisection->rounds);
  }
  CHECK_FALSE(out.most_rounds.empty());
  CHECK(out.report.bisections_running.empty());
}

TEST_CASE("a change whose bundle does not build leaves the bisection ambiguous: the model's owner gets the range") {
  Scenario scenario;
  scenario.models = {default_models()[0]};
  scenario.failing_builds = {kPerfCulprit - 1};
  const Outcome out = run_scenario(scenario);
  INFO(q::summary_text(out.report));
  const auto& mlp = find_report(out.report, "mlp-small", "a");
  CHECK(mlp.verdict == q::ModelVerdict::performance_regression);
  REQUIRE(mlp.bisection.has_value());
  CHECK(mlp.bisection->outcome == q::BisectOutcome::ambiguous);
  CHECK(mlp.bisection->suspects == std::vector<std::string>{"c06", "c07"});
  CHECK(mlp.detail.find("suspects c06, c07, ticketed to recsys-models with the range") != std::string::npos);
  REQUIRE(out.tickets.size() == 1);  // the same range for the model on both revisions: one ticket
  CHECK(out.tickets[0].team == "recsys-models");
  CHECK(out.tickets[0].culprit_change == "range:mlp-small:c06..c07");
  CHECK(mlp.ticket_ids == std::vector<std::string>{out.tickets[0].id});
  CHECK(out.builds == out.built_indexes.size());  // the failed build is not asked for again
}

TEST_CASE("a revision without a healthy node is skipped") {
  Scenario scenario;
  scenario.candidate_index = 6;
  scenario.nodes_of_revision_b = 0;
  scenario.models = {default_models()[0], default_models()[3]};
  const Outcome out = run_scenario(scenario);
  for (const auto& m : out.report.models) {
    CHECK(m.verdict == (m.revision == "b" ? q::ModelVerdict::skipped : q::ModelVerdict::passed));
  }
  CHECK(std::none_of(out.started.begin(), out.started.end(), [](const q::JobRequest& r) { return r.revision == "b"; }));
  CHECK(out.report.passed);
}

TEST_CASE("a failing node that cannot even run its own rerun is still a hardware suspect") {
  Scenario scenario;
  scenario.candidate_index = 6;
  scenario.bad_nodes = {"a1"};
  scenario.lose_origin_reruns = true;
  scenario.models = {default_models()[0], default_models()[3]};
  const Outcome out = run_scenario(scenario);
  INFO(q::summary_text(out.report));
  const auto& suspect = find_report(out.report, "fp8-small", "a");
  CHECK(suspect.verdict == q::ModelVerdict::hardware_suspect);
  CHECK(out.quarantined == std::vector<std::string>{"a1"});
}

TEST_CASE("a triage rerun on a node quarantined while it ran is no evidence: it runs again on a healthy node") {
  Scenario scenario;
  scenario.candidate_index = 6;
  scenario.nodes_per_revision = 3;
  scenario.models = {default_models()[3]};
  scenario.bad_nodes = {"a0"};                   // the measure job fails here
  scenario.quarantined_during_reruns = {"a1"};  // the first rerun node, quarantined under the rerun
  const Outcome out = run_scenario(scenario);
  INFO(q::summary_text(out.report));
  const auto& model = find_report(out.report, "fp8-small", "a");
  // Counted, a1's wrong outputs would read "fails on a1 too: a software regression".
  CHECK(model.verdict == q::ModelVerdict::hardware_suspect);
  REQUIRE(model.triage.has_value());
  CHECK(model.triage->quarantine_node == "a0");
  CHECK(model.triage->reason.find("passes on a2") != std::string::npos);
  CHECK_FALSE(model.bisection.has_value());
  std::vector<std::string> rerun_nodes;
  for (const auto& r : out.started) {
    if (r.purpose == q::JobPurpose::triage_rerun) rerun_nodes.push_back(r.node_id);
  }
  CHECK(rerun_nodes == std::vector<std::string>{"a1", "a2"});
  CHECK(out.quarantined == std::vector<std::string>{"a0"});
}

TEST_CASE("the same run twice gives the same report") {
  const Outcome first = run_scenario(Scenario{});
  const Outcome second = run_scenario(Scenario{});
  CHECK(first.json_text == second.json_text);
  CHECK(first.junit == second.junit);
  CHECK(first.report.jobs_started == second.report.jobs_started);
}

TEST_CASE("a clean candidate passes, and a node that fails only on itself is quarantined with one lab ticket") {
  Scenario scenario;
  scenario.candidate_index = 6;  // up to the change before the slowdown
  scenario.bad_nodes = {"a1"};
  scenario.models.pop_back();  // no skipped model
  const Outcome out = run_scenario(scenario);
  INFO(q::summary_text(out.report));
  REQUIRE(out.report.finished);
  std::size_t suspects = 0;
  for (const auto& m : out.report.models) {
    CHECK_FALSE(m.bisection.has_value());
    if (m.verdict == q::ModelVerdict::hardware_suspect) {
      ++suspects;
      REQUIRE(m.triage.has_value());
      CHECK(m.triage->quarantine_node == "a1");
      CHECK(m.ticket_ids.size() == 1);
    } else {
      CHECK(m.verdict == q::ModelVerdict::passed);
    }
  }
  CHECK(suspects >= 1);
  CHECK(out.quarantined == std::vector<std::string>{"a1"});
  REQUIRE(out.tickets.size() == 1);
  CHECK(out.tickets[0].kind == q::TicketKind::hardware_suspect);
  CHECK(out.tickets[0].team == "lab");
  CHECK(out.tickets[0].culprit_change == "node:a1");
  CHECK(out.builds == 0);
  CHECK_FALSE(out.report.passed);  // a model could not be qualified on its first node
}

TEST_CASE("a model that fails now and then is flaky and does not fail the run") {
  Scenario scenario;
  scenario.candidate_index = 6;
  scenario.models = {default_models()[0], default_models()[3]};
  scenario.flaky_model = "fp8-small";
  scenario.min_reruns = 3;
  const Outcome out = run_scenario(scenario);
  INFO(q::summary_text(out.report));
  const auto& flaky = find_report(out.report, "fp8-small", "a");
  CHECK(flaky.verdict == q::ModelVerdict::flaky);
  REQUIRE(flaky.triage.has_value());
  CHECK(flaky.triage->decision == q::TriageDecision::flaky);
  CHECK(out.tickets.empty());
  CHECK(out.quarantined.empty());
  CHECK(out.report.passed);
  // Three reruns on another node plus one on the failing node.
  const auto reruns = std::count_if(out.started.begin(), out.started.end(), [](const q::JobRequest& r) {
    return r.model == "fp8-small" && r.purpose == q::JobPurpose::triage_rerun;
  });
  CHECK(reruns == 3);
}

TEST_CASE("a lost job is started again; one lost on every attempt ends as an error") {
  Scenario scenario;
  scenario.candidate_index = 6;
  scenario.models = {default_models()[0], default_models()[3]};
  scenario.lost_runs = {{"mlp-small", 1}, {"fp8-small", 100}};
  const Outcome out = run_scenario(scenario);
  INFO(q::summary_text(out.report));
  // mlp-small's first job is lost: the retry measures it.
  CHECK(find_report(out.report, "mlp-small", "a").verdict == q::ModelVerdict::passed);
  CHECK(find_report(out.report, "mlp-small", "b").verdict == q::ModelVerdict::passed);
  for (const char* revision : {"a", "b"}) {
    const auto& lost = find_report(out.report, "fp8-small", revision);
    CHECK(lost.verdict == q::ModelVerdict::error);
    CHECK(lost.detail.find("after 2 attempts") != std::string::npos);
  }
  const auto fp8_jobs = std::count_if(out.started.begin(), out.started.end(),
                                      [](const q::JobRequest& r) { return r.model == "fp8-small"; });
  CHECK(fp8_jobs == 4);  // two attempts on each revision
  // Not measured is a JUnit <error>, apart from the models that failed, and counted as one.
  CHECK(count_of(out.junit, "<error ") == 2);
  CHECK(count_of(out.junit, "<failure ") == 0);
  CHECK(out.junit.find("errors=\"2\"") != std::string::npos);
  // The retry keeps its seed: the same measurement again.
  std::vector<std::uint64_t> seeds;
  for (const auto& r : out.started) {
    if (r.model == "mlp-small" && r.purpose == q::JobPurpose::measure) seeds.push_back(r.seed);
  }
  CHECK(seeds.size() == 3);
  CHECK(std::all_of(seeds.begin(), seeds.end(), [](std::uint64_t s) { return s == 11; }));
  CHECK_FALSE(out.report.passed);
}

TEST_CASE("at most max_jobs_in_flight jobs run at once, and independent samples get distinct seeds") {
  Scenario scenario;
  scenario.max_jobs_in_flight = 3;
  const Outcome out = run_scenario(scenario);
  CHECK(out.max_in_flight_seen == 3);
  // Still finds both culprits.
  CHECK(find_report(out.report, "mlp-small", "a").bisection->culprit_change_id == "c07");
  CHECK(find_report(out.report, "tfm-small", "a").bisection->culprit_change_id == "c13");
  std::set<std::uint64_t> seeds;
  std::size_t non_measure = 0;
  for (const auto& r : out.started) {
    if (r.purpose == q::JobPurpose::measure) continue;
    ++non_measure;
    seeds.insert(r.seed);
    // The protocol carries seeds in 63 bits: a larger one would be refused by the coordinator.
    CHECK(r.seed <= static_cast<std::uint64_t>(INT64_MAX));
  }
  CHECK(seeds.size() == non_measure);
  const auto probes = std::count_if(out.started.begin(), out.started.end(),
                                    [](const q::JobRequest& r) { return r.purpose == q::JobPurpose::bisect_probe; });
  CHECK(probes > 0);
}

TEST_CASE("without a node view a correctness failure is bisected as unconfirmed") {
  Scenario scenario;
  scenario.tell_nodes = false;
  scenario.models = {default_models()[2]};
  const Outcome out = run_scenario(scenario);
  const auto& tfm = find_report(out.report, "tfm-small", "a");
  CHECK(tfm.verdict == q::ModelVerdict::correctness_regression);
  CHECK(tfm.detail.find("unconfirmed") != std::string::npos);
  REQUIRE(tfm.bisection.has_value());
  CHECK(tfm.bisection->culprit_change_id == "c13");
  CHECK(out.tickets.size() == 1);
}

TEST_CASE("start refuses invalid input") {
  Scenario scenario;
  FakeFleet fleet(scenario);
  auto check_refused = [&](auto mutate, const char* what) {
    q::RunInput input = make_input(fleet, scenario);
    mutate(input);
    auto run = q::QualificationRun::start(std::move(input), 0);
    INFO(what);
    CHECK_FALSE(run.has_value());
  };
  check_refused([](q::RunInput& i) { i.settings.revisions.clear(); }, "no revision");
  check_refused([](q::RunInput& i) { i.models[0].name.clear(); }, "a model without a name");
  check_refused([&](q::RunInput& i) { i.baselines["a"] = fleet.bundle_at(kCandidateIndex); i.candidate = fleet.bundle_at(5); },
                "a baseline that is not a prefix of the candidate");
  check_refused([](q::RunInput& i) { i.history.erase(i.history.begin() + 4); }, "a candidate change not in the history");
  check_refused([](q::RunInput& i) { i.settings.max_jobs_in_flight = 0; }, "no job may run");
}

TEST_CASE("a job result for an unknown tag or answered twice is a conflict") {
  Scenario scenario;
  FakeFleet fleet(scenario);
  auto run = q::QualificationRun::start(make_input(fleet, scenario), 0);
  REQUIRE(run.has_value());
  auto action = run->poll_action();
  while (action && !std::holds_alternative<q::run_action::StartJob>(*action)) action = run->poll_action();
  REQUIRE(action.has_value());
  const auto tag = std::get<q::run_action::StartJob>(*action).request.tag;
  q::JobResult result;
  result.tag = 999;
  CHECK(run->on_job_result(result, 1).error().code == kiln::Errc::conflict);
  result.tag = tag;
  result.node_id = "a0";
  CHECK(run->on_job_result(result, 1).has_value());
  CHECK(run->on_job_result(result, 2).error().code == kiln::Errc::conflict);
}

TEST_CASE("JUnit counts errors apart from failures, and its times add up like its counts") {
  q::RunReport report;
  report.run_id = "nightly-7";
  report.tier = q::Tier::nightly;
  report.finished = true;
  report.started_at_ms = 0;
  report.finished_at_ms = 999'000;  // the wall time of a run is not the sum of its tests
  q::ModelReport unmeasured;
  unmeasured.model = "lost";
  unmeasured.revision = "a";
  unmeasured.verdict = q::ModelVerdict::error;
  unmeasured.detail = "lost with its node after 2 attempts";
  unmeasured.duration_ms = 1'500;
  q::ModelReport failed = unmeasured;
  failed.model = "broken";
  failed.verdict = q::ModelVerdict::correctness_regression;
  failed.duration_ms = 2'250;
  q::ModelReport other = failed;
  other.revision = "b";
  other.verdict = q::ModelVerdict::passed;
  other.duration_ms = 250;
  report.models = {unmeasured, failed, other};
  const std::string xml = q::to_junit_xml(report);
  CHECK(xml.find("<error message=\"could not be measured: lost with its node after 2 attempts\" type=\"error\">") !=
        std::string::npos);
  CHECK(count_of(xml, "<failure ") == 1);
  CHECK(xml.find("name=\"kiln.nightly revision a\" tests=\"2\" failures=\"1\" errors=\"1\" skipped=\"0\" "
                 "time=\"3.750\"") != std::string::npos);
  CHECK(xml.find("name=\"kiln.nightly revision b\" tests=\"1\" failures=\"0\" errors=\"0\" skipped=\"0\" "
                 "time=\"0.250\"") != std::string::npos);
  CHECK(xml.find("tests=\"3\" failures=\"1\" errors=\"1\" skipped=\"0\" time=\"4.000\">") != std::string::npos);
}

TEST_CASE("JUnit XML escapes what people wrote and counts per revision") {
  q::RunReport report;
  report.run_id = "smoke<1>";
  report.tier = q::Tier::smoke;
  report.finished = true;
  q::ModelReport broken;
  broken.model = "m&m";
  broken.revision = "a";
  broken.verdict = q::ModelVerdict::correctness_regression;
  broken.detail = "output \"logits\" < tolerance & 'bad'\x01";
  broken.ticket_ids = {"kiln-0123"};
  q::ModelReport fine = broken;
  fine.model = "ok";
  fine.verdict = q::ModelVerdict::improved;
  fine.ticket_ids.clear();
  q::ModelReport other = fine;
  other.revision = "b";
  other.verdict = q::ModelVerdict::skipped;
  report.models = {broken, fine, other};
  const std::string xml = q::to_junit_xml(report);
  CHECK(xml.find("name=\"m&amp;m\" classname=\"kiln.smoke\"") != std::string::npos);
  CHECK(xml.find("message=\"correctness_regression: output &quot;logits&quot; &lt; tolerance &amp; &apos;bad&apos;\"")
        != std::string::npos);
  CHECK(xml.find('\x01') == std::string::npos);
  CHECK(xml.find("smoke&lt;1&gt;") != std::string::npos);
  CHECK(xml.find("tickets: kiln-0123") != std::string::npos);
  CHECK(xml.find("name=\"kiln.smoke revision a\" tests=\"2\" failures=\"1\" errors=\"0\" skipped=\"0\"") !=
        std::string::npos);
  CHECK(xml.find("name=\"kiln.smoke revision b\" tests=\"1\" failures=\"0\" errors=\"0\" skipped=\"1\"") !=
        std::string::npos);
  CHECK(q::summary_text(report).find("FAIL m&m on revision a") != std::string::npos);
  CHECK(q::fails_run(q::ModelVerdict::hardware_suspect));
  CHECK_FALSE(q::fails_run(q::ModelVerdict::flaky));
  // Undecided within a few percent after every extra round: listed for a person, not a failure.
  CHECK_FALSE(q::fails_run(q::ModelVerdict::inconclusive));
  q::RunReport in_progress;
  in_progress.run_id = "nightly-1";
  in_progress.models.resize(2);
  in_progress.models[1].verdict = q::ModelVerdict::inconclusive;
  in_progress.models[1].model = "wobbly";
  const std::string text = q::summary_text(in_progress);
  CHECK(text.find("running") != std::string::npos);
  CHECK(text.find("1 pending") != std::string::npos);
  CHECK(text.find("LOOK wobbly") != std::string::npos);
  CHECK(q::tier_from_string("release") == q::Tier::release);
  CHECK_FALSE(q::tier_from_string("weekly").has_value());
}

// ---------------------------------------------------------------------------------------------
// Result documents.

namespace {

json benchmark_json(const std::vector<double>& warmup, const std::vector<double>& timed) {
  json samples = json::array();
  int index = 0;
  double t = 1796013552000.0;
  for (double v : warmup) {
    samples.push_back({{"index", index++}, {"phase", "warmup"}, {"start_ms", t}, {"end_ms", t + 1}, {"throughput", v}});
    t += 1;
  }
  for (double v : timed) {
    samples.push_back({{"index", index++}, {"phase", "timed"}, {"start_ms", t}, {"end_ms", t + 1}, {"throughput", v}});
    t += 1;
  }
  return {{"settings", {{"warmup_min", 5}, {"warmup_max", 100}, {"steady_window", 5}, {"steady_tolerance", 0.03},
                        {"repeats", timed.size()}}},
          {"throughput_unit", "samples/s"},
          {"warmup", {{"iterations", warmup.size()}, {"steady_reached", true}, {"max_reached", false}}},
          {"timed_iterations", timed.size()},
          {"samples", samples}};
}

json inference_document(bool passed) {
  return {{"schema", "kiln.workload-result/1"},
          {"workload", "kiln-workload-model"},
          {"model", "mlp-bf16"},
          {"kind", "inference"},
          {"dtype", "bf16"},
          {"status", "completed"},
          {"passed", passed},
          {"job", {{"id", "42"}, {"attempt", "1"}, {"node_id", "n07"}, {"chips", {0, 1}}, {"seed", 7}, {"data_seed", 1}}},
          {"benchmark", benchmark_json({30000, 35000}, {36800.2, 36790.5, 36810.0})},
          {"baseline_benchmark", benchmark_json({31000}, {37000.0, 37010.0, 36990.0})},
          {"correctness",
           {{"checked", true},
            {"passed", passed},
            {"outputs", {{{"name", "output"}, {"passed", passed}, {"summary", passed ? "PASS" : "FAIL: 812 elements"}}}}}}};
}

// A training document as kiln-workload-model writes it, from the sim's real train-tiny.
json training_document(const kiln::sim::workloads::ModelRun& reference, const kiln::sim::workloads::ModelRun& run) {
  namespace w = kiln::sim::workloads;
  return {{"schema", "kiln.workload-result/1"},
          {"model", "train-tiny"},
          {"kind", "training"},
          {"dtype", "bf16"},
          {"status", "completed"},
          {"passed", true},
          {"benchmark", nullptr},
          {"correctness",
           {{"checked", true},
            {"passed", true},
            {"training",
             {{"passed", true},
              {"reference_loss_curve", w::loss_curve_to_json(reference.loss_curve)},
              {"eval_reference", reference.eval_score.value_or(0.0)}}}}},
          {"training",
           {{"loss_curve", w::loss_curve_to_json(run.loss_curve)},
            {"loss_every_steps", w::kLossCurveEverySteps},
            {"eval", {{"metric", "accuracy"}, {"score", run.eval_score.value_or(0.0)}}}}}};
}

}  // namespace

TEST_CASE("read_workload_result: timed samples of both benchmarks, the verdict and why it failed") {
  const auto m = model("mlp-small", "mlp-bf16", {"gemm-bf16"}, 1, "recsys-models", 1);
  auto ok = q::read_workload_result(inference_document(true).dump(), m);
  REQUIRE(ok.has_value());
  CHECK(ok->correct);
  CHECK(ok->candidate_samples == std::vector<double>{36800.2, 36790.5, 36810.0});
  CHECK(ok->baseline_samples == std::vector<double>{37000.0, 37010.0, 36990.0});
  CHECK(ok->chips == std::vector<std::uint32_t>{0, 1});

  auto bad = q::read_workload_result(inference_document(false).dump(), m);
  REQUIRE(bad.has_value());
  CHECK_FALSE(bad->correct);
  CHECK(bad->correctness_detail.find("812 elements") != std::string::npos);

  json no_baseline = inference_document(true);
  no_baseline.erase("baseline_benchmark");
  auto single = q::read_workload_result(no_baseline.dump(), m);
  REQUIRE(single.has_value());
  CHECK(single->baseline_samples.empty());

  CHECK(q::read_workload_result("{not json", m).error().code == kiln::Errc::bad_message);
  json wrong = inference_document(true);
  wrong["schema"] = "something/2";
  CHECK_FALSE(q::read_workload_result(wrong.dump(), m).has_value());
  json typed = inference_document(true);
  typed["benchmark"]["samples"][2]["phase"] = 5;
  CHECK_FALSE(q::read_workload_result(typed.dump(), m).has_value());
  json no_verdict = inference_document(true);
  no_verdict.erase("passed");
  CHECK_FALSE(q::read_workload_result(no_verdict.dump(), m).has_value());
}

TEST_CASE("read_workload_result: training runs go through the loss-curve and eval gates; a NaN loss fails") {
  namespace w = kiln::sim::workloads;
  const w::ModelSpec* spec = w::find_model("train-tiny");
  REQUIRE(spec != nullptr);
  w::ModelRunOptions options;
  options.reference = true;
  auto reference = w::run_model(*spec, options);
  REQUIRE(reference.has_value());
  options.reference = false;
  auto chip = w::run_model(*spec, options);
  REQUIRE(chip.has_value());
  const auto m = model("train-tiny-small-01", "train-tiny", {"gemm-bf16"}, 1, "training-models", 1);

  auto good = q::read_workload_result(training_document(*reference, *chip).dump(), m);
  REQUIRE(good.has_value());
  CHECK(good->correct);
  // The curves the gates saw are kept for the run's report, with the band they were held to.
  REQUIRE(good->training.has_value());
  CHECK(good->training->loss_curve.size() == chip->loss_curve.size());
  CHECK(good->training->reference_loss_curve.size() == reference->loss_curve.size());
  CHECK(good->training->options.pointwise_band_relative == doctest::Approx(0.05));
  REQUIRE(good->training->verdict.eval.has_value());
  const json evidence = q::to_json(*good->training);
  CHECK(evidence.at("loss_curve").size() == chip->loss_curve.size());
  CHECK(evidence.at("band_relative") == 0.05);
  CHECK(evidence.at("verdict").at("eval").at("passed") == true);

  w::ModelRun diverged = *chip;
  diverged.loss_curve[diverged.loss_curve.size() / 2].loss = std::nan("");
  const std::string text = training_document(*reference, diverged).dump();
  CHECK(text.find("\"nan\"") != std::string::npos);
  auto nan = q::read_workload_result(text, m);
  REQUIRE(nan.has_value());
  CHECK_FALSE(nan->correct);
  CHECK_FALSE(nan->correctness_detail.empty());

  w::ModelRun weak = *chip;
  weak.eval_score = *reference->eval_score * 0.9;
  auto low_eval = q::read_workload_result(training_document(*reference, weak).dump(), m);
  REQUIRE(low_eval.has_value());
  CHECK_FALSE(low_eval->correct);

  json broken_golden = training_document(*reference, *chip);
  broken_golden["correctness"]["training"]["reference_loss_curve"] = json::array();
  CHECK_FALSE(q::read_workload_result(broken_golden.dump(), m).has_value());
}

TEST_CASE("read_workload_result: a benchmark job's result is the agent's report; throttled samples stay out") {
  const auto m = model("mlp-small", "mlp-bf16", {"gemm-bf16"}, 1, "recsys-models", 1);
  // The shape agent/bench's to_json(BenchmarkReport) writes.
  json report = {{"schema", "kiln.benchmark-report/1"},
                 {"model", "mlp-bf16"},
                 {"status", "completed"},
                 {"correctness_checked", true},
                 {"correctness_passed", true},
                 {"unflagged_timed_throughputs", {36800.0, 36810.0}},
                 {"samples", json::array()},
                 {"correctness", {{"checked", true}, {"passed", true}}},
                 {"training", nullptr},
                 {"baseline", {{"unflagged_timed_throughputs", {37000.0, 37020.0, 36990.0}}}}};
  auto read = q::read_workload_result(report.dump(), m);
  REQUIRE_MESSAGE(read.has_value(), read.error().message);
  CHECK(read->correct);
  CHECK(read->candidate_samples == std::vector<double>{36800.0, 36810.0});
  CHECK(read->baseline_samples.size() == 3);

  report["correctness_passed"] = false;
  report["correctness"] = {{"checked", true},
                           {"passed", false},
                           {"outputs", {{{"name", "output"}, {"passed", false}, {"summary", "FAIL: 9 elements"}}}}};
  auto incorrect = q::read_workload_result(report.dump(), m);
  REQUIRE(incorrect.has_value());
  CHECK_FALSE(incorrect->correct);
  CHECK(incorrect->correctness_detail.find("9 elements") != std::string::npos);

  report["unflagged_timed_throughputs"] = {-1.0};
  CHECK_FALSE(q::read_workload_result(report.dump(), m).has_value());
}

TEST_CASE("a model's own repeats replace the run's, and a release multiplies them") {
  Scenario scenario;
  FakeFleet fleet(scenario);
  q::RunInput input = make_input(fleet, scenario);
  input.models[0].benchmark.repeats = 20;
  input.settings.repeats_multiplier = 2;
  const std::string first = input.models[0].name;
  const std::string second = input.models[1].name;
  auto run = q::QualificationRun::start(std::move(input), 0);
  REQUIRE(run.has_value());
  std::map<std::string, std::uint32_t> repeats;
  while (auto action = run->poll_action()) {
    if (auto* start = std::get_if<q::run_action::StartJob>(&*action)) {
      if (!start->request.baseline_bundle_id.empty()) repeats[start->request.model] = start->request.repeats_per_side;
    }
  }
  CHECK(repeats.at(first) == 40);
  CHECK(repeats.at(second) == 2 * q::RunSettings{}.repeats_per_side);
}

// Earlier jobs' baseline samples of one model: `jobs` batches of 10 at relative noise `sigma`.
std::vector<std::vector<double>> recorded_batches(double sigma, int jobs, std::uint64_t seed) {
  kiln::stats::Rng rng(seed);
  std::vector<std::vector<double>> batches(static_cast<std::size_t>(jobs));
  for (auto& batch : batches) {
    for (int i = 0; i < 10; ++i) batch.push_back(500 * (1 + sigma * rng.normal()));
  }
  return batches;
}

TEST_CASE("the sequential rule sizes each model's first measurement from its recorded noise") {
  Scenario scenario;
  scenario.perf_rule = kiln::stats::GateRule::sequential;
  const auto quiet = recorded_batches(0.01, 20, 1);
  const auto noisy = recorded_batches(0.03, 20, 2);
  scenario.baseline_history[{"mlp-small", "a"}] = quiet;
  scenario.baseline_history[{"fp8-small", "a"}] = noisy;
  FakeFleet fleet(scenario);
  auto run = q::QualificationRun::start(make_input(fleet, scenario), 0);
  REQUIRE(run.has_value());
  std::map<std::pair<std::string, std::string>, std::uint32_t> repeats;
  while (auto action = run->poll_action()) {
    if (auto* start = std::get_if<q::run_action::StartJob>(&*action)) {
      if (!start->request.baseline_bundle_id.empty()) {
        repeats[{start->request.model, start->request.revision}] = start->request.repeats_per_side;
      }
    }
  }
  const kiln::stats::PerfGateOptions options;
  const auto plan = [&](const std::vector<std::vector<double>>& batches) {
    return static_cast<std::uint32_t>(q::plan_for_pair(batches, options, nullptr).repeats_per_look);
  };
  CHECK(repeats.at({"mlp-small", "a"}) == plan(quiet));
  CHECK(repeats.at({"fp8-small", "a"}) == plan(noisy));
  CHECK(repeats.at({"fp8-small", "a"}) > 2 * repeats.at({"mlp-small", "a"}));
  // No records on revision b: the prior, the same for both.
  CHECK(repeats.at({"mlp-small", "b"}) == plan({}));
  CHECK(repeats.at({"fp8-small", "b"}) == plan({}));
}

TEST_CASE("a nightly under the sequential rule catches the 3% slowdown and says the plan it used") {
  Scenario scenario;
  scenario.perf_rule = kiln::stats::GateRule::sequential;
  for (const char* model : {"mlp-small", "mlp-medium", "fp8-small"}) {
    scenario.baseline_history[{model, "a"}] = recorded_batches(0.01, 10, 3);
  }
  const Outcome out = run_scenario(scenario);
  const q::RunReport& report = out.report;
  INFO(q::summary_text(report));
  REQUIRE(report.finished);
  for (const char* revision : {"a", "b"}) {
    const auto& mlp = find_report(report, "mlp-small", revision);
    CHECK(mlp.verdict == q::ModelVerdict::performance_regression);
    REQUIRE(mlp.performance.has_value());
    REQUIRE(mlp.performance->plan.has_value());
    CHECK(mlp.performance->looks_taken >= 1);
    CHECK_FALSE(mlp.performance->confirmation.has_value());  // the bound is the guarantee: no rerun
    CHECK(mlp.detail.find("sequential rule: stopped at look") != std::string::npos);
    const auto& fp8 = find_report(report, "fp8-small", revision);
    CHECK(fp8.verdict == q::ModelVerdict::passed);
    CHECK(fp8.detail.find("noise") != std::string::npos);
  }
  CHECK(find_report(report, "fp8-small", "a").detail.find("from 100 recorded baseline samples") != std::string::npos);
  CHECK(find_report(report, "fp8-small", "b").detail.find("no recorded baseline samples: the prior") !=
        std::string::npos);
  CHECK(out.json_text.find("\"repeats_per_look\"") != std::string::npos);
}

TEST_CASE("a model larger than the nodes a revision has is skipped, saying how many it needs") {
  Scenario scenario;
  scenario.nodes_per_revision = 2;
  scenario.nodes_of_revision_b = 2;
  const Outcome out = run_scenario(scenario);
  for (const char* revision : {"a", "b"}) {
    const auto& large = find_report(out.report, "llm-large", revision);
    CHECK(large.verdict == q::ModelVerdict::skipped);
    CHECK(large.detail.find("needs 32 chips: 4 whole nodes of revision") != std::string::npos);
    CHECK(large.detail.find("the fleet has 2 healthy") != std::string::npos);
  }
  CHECK(std::none_of(out.started.begin(), out.started.end(),
                     [](const q::JobRequest& r) { return r.model == "llm-large"; }));
}

// Bisection inside a run, the case: a 3% slowdown in the 23rd of the 41 changes a nightly's
// candidate adds to its baseline, seen by two models of the same workload. A fake fleet answers
// every job from the changes in its bundle and seeded noise.
#include <doctest/doctest.h>

#include <algorithm>
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

namespace q = kiln::qualification;

namespace {

constexpr std::size_t kBaselineIndex = 3;
constexpr std::size_t kCandidateIndex = 44;  // 41 changes after the baseline: c04 .. c44
constexpr std::size_t kCulprit = 26;         // c26, the 23rd of them: mlp-bf16 3% slower
constexpr double kNoise = 0.005;             // relative, per timed repeat

std::vector<q::Change> history() {
  std::vector<q::Change> changes;
  for (std::size_t i = 0; i <= kCandidateIndex; ++i) {
    q::Change change;
    change.id = fmt::format("c{:02}", i);
    change.layer = i == kCulprit ? q::Layer::compiler : q::Layer::runtime;
    change.owner_team = i == kCulprit ? "compiler-team" : "runtime-team";
    change.summary = fmt::format("change {}", i);
    if (i == kCulprit) change.sim_effect = q::SimChangeEffect{{{"mlp-bf16", 0.97}}, {}, {}};
    changes.push_back(change);
  }
  return changes;
}

q::QualificationModel model(std::string name, std::string workload, std::string owner, std::uint64_t seed) {
  q::QualificationModel m;
  m.name = std::move(name);
  m.workload = std::move(workload);
  m.components = {"gemm-bf16"};
  m.owner_team = std::move(owner);
  m.seed = seed;
  return m;
}

// Recorded baseline batches of a model at the fleet's noise: what the sequential rule plans from.
std::vector<std::vector<double>> recorded(std::uint64_t seed) {
  kiln::stats::Rng rng(seed);
  std::vector<std::vector<double>> batches(12);
  for (auto& batch : batches) {
    for (int i = 0; i < 10; ++i) batch.push_back(1000 * (1 + kNoise * rng.normal()));
  }
  return batches;
}

struct Outcome {
  q::RunReport report;
  std::vector<q::JobRequest> probes;  // every probe job started
  std::vector<std::string> logs;
};

class Fleet {
 public:
  std::set<std::size_t> failing_builds;

  q::Bundle bundle_at(std::size_t index) {
    auto bundle = q::build_bundle_at(history_, index);
    REQUIRE(bundle.has_value());
    index_of_[bundle->id] = index;
    return *bundle;
  }

  q::RunInput input(kiln::stats::GateRule rule) {
    q::RunInput input;
    input.settings.run_id = "nightly-bisect";
    input.settings.revisions = {"a"};
    input.settings.perf.rule = rule;
    input.candidate = bundle_at(kCandidateIndex);
    input.baselines["a"] = bundle_at(kBaselineIndex);
    input.models = {model("mlp-ranker", "mlp-bf16", "ranking-models", 11),
                    model("mlp-recsys", "mlp-bf16", "recsys-models", 12),
                    model("fp8-small", "mlp-fp8", "recsys-models", 13)};
    input.set.models = input.models;
    input.history = history_;
    for (const auto& m : input.models) input.baseline_history[{m.name, "a"}] = recorded(m.seed);
    return input;
  }

  Outcome run(q::RunInput input) {
    Outcome outcome;
    kiln::TimeMs now = 1'000'000;
    auto started = q::QualificationRun::start(std::move(input), now);
    REQUIRE(started.has_value());
    std::vector<q::NodeCandidate> nodes;
    for (int n = 0; n < 4; ++n) nodes.push_back({fmt::format("a{}", n), "a", true, true});
    started->set_nodes(nodes, now);
    for (int steps = 0; !started->finished(); ++steps) {
      REQUIRE(steps < 20000);
      auto action = started->poll_action();
      if (!action) {
        REQUIRE_MESSAGE(!running_.empty(), "the run waits, but no job is running");
        const q::JobRequest request = running_.front();
        running_.pop_front();
        now += kiln::kMinuteMs;
        REQUIRE(started->on_job_result(execute(request), now).has_value());
      } else if (auto* start = std::get_if<q::run_action::StartJob>(&*action)) {
        if (start->request.purpose == q::JobPurpose::bisect_probe) outcome.probes.push_back(start->request);
        running_.push_back(start->request);
      } else if (auto* cancel = std::get_if<q::run_action::CancelJob>(&*action)) {
        std::erase_if(running_, [&](const q::JobRequest& r) { return r.tag == cancel->tag; });
      } else if (auto* build = std::get_if<q::run_action::BuildBundle>(&*action)) {
        if (failing_builds.contains(build->history_index)) {
          started->on_bundle_built(build->history_index, kiln::fail(kiln::Errc::internal, "the compiler crashed"), now);
        } else {
          started->on_bundle_built(build->history_index, bundle_at(build->history_index), now);
        }
      } else if (auto* log = std::get_if<q::run_action::Log>(&*action)) {
        outcome.logs.push_back(log->text);
      }
    }
    outcome.report = started->report();
    return outcome;
  }

 private:
  double factor(const std::string& bundle_id, const std::string& workload) const {
    double product = 1;
    for (std::size_t i = 0; i <= index_of_.at(bundle_id); ++i) {
      const auto& effect = history_[i].sim_effect;
      if (effect && effect->throughput_factors.contains(workload)) product *= effect->throughput_factors.at(workload);
    }
    return product;
  }

  q::JobResult execute(const q::JobRequest& request) {
    const std::string workload = request.model == "fp8-small" ? "mlp-fp8" : "mlp-bf16";
    q::JobResult result;
    result.tag = request.tag;
    result.node_id = "a0";
    kiln::stats::Rng rng(request.seed);
    const double baseline = 1000 * factor(request.baseline_bundle_id, workload);
    const double candidate = 1000 * factor(request.bundle_id, workload);
    for (std::uint32_t i = 0; i < request.repeats_per_side; ++i) {
      result.baseline_samples.push_back(baseline * (1 + kNoise * rng.normal()));
      result.candidate_samples.push_back(candidate * (1 + kNoise * rng.normal()));
    }
    return result;
  }

  std::vector<q::Change> history_ = history();
  std::map<std::string, std::size_t> index_of_;
  std::deque<q::JobRequest> running_;
};

const q::ModelReport& report_of(const q::RunReport& report, const std::string& model) {
  auto it = std::find_if(report.models.begin(), report.models.end(), [&](const auto& m) { return m.model == model; });
  REQUIRE(it != report.models.end());
  return *it;
}

std::size_t logs_containing(const Outcome& out, const std::string& text) {
  return static_cast<std::size_t>(std::count_if(out.logs.begin(), out.logs.end(), [&](const std::string& log) {
    return log.find(text) != std::string::npos;
  }));
}

// One bisection for both models, every probe measuring both, within the documented rounds.
void check_one_bisection(const Outcome& out) {
  INFO(q::summary_text(out.report));
  const auto& ranker = report_of(out.report, "mlp-ranker");
  const auto& recsys = report_of(out.report, "mlp-recsys");
  for (const auto* m : {&ranker, &recsys}) {
    CHECK(m->verdict == q::ModelVerdict::performance_regression);
    REQUIRE(m->bisection.has_value());
    CHECK(m->bisection->culprit_change_id == "c26");
    CHECK(m->bisection->candidates.size() == 41);
    // 41 changes, 3 probes a round (4 healthy nodes): at most ceil(log_4(41)) = 3 rounds, 9 probes.
    CHECK(m->bisection->probes_per_round == 3);
    CHECK(m->bisection->round_bound == q::expected_rounds(41, 3));
    CHECK(m->bisection->rounds <= 3);
    CHECK(m->bisection->probes_started <= 9);
    // Each model's report keeps its own evidence of the shared probes, not the other's: a night
    // of many models regressing together would otherwise store every model's evidence in every
    // model's report.
    REQUIRE_FALSE(m->bisection->evidence.empty());
    const std::string other = m == &ranker ? "mlp-recsys" : "mlp-ranker";
    for (const auto& probe : m->bisection->evidence) {
      CHECK_FALSE(probe.detail.empty());
      CHECK(probe.detail.find(other) == std::string::npos);
    }
  }
  CHECK(report_of(out.report, "fp8-small").verdict == q::ModelVerdict::passed);
  CHECK(logs_containing(out, "bisecting over 41 changes") == 1);
  CHECK(ranker.detail.find("bisected once, together with mlp-recsys on revision a") != std::string::npos);
  // Every probed bundle was measured for both models, one job each (more for extra looks).
  std::map<std::string, std::set<std::string>> models_of_bundle;
  for (const auto& probe : out.probes) models_of_bundle[probe.bundle_id].insert(probe.model);
  CHECK(models_of_bundle.size() == ranker.bisection->probes_started);
  for (const auto& [bundle, models] : models_of_bundle) {
    CHECK(models == std::set<std::string>{"mlp-ranker", "mlp-recsys"});
  }
  // One ticket, to the culprit's owner, naming both models.
  REQUIRE(out.report.tickets.size() == 1);
  const q::Ticket& ticket = out.report.tickets.front();
  CHECK(ticket.culprit_change == "c26");
  CHECK(ticket.team == "compiler-team");
  CHECK(nlohmann::json::parse(ticket.evidence_json).at("models") ==
        nlohmann::json::array({"mlp-ranker", "mlp-recsys"}));
  CHECK(ranker.ticket_ids == std::vector<std::string>{ticket.id});
  CHECK(recsys.ticket_ids == ranker.ticket_ids);
  CHECK(logs_containing(out, "in 3 rounds (at most 3 for 41 changes with 3 probes a round)") +
            logs_containing(out, "in 2 rounds (at most 3 for 41 changes with 3 probes a round)") ==
        1);
}

}  // namespace

TEST_CASE("two models of one workload slowed by change 23 of 41 share one bisection of at most 3 rounds") {
  Fleet fleet;
  check_one_bisection(fleet.run(fleet.input(kiln::stats::GateRule::fixed)));
}

TEST_CASE("under the sequential rule a probe's repeats and looks come from its model's recorded noise") {
  Fleet fleet;
  q::RunInput input = fleet.input(kiln::stats::GateRule::sequential);
  const auto plan_of = [&](const std::string& name) {
    return q::plan_for_pair(input.baseline_history.at({name, "a"}), input.settings.perf, nullptr);
  };
  const auto ranker_plan = plan_of("mlp-ranker");
  const auto recsys_plan = plan_of("mlp-recsys");
  const Outcome out = fleet.run(std::move(input));
  check_one_bisection(out);
  REQUIRE_FALSE(out.probes.empty());
  for (const auto& probe : out.probes) {
    const auto& plan = probe.model == "mlp-ranker" ? ranker_plan : recsys_plan;
    CHECK(probe.repeats_per_side == static_cast<std::uint32_t>(plan.repeats_per_look));
  }
  CHECK(logs_containing(out, "probes of mlp-ranker on revision a: ") == 1);
}

TEST_CASE("a confirmed regression the bisection cannot pin down tickets each model's owner with the range") {
  Fleet fleet;
  fleet.failing_builds = {kCulprit - 1};  // c25, right before the culprit, never builds
  const Outcome out = fleet.run(fleet.input(kiln::stats::GateRule::fixed));
  INFO(q::summary_text(out.report));
  REQUIRE(out.report.finished);
  CHECK_FALSE(out.report.passed);
  std::map<std::string, q::Ticket> by_team;
  for (const auto& ticket : out.report.tickets) by_team[ticket.team] = ticket;
  REQUIRE(by_team.size() == 2);
  const std::pair<std::string, std::string> owners[] = {{"mlp-ranker", "ranking-models"},
                                                        {"mlp-recsys", "recsys-models"}};
  for (const auto& [name, team] : owners) {
    const auto& m = report_of(out.report, name);
    CHECK(m.verdict == q::ModelVerdict::performance_regression);
    REQUIRE(m.bisection.has_value());
    CHECK(m.bisection->outcome == q::BisectOutcome::ambiguous);
    CHECK(m.bisection->suspects == std::vector<std::string>{"c25", "c26"});
    CHECK(m.bisection->rounds <= m.bisection->round_bound);
    const q::Ticket& ticket = by_team.at(team);
    CHECK(ticket.kind == q::TicketKind::performance_regression);
    CHECK(ticket.culprit_change == fmt::format("range:{}:c25..c26", name));
    CHECK(ticket.title.find("since one of 2 changes (c25..c26)") != std::string::npos);
    CHECK(nlohmann::json::parse(ticket.evidence_json).at("suspects") == nlohmann::json::array({"c25", "c26"}));
    CHECK(m.ticket_ids == std::vector<std::string>{ticket.id});
    CHECK(m.detail.find(fmt::format("suspects c25, c26, ticketed to {} with the range", team)) != std::string::npos);
  }
}

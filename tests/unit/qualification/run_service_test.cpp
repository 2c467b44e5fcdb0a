// What the qualifier decides without I/O: which requested runs it takes up, a run's input from
// the coordinator's records (the tier's models, the fleet's revisions, the baselines, a
// release's doubled repeats), the release's soak rounds, which revisions a finished run makes
// its baseline; and the request, claim and report documents it reads back.
#include <doctest/doctest.h>

#include <algorithm>

#include <nlohmann/json.hpp>

#include "qualification/noise_history.h"
#include "qualification/run_report.h"
#include "records/run_request.h"
#include "qualification/run_service.h"

using namespace kiln;
namespace q = kiln::qualification;

namespace {

q::QualificationModel model(const std::string& name, const std::string& component) {
  q::QualificationModel m;
  m.name = name;
  m.components = {component};
  m.owner_team = "models";
  m.workload = name;
  return m;
}

q::Bundle bundle(const std::string& id, std::vector<std::string> changes) {
  q::Bundle b;
  b.id = id;
  b.hardware_revisions = {"a", "b"};
  b.change_count = changes.size();
  if (!changes.empty()) b.last_change = changes.back();
  return b;
}

q::RunFacts facts() {
  q::RunFacts f;
  f.set.models = {model("mlp-bf16", "gemm-bf16"), model("mlp-fp8", "gemm-fp8"), model("conv", "conv2d")};
  for (const char* id : {"c1", "c2"}) {
    q::Change change;
    change.id = id;
    change.owner_team = "kernels-team";
    change.components = {std::string(id) == "c1" ? "gemm-bf16" : "gemm-fp8"};
    f.history.push_back(change);
  }
  f.candidate = bundle("cand", {"c1", "c2"});
  f.bundles["base"] = bundle("base", {"c1"});
  f.bundles["cand"] = f.candidate;
  f.accepted_ids = {{"a", "base"}, {"b", "cand"}};
  f.fleet_revisions = {"a", "b"};
  return f;
}

q::RunRequest request(q::Tier tier) {
  q::RunRequest r;
  r.run_id = std::string(q::to_string(tier)) + "-1";
  r.tier = tier;
  r.bundle_id = "cand";
  return r;
}

}  // namespace

TEST_CASE("the qualifier takes up requested runs that are neither finished nor driven by it, in request order") {
  std::vector<q::RunRequest> requests;
  for (const char* id : {"r1", "r2", "r3", "r4"}) {
    q::RunRequest r;
    r.run_id = id;
    requests.push_back(r);
  }
  CHECK(q::runs_to_take_up(requests, {"r2"}, {"r3"}) == std::vector<std::string>{"r1", "r4"});
  CHECK(q::runs_to_take_up(requests, {}, {}).size() == 4);
}

TEST_CASE("a run's input: the tier's models, the fleet's revisions, each revision's baseline but the candidate") {
  auto nightly = q::run_input_for(request(q::Tier::nightly), facts());
  REQUIRE(nightly.has_value());
  CHECK(nightly->models.size() == 3);
  CHECK(nightly->settings.revisions == std::vector<std::string>{"a", "b"});
  CHECK(nightly->baselines.size() == 1);  // b's baseline is the candidate itself: correctness only there
  CHECK(nightly->baselines.at("a").id == "base");
  CHECK(nightly->settings.repeats_multiplier == 1);

  auto release = q::run_input_for(request(q::Tier::release), facts());
  REQUIRE(release.has_value());
  CHECK(release->settings.repeats_multiplier == 2);
  CHECK(release->settings.seed != nightly->settings.seed);

  // A smoke runs the models the change under test touches (the bundle's last, or the one named).
  auto smoke = q::run_input_for(request(q::Tier::smoke), facts());
  REQUIRE(smoke.has_value());
  REQUIRE(smoke->models.size() == 1);
  CHECK(smoke->models[0].name == "mlp-fp8");
  auto of_c1 = request(q::Tier::smoke);
  of_c1.change = "c1";
  CHECK(q::run_input_for(of_c1, facts())->models[0].name == "mlp-bf16");
  // A change that is not recorded is refused, naming it: the client asking refuses it the same way.
  of_c1.change = "c9";
  const auto unknown = q::run_input_for(of_c1, facts());
  REQUIRE_FALSE(unknown.has_value());
  CHECK(unknown.error().code == Errc::invalid_argument);
  CHECK(unknown.error().message.starts_with("change c9 is not recorded"));
  CHECK(q::check_change_under_test("c9", false).error().message == unknown.error().message);
  CHECK(q::check_change_under_test("c1", true).has_value());

  // The first N models; only the revisions the fleet has, and none is an error.
  auto first = request(q::Tier::nightly);
  first.max_models = 2;
  auto f = facts();
  f.fleet_revisions = {"b", "z"};
  auto some = q::run_input_for(first, f);
  REQUIRE(some.has_value());
  CHECK(some->models.size() == 2);
  CHECK(some->settings.revisions == std::vector<std::string>{"b"});
  CHECK(q::revisions_skipped(f.candidate, f.fleet_revisions) == std::vector<std::string>{"a"});
  f.fleet_revisions = {"z"};
  CHECK(q::run_input_for(first, f).error().code == Errc::unavailable);
}

TEST_CASE("a run taken up again keeps the baselines its first driver compared against") {
  auto f = facts();
  // The first driver made the candidate a's baseline before it died.
  f.accepted_ids["a"] = "cand";
  f.recorded_baseline_ids = {{"a", "base"}};
  auto input = q::run_input_for(request(q::Tier::nightly), f);
  REQUIRE(input.has_value());
  REQUIRE(input->baselines.count("a"));
  CHECK(input->baselines.at("a").id == "base");
  CHECK_FALSE(input->baselines.count("b"));
  f.recorded_baseline_ids = {{"a", "gone"}};
  CHECK(q::run_input_for(request(q::Tier::nightly), f).error().code == Errc::not_found);
}

TEST_CASE("a bundle older than a revision's baseline is refused before the run starts, naming both") {
  auto f = facts();
  f.candidate = bundle("older-candidate", {"c1"});
  f.bundles["older-candidate"] = f.candidate;
  f.bundles["base"] = bundle("base", {"c1", "c2"});
  f.accepted_ids = {{"a", "base"}};
  const auto input = q::run_input_for(request(q::Tier::smoke), f);
  REQUIRE_FALSE(input.has_value());
  CHECK(input.error().code == Errc::invalid_argument);
  CHECK(input.error().message == "bundle older-candid (changes up to c1) is older than the accepted baseline base of "
                                 "revision a (changes up to c2): a run compares a bundle with an earlier one; ask for a "
                                 "bundle built at or after change c2 (kiln bundle build)");
  // The same bundle as the baseline, or a newer one, is compared.
  f.bundles["base"] = bundle("base", {"c1"});
  CHECK(q::run_input_for(request(q::Tier::smoke), f).has_value());
  CHECK(q::check_not_older_than_baselines(f.candidate, {{"a", bundle("base", {"c1"})}}).has_value());
}

TEST_CASE("a release soaks every round it asked for, whatever the first found; its rounds join its report") {
  auto release = request(q::Tier::release);
  release.soak_rounds = 2;
  auto first = q::run_input_for(release, facts());
  REQUIRE(first.has_value());
  q::RunReport whole;
  whole.run_id = release.run_id;
  whole.finished = true;
  whole.passed = false;  // the first round failed a gate (which a waiver may let through later)
  whole.models.resize(3);
  whole.soak = q::SoakRounds{2, 0};
  auto round1 = q::next_soak_round(release, *first, whole, 0);
  REQUIRE(round1.has_value());
  CHECK(round1->settings.run_id == "release-1-soak1");
  CHECK(round1->settings.seed != first->settings.seed);
  CHECK(round1->models.size() == first->models.size());

  q::RunReport soaked;
  soaked.finished = true;
  soaked.passed = true;
  q::ModelReport model;
  model.model = "mlp-bf16";
  model.detail = "outputs within tolerance";
  soaked.models.push_back(model);
  soaked.jobs_started = 4;
  q::add_soak_round(whole, soaked, 1);
  CHECK(whole.models.size() == 4);
  CHECK(whole.models.back().detail == "soak round 1: outputs within tolerance");
  CHECK(whole.jobs_started == 4);
  CHECK(whole.soak->run == 1);
  // A passing round does not make the failed release pass.
  CHECK_FALSE(whole.passed);
  // Nor does a failed release or round end the soak: only the rounds asked for, and tiers other than release.
  CHECK(q::next_soak_round(release, *first, whole, 1).has_value());
  CHECK_FALSE(q::next_soak_round(release, *first, whole, 2).has_value());
  CHECK_FALSE(q::next_soak_round(request(q::Tier::nightly), *first, whole, 0).has_value());
  // A passing release failed by a round fails.
  whole.passed = true;
  soaked.passed = false;
  q::add_soak_round(whole, soaked, 2);
  CHECK_FALSE(whole.passed);
  CHECK(whole.soak->run == 2);
  // A first round that did not finish (stopped) has nothing to soak.
  whole.finished = false;
  CHECK_FALSE(q::next_soak_round(release, *first, whole, 0).has_value());
}

TEST_CASE("a passing nightly or release becomes the baseline of its revisions, unless asked not to") {
  auto nightly = request(q::Tier::nightly);
  auto input = q::run_input_for(nightly, facts());
  REQUIRE(input.has_value());
  q::RunReport whole;
  whole.finished = true;
  whole.passed = true;
  CHECK(q::revisions_to_accept(nightly, *input, whole) == std::vector<std::string>{"a", "b"});
  nightly.accept = false;
  CHECK(q::revisions_to_accept(nightly, *input, whole).empty());
  CHECK(q::revisions_to_accept(request(q::Tier::smoke), *input, whole).empty());
  whole.passed = false;
  CHECK(q::revisions_to_accept(request(q::Tier::release), *input, whole).empty());
}

TEST_CASE("run requests and claims read back what was written; what is wrong is named") {
  auto release = request(q::Tier::release);
  release.change = "c1";
  release.repeats = 20;
  release.accept = false;
  auto back = q::run_request_from_json(q::to_json(release));
  REQUIRE(back.has_value());
  CHECK(back->tier == q::Tier::release);
  CHECK(back->change == "c1");
  CHECK(back->repeats == 20);
  CHECK_FALSE(back->accept);
  auto json = q::to_json(release);
  json["repeats"] = 0;
  CHECK(q::run_request_from_json(json).error().message == "a run request's repeats must be an integer from 1 to 1000");
  json = q::to_json(release);
  json.erase("bundle_id");
  CHECK(q::run_request_from_json(json).error().message == "a run request needs bundle_id (a non-empty string)");

  auto claim = q::run_claim_from_json(q::to_json(q::RunClaim{"r1", "q/1", 3000, 9000}));
  REQUIRE(claim.has_value());
  CHECK(claim->expires_at_ms == 9000);
  CHECK(claim->lease_ms == 3000);
  CHECK_FALSE(q::run_claim_from_json(nlohmann::json{{"run_id", "r1"}, {"owner", "q/1"}}).has_value());
}

TEST_CASE("a client following a run reads back from its report what the summary and JUnit show") {
  q::RunReport report;
  report.run_id = "nightly-1";
  report.tier = q::Tier::nightly;
  report.candidate_bundle_id = "cand";
  report.finished = true;
  q::ModelReport m;
  m.model = "mlp-bf16";
  m.revision = "a";
  m.owner_team = "models";
  m.verdict = q::ModelVerdict::correctness_regression;
  m.detail = "outputs differ";
  m.nodes = {"n01"};
  m.duration_ms = 1500;
  report.models.push_back(m);
  q::Ticket ticket;
  ticket.id = "kiln-0123456789abcdef";
  ticket.kind = q::TicketKind::correctness_regression;
  ticket.team = "kernels-team";
  ticket.title = "mlp-bf16 broke";
  ticket.culprit_change = "c1";
  ticket.evidence_json = "{}";
  report.tickets.push_back(ticket);
  auto outline = q::report_outline_from_json(q::to_json(report));
  REQUIRE_MESSAGE(outline.has_value(), outline.error().message);
  CHECK(q::to_junit_xml(*outline) == q::to_junit_xml(report));
  CHECK(q::summary_text(*outline) == q::summary_text(report));
  CHECK(q::report_outline_from_json(nlohmann::json{{"schema", "other"}}).error().code == Errc::bad_message);
}

TEST_CASE("a scheduled nightly's report says whether it finished by its deadline") {
  q::RunRequest request;
  request.run_id = "nightly-2026-12-03";
  q::RunReport report;
  report.finished_at_ms = 5000;
  report.finished = false;
  request.deadline_ms = 5000;
  CHECK_FALSE(q::met_deadline(request, report).has_value());  // still running
  report.finished = true;
  CHECK(q::met_deadline(request, report) == true);
  report.finished_at_ms = 5001;
  CHECK(q::met_deadline(request, report) == false);
  request.deadline_ms = 0;  // asked for by hand: no deadline
  CHECK_FALSE(q::met_deadline(request, report).has_value());
}

TEST_CASE("a run request keeps a scheduled nightly's deadline; one without it reads as before") {
  q::RunRequest request;
  request.run_id = "nightly-2026-12-03";
  request.bundle_id = std::string(64, 'a');
  CHECK_FALSE(q::to_json(request).contains("deadline_ms"));
  request.deadline_ms = 1796281200000;
  auto back = q::run_request_from_json(q::to_json(request));
  REQUIRE(back.has_value());
  CHECK(back->deadline_ms == 1796281200000);
}

namespace {

// A finished run whose models each have a measure job, numbered from `first_job`.
q::RunReport measured_run(const std::string& run_id, std::uint64_t first_job,
                          const std::vector<std::pair<std::string, std::string>>& models) {
  q::RunReport report;
  report.run_id = run_id;
  report.finished = true;
  std::uint64_t job_id = first_job;
  for (const auto& [name, revision] : models) {
    q::ModelReport m;
    m.model = name;
    m.revision = revision;
    m.measure_job = q::MeasuredJob{job_id++, R"({"workload":"model"})", 0.99, {}};
    report.models.push_back(m);
  }
  return report;
}

std::vector<std::uint64_t> job_ids(const std::vector<q::ReproductionPick>& picks) {
  std::vector<std::uint64_t> ids;
  for (const auto& pick : picks) ids.push_back(pick.job.job_id);
  return ids;
}

}  // namespace

TEST_CASE("the nightly's reproducibility sample: earlier measured results the fleet and set can still run") {
  const auto set = facts().set;
  std::vector<q::RunReport> earlier = {
      measured_run("nightly-1", 10, {{"mlp-bf16", "a"}, {"mlp-fp8", "b"}, {"retired-model", "a"}, {"conv", "z"}}),
      measured_run("tonight", 20, {{"mlp-bf16", "a"}}),
      measured_run("running", 30, {{"conv", "a"}}),
  };
  earlier[2].finished = false;
  earlier[0].models.push_back(earlier[0].models.front());
  earlier[0].models.back().measure_job.reset();  // did not run: nothing to rerun

  const auto picks = q::reproducibility_sample(earlier, "tonight", set, {"a", "b"}, 10, 5);
  // Not this run's own, not an unfinished run's, not a model gone from the set, not a revision
  // gone from the fleet.
  CHECK(job_ids(picks).size() == 2);
  for (const auto& pick : picks) {
    CHECK(pick.run_id == "nightly-1");
    CHECK((pick.job.job_id == 10 || pick.job.job_id == 11));
  }
  CHECK(q::reproducibility_sample(earlier, "tonight", set, {"a", "b"}, 0, 5).empty());
}

TEST_CASE("the reproducibility sample is drawn from the run's seed: the same again after a restart") {
  std::vector<std::pair<std::string, std::string>> models;
  for (int i = 0; i < 20; ++i) models.emplace_back(i % 2 ? "mlp-bf16" : "conv", i % 3 ? "a" : "b");
  std::vector<q::RunReport> earlier = {measured_run("nightly-1", 100, models), measured_run("nightly-2", 200, models)};
  const auto set = facts().set;
  const auto first = job_ids(q::reproducibility_sample(earlier, "tonight", set, {"a", "b"}, 3, 42));
  CHECK(first.size() == 3);
  std::reverse(earlier.begin(), earlier.end());  // the coordinator may list the reports in another order
  CHECK(job_ids(q::reproducibility_sample(earlier, "tonight", set, {"a", "b"}, 3, 42)) == first);
  // Another night draws other results.
  bool differs = false;
  for (std::uint64_t seed = 43; seed < 53 && !differs; ++seed) {
    differs = job_ids(q::reproducibility_sample(earlier, "tonight", set, {"a", "b"}, 3, seed)) != first;
  }
  CHECK(differs);
}

TEST_CASE("a run's report keeps its measure jobs and its reproducibility reruns") {
  q::RunReport report = measured_run("nightly-2", 7, {{"mlp-bf16", "a"}});
  q::ReproductionCheck check{q::Reproduction::not_reproduced, "correctness", "the original was correct", std::nullopt};
  report.reproducibility = {{"nightly-1", "mlp-fp8", "b", 3, 9, check}, {"nightly-1", "conv", "a", 4, 10, std::nullopt}};
  const auto json = q::to_json(report);
  CHECK(json.at("models").at(0).at("measure_job").at("job_id") == 7);
  CHECK(json.at("models").at(0).at("measure_job").at("submission").at("workload") == "model");
  CHECK(json.at("reproducibility").at("counts").at("not_reproduced") == 1);
  CHECK(json.at("reproducibility").at("counts").at("pending") == 1);
  CHECK(json.at("reproducibility").at("jobs").at(0).at("rerun_job_id") == 9);

  auto outline = q::report_outline_from_json(json);
  REQUIRE_MESSAGE(outline.has_value(), outline.error().message);
  REQUIRE(outline->models.at(0).measure_job);
  CHECK(outline->models.at(0).measure_job->job_id == 7);
  CHECK(outline->reproducibility.size() == 2);
  CHECK(q::summary_text(*outline) == q::summary_text(report));
  const auto summary = q::summary_text(report);
  CHECK(summary.find("reproducibility: 2 earlier results rerun: 1 not_reproduced, 1 pending") != std::string::npos);
  CHECK(summary.find("job 3 (mlp-fp8 on revision b, run nightly-1) rerun as job 9: not_reproduced") !=
        std::string::npos);
}

TEST_CASE("the nightly gates with the sequential rule unless the request names one") {
  q::RunRequest nightly;
  nightly.run_id = "n1";
  nightly.bundle_id = "b";
  CHECK(q::perf_rule_for(nightly) == stats::GateRule::sequential);
  q::RunRequest release = nightly;
  release.tier = q::Tier::release;
  CHECK(q::perf_rule_for(release) == stats::GateRule::fixed);
  nightly.perf_rule = stats::GateRule::fixed;
  auto back = q::run_request_from_json(q::to_json(nightly));
  REQUIRE(back.has_value());
  CHECK(back->perf_rule == stats::GateRule::fixed);
  auto json = q::to_json(nightly);
  json["perf_rule"] = "bayesian";
  CHECK(q::run_request_from_json(json).error().message == "run request n1: perf_rule 'bayesian' is not sequential or fixed");
}

TEST_CASE("recorded reports give each pair's baseline batches, the newest kept") {
  auto entry = [](const char* model, const char* revision, nlohmann::json baseline) {
    return nlohmann::json{{"model", model},
                          {"revision", revision},
                          {"performance", {{"initial_samples", {{"baseline", baseline}, {"candidate", {1.0}}}}}}};
  };
  std::vector<nlohmann::json> reports;
  for (int night = 0; night < 4; ++night) {
    const double level = 100 + night;
    reports.push_back({{"models",
                        {entry("mlp", "a", {level, level + 1, level + 2}), entry("mlp", "b", {"nan", level}),
                         {{"model", "tfm"}, {"revision", "a"}, {"performance", nullptr}}}}});
  }
  const q::BaselineHistory history = q::baseline_history(reports, 3);
  REQUIRE(history.count({"mlp", "a"}) == 1);
  const auto& batches = history.at({"mlp", "a"});
  REQUIRE(batches.size() == 3);
  CHECK(batches.front().front() == 101);  // the oldest night fell out
  CHECK(batches.back() == std::vector<double>{103, 104, 105});
  CHECK(history.count({"mlp", "b"}) == 0);  // one finite sample a batch says nothing about spread
  CHECK(history.count({"tfm", "a"}) == 0);
}

TEST_CASE("a model's night costs its measure job times the rounds its gate took") {
  q::RunReport report = measured_run("nightly-3", 11, {{"mlp-bf16", "a"}, {"conv", "a"}, {"moe", "b"}});
  // mlp-bf16: stopped at its first look. conv: two extra looks. moe: one extra round, then a
  // confirmation rerun with one of its own.
  stats::ModelGateOutcome first;
  first.finished = true;
  report.models[0].performance = first;
  stats::ModelGateOutcome looks = first;
  looks.initial_extra_rounds = 2;
  report.models[1].performance = looks;
  stats::ModelGateOutcome confirmed = first;
  confirmed.initial_extra_rounds = 1;
  confirmed.confirmation = stats::Comparison{};
  confirmed.confirmation_extra_rounds = 1;
  report.models[2].performance = confirmed;
  const auto json = q::to_json(report);
  CHECK(q::gate_rounds(json.at("models").at(0)) == 1);
  CHECK(q::gate_rounds(json.at("models").at(1)) == 3);
  CHECK(q::gate_rounds(json.at("models").at(2)) == 4);
  report.models[0].performance.reset();
  CHECK(q::gate_rounds(q::to_json(report).at("models").at(0)) == 1);  // no gate: the measure job alone
}

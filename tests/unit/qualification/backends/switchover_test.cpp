#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "qualification/backends/switchover.h"

namespace kiln::backends {

namespace {

using json = nlohmann::json;

// A finished run's report with one model entry, as the coordinator keeps it.
json run_with(const std::string& model, const std::vector<std::string>& nodes, const std::string& verdict,
              const std::vector<double>& baseline) {
  json entry = {{"model", model}, {"revision", "a"}, {"verdict", verdict}, {"nodes", nodes}};
  entry["performance"] = {{"initial_samples", {{"baseline", baseline}, {"candidate", baseline}}}};
  return {{"finished", true}, {"models", json::array({entry})}};
}

// What each node's driver declares (its backend=KIND label): n03's driver declares nothing.
const NodeBackends kNodes = {{"n01", Backend::sim},
                             {"n02", Backend::cpu},
                             {"n03", std::nullopt},
                             {"s01", Backend::silicon},
                             {"s02", Backend::silicon}};

// Every gate the set names must be there: readiness counts them all.
SwitchoverOptions with_models(std::vector<std::string> models) {
  SwitchoverOptions options;
  options.models = std::move(models);
  return options;
}

// Ten samples around `level` with a relative spread of about `noise`.
std::vector<double> samples(double level, double noise) {
  std::vector<double> out;
  for (int i = 0; i < 10; ++i) out.push_back(level * (1 + noise * ((i % 5) - 2) / 2.0));
  return out;
}

const GateStatus& gate(const SwitchoverReport& report, const std::string& model, const std::string& name) {
  for (const auto& g : report.gates) {
    if (g.model == model && g.gate == name) return g;
  }
  FAIL("no gate " << name << " of " << model);
  return report.gates.front();
}

}  // namespace

TEST_CASE("a node's backend is what its driver declares, never read from a version string") {
  CHECK(declared_backend({"pool=prod", "backend=sim"}) == Backend::sim);
  CHECK(declared_backend({"backend=cpu"}) == Backend::cpu);
  CHECK(declared_backend({"backend=silicon", "rack=r7"}) == Backend::silicon);
  // A driver that declares nothing (built before backend_kind), or a kind kiln does not know.
  CHECK_FALSE(declared_backend({"pool=prod"}));
  CHECK_FALSE(declared_backend({"backend=quantum"}));

  // A simulated node whose driver version was set to a vendor's string is still no silicon: a
  // result recorded before backends were kept, on a node that declares nothing now, counts for
  // no backend at all.
  SwitchoverOptions options = with_models({"mlp-bf16"});
  options.revisions = {"a"};
  const SwitchoverReport report =
      switchover_report({run_with("mlp-bf16", {"n03"}, "passed", samples(1000, 0.01))}, kNodes, options);
  REQUIRE(report.gates.size() == 2);
  for (const auto& g : report.gates) CHECK(g.evidence.empty());
  CHECK(report.calibrated == 0);
  CHECK_FALSE(report.ready);
}

TEST_CASE("before silicon every gate relies on the simulator and says what remains") {
  const std::vector<json> runs = {run_with("mlp-bf16", {"n01"}, "passed", samples(1000, 0.01)),
                                  run_with("mlp-bf16", {"n02"}, "passed", samples(10, 0.02))};
  const SwitchoverReport report = switchover_report(runs, kNodes);
  CHECK(report.runs_read == 2);
  REQUIRE(report.gates.size() == 2);
  CHECK_FALSE(report.ready);
  CHECK(report.calibrated == 0);
  const GateStatus& correctness = gate(report, "mlp-bf16", "correctness");
  CHECK(correctness.evidence.at(Backend::sim) == 1);
  CHECK(correctness.evidence.at(Backend::cpu) == 1);
  CHECK(correctness.remaining.find("confirm the golden on silicon") != std::string::npos);
  const GateStatus& performance = gate(report, "mlp-bf16", "performance");
  CHECK(performance.evidence.at(Backend::sim) == 10);
  CHECK_FALSE(performance.silicon_noise);
  CHECK(performance.remaining.find("20 more baseline samples") != std::string::npos);
  CHECK(to_text(report).find("NOT READY") != std::string::npos);
}

TEST_CASE("silicon runs calibrate: a correct run confirms the golden, enough baseline samples measure the noise") {
  std::vector<json> runs = {run_with("mlp-bf16", {"n01"}, "passed", samples(1000, 0.01)),
                            run_with("mlp-bf16", {"s01"}, "performance_regression", samples(500, 0.02))};
  SwitchoverReport report = switchover_report(runs, kNodes);
  CHECK(gate(report, "mlp-bf16", "correctness").calibrated);
  const GateStatus& partial = gate(report, "mlp-bf16", "performance");
  CHECK_FALSE(partial.calibrated);  // 10 of 20 samples
  CHECK(partial.remaining.find("10 more baseline samples") != std::string::npos);
  REQUIRE(partial.silicon_noise);

  runs.push_back(run_with("mlp-bf16", {"s02"}, "passed", samples(600, 0.02)));
  report = switchover_report(runs, kNodes, with_models({"mlp-bf16"}));
  const GateStatus& performance = gate(report, "mlp-bf16", "performance");
  CHECK(performance.calibrated);
  CHECK(performance.evidence.at(Backend::silicon) == 20);
  // The noise is each run's spread around its own level, not the gap between the two levels.
  REQUIRE(performance.silicon_noise);
  CHECK(*performance.silicon_noise < 0.03);
  CHECK(report.ready);
  CHECK(to_json(report)["ready"] == true);
}

TEST_CASE("what does not count: a failed run, mixed backends, unfinished runs, unknown nodes") {
  const std::vector<json> runs = {
      run_with("train-tiny", {"s01"}, "correctness_regression", {}),   // the golden disagreed
      run_with("train-tiny", {"s01", "n01"}, "passed", samples(1, 0.01)),  // a gang across backends
      run_with("train-tiny", {"gone"}, "passed", samples(1, 0.01)),
      json{{"finished", false}, {"models", json::array()}}};
  const SwitchoverReport report = switchover_report(runs, kNodes);
  CHECK(report.runs_read == 3);
  CHECK_FALSE(gate(report, "train-tiny", "correctness").calibrated);
  CHECK(gate(report, "train-tiny", "performance").evidence.count(Backend::silicon) == 1);  // 0 samples
  CHECK(gate(report, "train-tiny", "performance").evidence.at(Backend::silicon) == 0);
  REQUIRE(report.unknown_nodes.size() == 1);
  CHECK(report.unknown_nodes[0] == "gone");
  CHECK(to_text(report).find("gone") != std::string::npos);
}

TEST_CASE("a result keeps the backend it was made on when its node's driver changes later") {
  // s01 ran the simulator when these results were made; the node now runs the real chip's
  // driver (kNodes). Results recorded with their backend stay the simulator's.
  json sim_run = run_with("mlp-bf16", {"s01"}, "passed", samples(1000, 0.01));
  sim_run["models"][0]["node_backends"] = {{"s01", "sim"}};
  json silicon_run = run_with("mlp-bf16", {"s02"}, "passed", samples(500, 0.02));
  silicon_run["models"][0]["node_backends"] = {{"s02", "silicon"}};
  SwitchoverReport report = switchover_report({sim_run, sim_run, silicon_run}, kNodes);
  const GateStatus& correctness = gate(report, "mlp-bf16", "correctness");
  CHECK(correctness.evidence.at(Backend::sim) == 2);
  CHECK(correctness.evidence.at(Backend::silicon) == 1);
  const GateStatus& performance = gate(report, "mlp-bf16", "performance");
  CHECK(performance.evidence.at(Backend::sim) == 10);  // the same samples twice count once
  CHECK(performance.evidence.at(Backend::silicon) == 10);
  CHECK_FALSE(performance.calibrated);  // the simulator's 20 samples do not measure silicon's noise
  CHECK(report.results_by_current_driver == 0);

  // The same result recorded before backends were kept: its node's driver now stands in, and the
  // report says how many results it attributed that way.
  sim_run["models"][0].erase("node_backends");
  report = switchover_report({sim_run, silicon_run}, kNodes);
  CHECK(gate(report, "mlp-bf16", "correctness").evidence.at(Backend::silicon) == 2);
  CHECK(report.results_by_current_driver == 1);
  CHECK(to_text(report).find("1 result recorded without a backend (before kiln kept it) is counted by its node's "
                             "driver now") != std::string::npos);
  CHECK(to_json(report)["results_by_current_driver"] == 1);

  // A recorded node without a backend (its driver was not known, or a gang across backends)
  // counts for none, rather than for the driver it has now.
  sim_run["models"][0]["node_backends"] = json::object();
  report = switchover_report({sim_run}, kNodes);
  CHECK(report.gates.empty());
}

TEST_CASE("a rerun's identical samples of one seed count once; another seed's are new evidence") {
  // A nightly's result on silicon, and the same measure job rerun: the same seed, the very same
  // samples (as a deterministic measurement gives them).
  json first = run_with("mlp-bf16", {"s01"}, "passed", samples(500, 0.02));
  first["models"][0]["measure_job"] = {{"job_id", 11}, {"submission", {{"seed", 7}}}};
  json rerun = first;
  rerun["models"][0]["measure_job"]["job_id"] = 12;
  SwitchoverReport report = switchover_report({first, rerun}, kNodes, with_models({"mlp-bf16"}));
  const GateStatus& repeated = gate(report, "mlp-bf16", "performance");
  CHECK(repeated.evidence.at(Backend::silicon) == 10);
  CHECK_FALSE(repeated.calibrated);  // 10 of 20: the rerun did not make it 20
  CHECK(report.repeated_samples == 10);
  CHECK(to_json(report)["repeated_samples"] == 10);
  CHECK(to_text(report).find("10 baseline samples left out") != std::string::npos);
  CHECK_FALSE(report.ready);

  // The same numbers under another seed are another measurement.
  json other_seed = first;
  other_seed["models"][0]["measure_job"]["submission"]["seed"] = 8;
  report = switchover_report({first, rerun, other_seed}, kNodes, with_models({"mlp-bf16"}));
  CHECK(gate(report, "mlp-bf16", "performance").evidence.at(Backend::silicon) == 20);
  CHECK(gate(report, "mlp-bf16", "performance").calibrated);
  CHECK(report.ready);
}

TEST_CASE("readiness counts every gate of the model set, not only the models that ran") {
  // mlp-bf16 is calibrated on silicon; train-tiny never ran anywhere.
  const std::vector<json> runs = {run_with("mlp-bf16", {"s01"}, "passed", samples(500, 0.02)),
                                  run_with("mlp-bf16", {"s02"}, "passed", samples(600, 0.02))};
  SwitchoverReport report = switchover_report(runs, kNodes);
  CHECK(report.calibrated == 2);
  CHECK_FALSE(report.model_set_known);
  CHECK_FALSE(report.ready);  // without the set, readiness cannot be judged
  CHECK(to_text(report).find("give --register or --models") != std::string::npos);

  SwitchoverOptions options = with_models({"mlp-bf16", "train-tiny"});
  options.revisions = {"a", "b"};
  report = switchover_report(runs, kNodes, options);
  CHECK(report.model_set_known);
  // Both models on both revisions: 8 gates, of which mlp-bf16's two on revision a are calibrated.
  CHECK(report.gates.size() == 8);
  CHECK(report.calibrated == 2);
  CHECK(report.never_run == 6);
  CHECK_FALSE(report.ready);
  const GateStatus& never = gate(report, "train-tiny", "correctness");
  CHECK(never.never_run);
  CHECK(never.remaining.find("never run") != std::string::npos);
  CHECK(to_text(report).find("NOT READY: 6 of 8 gates of the model set still rely on the simulator (6 never run)") !=
        std::string::npos);
  CHECK(to_json(report)["never_run"] == 6);
}

}  // namespace kiln::backends

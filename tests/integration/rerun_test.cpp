// kiln rerun and the nightly's reproducibility sample, with the real binaries: a nightly's measure
// job rerun from its recorded bundle, config and seed reproduces; one whose rerun lands on chips
// that corrupt outputs does not; what cannot be rerun is refused before anything is submitted;
// and a later nightly reruns earlier results and reports them in `kiln run`. The same nightly
// feeds `kiln switchover`: its gates, measured on the simulated chip only, rest on the simulator.
#include <doctest/doctest.h>

#include <algorithm>

#include <nlohmann/json.hpp>

#include "tests/integration/documented_fields.h"
#include "tests/integration/qualification_fleet.h"
#include "tests/integration/run_command.h"

using namespace kiln::testing;
using namespace std::chrono_literals;

namespace {

// The measure job of each model of a recorded run, by model.
std::map<std::string, std::uint64_t> measure_jobs(Fleet& fleet, const std::string& run_id) {
  std::string out;
  std::string err;
  REQUIRE(fleet.kiln_split("ci", {"run", run_id, "--json"}, &out, &err) == 0);
  const auto report = nlohmann::json::parse(out);
  std::map<std::string, std::uint64_t> jobs;
  for (const auto& model : report.at("models")) {
    if (model.at("measure_job").is_null()) continue;
    jobs[model.at("model").get<std::string>()] = model.at("measure_job").at("job_id").get<std::uint64_t>();
  }
  return jobs;
}

}  // namespace

TEST_CASE("kiln rerun: a nightly's measure job reproduces; on corrupting chips it does not; a later nightly reruns a sample") {
  Fleet fleet("rerun");
  fleet.add_key("dev", "developer");
  start_two_nodes(fleet, {{"model_set", "\"one-node.toml\""}, {"reproducibility_sample", "2"}});
  const std::string set(kModelSet);
  write(fleet.dir() / "one-node.toml", set.substr(0, set.find("[[model]]\nname = \"mlp-fp8-wide\"")));
  fleet.start_qualifier("qualifier");
  // k2 changes nothing the sim measures: the nightly passes. 30 repeats a side (the fixed rule's
  // first measurement) bound the comparison's interval well inside 2% at the sim's 1% noise.
  const std::string candidate = prepare_bundles(fleet, "k2");
  std::string out;
  REQUIRE(fleet.kiln("ci", {"nightly", "--bundle", candidate, "--wait", "--run-id", "nightly-r1", "--repeats", "30", "--perf-rule", "fixed",
                            "--no-accept"},
                     &out, 240s) == 0);
  const auto jobs = measure_jobs(fleet, "nightly-r1");
  REQUIRE(jobs.size() == 2);

  // Before silicon: the nightly measured on the simulated chip, so every gate still relies on it,
  // and the switch-over report says what remains (docs/qualification.md).
  std::string switchover_err;
  CHECK(fleet.kiln_split("ci", {"switchover", "--json"}, &out, &switchover_err) == 1);
  const auto switchover = nlohmann::json::parse(out);
  CHECK(difference(switchover, documented_fields("switchover")) == "");
  CHECK(switchover.at("ready") == false);
  CHECK(switchover.at("calibrated") == 0);
  // The nightly recorded each result's backend as it read it: none is read from a driver now.
  CHECK(switchover.at("results_by_current_driver") == 0);
  int mlp_gates = 0;
  for (const auto& g : switchover.at("gates")) {
    if (g.at("model") != "mlp-bf16-it") continue;
    ++mlp_gates;
    CHECK(g.at("calibrated_on_silicon") == false);
    CHECK(g.at("evidence").at("silicon") == 0);
    CHECK(g.at("evidence").at("sim").get<int>() > 0);
    CHECK(contains(g.at("remaining").get<std::string>(), "on silicon"));
  }
  CHECK(mlp_gates == 2);
  // Without the model set readiness cannot be judged; with it, every gate of the set counts.
  CHECK(switchover.at("model_set_known") == false);
  const std::string models = (fleet.dir() / "one-node.toml").string();
  CHECK(fleet.kiln_split("ci", {"switchover", "--models", models, "--json"}, &out, &switchover_err) == 1);
  const auto of_set = nlohmann::json::parse(out);
  CHECK(of_set.at("model_set_known") == true);
  CHECK(of_set.at("never_run") == 0);
  CHECK(of_set.at("gates").size() == 4);  // two models, two gates, revision a
  // The simulated nodes' drivers declare what they drive, whatever their version string says.
  std::string nodes_out;
  REQUIRE(fleet.kiln_split("ci", {"nodes", "--json"}, &nodes_out, &switchover_err) == 0);
  for (const auto& node : nlohmann::json::parse(nodes_out)) {
    const auto labels = node.at("labels").get<std::vector<std::string>>();
    CHECK(std::find(labels.begin(), labels.end(), "backend=sim") != labels.end());
  }
  const auto sim_samples_of = [](const nlohmann::json& report) {
    for (const auto& g : report.at("gates")) {
      if (g.at("model") == "mlp-bf16-it" && g.at("gate") == "performance") return g.at("evidence").at("sim").get<int>();
    }
    return -1;
  };
  const int samples_after_one = sim_samples_of(of_set);
  REQUIRE(samples_after_one > 0);
  const std::string job = std::to_string(jobs.at("mlp-bf16-it"));
  // The first nightly had nothing earlier to rerun.
  CHECK(contains(fleet.log_of("qualifier"), "reproducibility: no earlier result"));

  // The same job again, on either node of revision a: correct both times, the same throughput.
  int code = fleet.kiln("ci", {"rerun", job}, &out, 120s);
  INFO(out);
  CHECK(code == 0);
  CHECK(contains(out, "job " + job + ": mlp-bf16-it on revision a (run nightly-r1), rerun as job "));
  // On its original's chip the sim gives the very same numbers; on another, the same within 2%.
  CHECK(contains(out, "\nreproduced: correct both times; "));
  const std::string rerun_job = first_word_after(out, "rerun as job ");

  // What cannot be rerun is refused, saying what to do, and nothing is submitted.
  CHECK(fleet.kiln("ci", {"rerun", "999999"}, &out) == 5);
  CHECK(contains(out, "999999"));
  CHECK(fleet.kiln("dev", {"rerun", job}, &out) == 3);
  CHECK(contains(out, "ran in the nightly class, which your role (developer) may not submit"));
  REQUIRE(fleet.kiln("ci", {"submit", "--workload", "sleep", "--class", "nightly", "--", "3"}, &out) == 0);
  const std::string sleeping = first_word_after(out, "job ");
  CHECK(fleet.kiln("ci", {"rerun", sleeping}, &out) == 2);
  CHECK(contains(out, "job " + sleeping + " is still"));
  CHECK(contains(out, "`kiln result " + sleeping + " --wait`"));
  REQUIRE(fleet.kiln("ci", {"result", sleeping, "--wait"}, &out, 30s) == 0);

  // Any job that ended is rerun as the coordinator accepted it. One with no kiln result is held
  // to its outcome: the same exit, the same result document.
  CHECK(fleet.kiln("ci", {"rerun", sleeping}, &out, 60s) == 0);
  CHECK(contains(out, "job " + sleeping + ": sleep on revision a, rerun as job "));
  CHECK(contains(out, "reproduced: both succeeded with exit code 0, with the very same result document (none)"));
  REQUIRE(fleet.kiln("ci", {"submit", "--workload", "shell", "--class", "nightly", "--", "-c", "exit 3"}, &out) == 0);
  const std::string failing = first_word_after(out, "job ");
  REQUIRE(fleet.kiln("ci", {"result", failing, "--wait"}, &out, 30s) == 1);
  CHECK(fleet.kiln("ci", {"rerun", failing}, &out, 60s) == 0);
  CHECK(contains(out, "reproduced: both failed with exit code 3"));
  // The result document is the workload's own: when it differs, kiln cannot judge it.
  REQUIRE(fleet.kiln("ci", {"submit", "--workload", "shell", "--class", "nightly", "--", "-c",
                            "date +%s%N > \"$KILN_RESULT_FILE\""},
                     &out) == 0);
  const std::string clock = first_word_after(out, "job ");
  REQUIRE(fleet.kiln("ci", {"result", clock, "--wait"}, &out, 30s) == 0);
  CHECK(fleet.kiln("ci", {"rerun", clock}, &out, 60s) == 6);
  CHECK(contains(out, "inconclusive: both succeeded with exit code 0, but their result documents differ"));
  // A rerun of a measure job is a job too: its kiln result is judged by the qualification's gates.
  CHECK(fleet.kiln("ci", {"rerun", rerun_job}, &out, 120s) == 0);
  CHECK(contains(out, "reproduced: correct both times"));

  // The next nightly reruns both measure jobs of the first and reports them; they do not change its verdict.
  REQUIRE(fleet.kiln("ci", {"nightly", "--bundle", candidate, "--wait", "--run-id", "nightly-r2", "--repeats", "30", "--perf-rule", "fixed",
                            "--no-accept"},
                     &out, 240s) == 0);
  REQUIRE(fleet.kiln("ci", {"run", "nightly-r2"}, &out) == 0);
  CHECK(contains(out, "reproducibility: 2 earlier results rerun: 2 reproduced"));
  CHECK(contains(out, "job " + job + " (mlp-bf16-it on revision a, run nightly-r1) rerun as job "));
  // The second nightly's baseline samples of the same seed count only where they differ from the
  // first's: what repeats exactly is left out, and said.
  CHECK(fleet.kiln_split("ci", {"switchover", "--models", models, "--json"}, &out, &switchover_err) == 1);
  const auto after_two = nlohmann::json::parse(out);
  CHECK(sim_samples_of(after_two) + after_two.at("repeated_samples").get<int>() >= 2 * samples_after_one);
  std::string err;
  REQUIRE(fleet.kiln_split("ci", {"run", "nightly-r2", "--json"}, &out, &err) == 0);
  const auto report = nlohmann::json::parse(out);
  CHECK(report.at("reproducibility").at("counts").at("reproduced") == 2);
  CHECK(report.at("reproducibility").at("jobs").size() == 2);
  CHECK(difference(report, documented_fields("runs`, `run ID")) == "");

  // Silent data corruption on every chip of both nodes: the rerun's outputs are wrong where the
  // original's were right.
  for (const char* node : {"n01", "n02"}) {
    for (int chip = 0; chip < 8; ++chip) {
      REQUIRE(fleet.sim_chip(node, {"inject", "--chip", std::to_string(chip), "--fault", "sdc", "--factor", "0.05"}) == 0);
    }
  }
  code = fleet.kiln_split("ci", {"rerun", job, "--json"}, &out, &err, 120s);
  INFO(err);
  CHECK(code == 1);
  const auto verdict = nlohmann::json::parse(out);
  CHECK(verdict.at("verdict") == "not_reproduced");
  CHECK(verdict.at("gate") == "correctness");
  CHECK(verdict.at("job_id") == jobs.at("mlp-bf16-it"));
  CHECK(difference(verdict, documented_fields("rerun JOB")) == "");
}

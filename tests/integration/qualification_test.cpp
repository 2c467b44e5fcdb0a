// Qualification end to end with the real binaries: changes and bundles recorded on the
// coordinator, runs asked of kiln-qualifier, a presubmit smoke that passes, and a nightly that
// catches a slowdown and a broken kernel, bisects each to its change and files one ticket per
// culprit, with the CI verdict as exit code and JUnit XML.
#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "tests/integration/documented_fields.h"
#include "tests/integration/fleet_fixture.h"
#include "tests/integration/qualification_fleet.h"
#include "tests/integration/qualification_samples.h"
#include "tests/integration/run_command.h"

using namespace kiln::testing;
using namespace std::chrono_literals;
namespace fs = std::filesystem;


TEST_CASE("a nightly catches a slowdown and a broken kernel, bisects both and tickets each owner once") {
  Fleet fleet("qualification");
  start_two_nodes(fleet);
  fleet.start_qualifier("qualifier");
  const fs::path dir = fleet.dir();
  std::string out;
  REQUIRE(fleet.kiln("ci", {"change", "import", (dir / "history.toml").string()}, &out) == 0);
  CHECK(out.find("recorded 6 changes") != std::string::npos);
  REQUIRE(fleet.kiln("ci", {"bundle", "build", "--at", "k1", "--rev", "a", "--bundle-dir", (dir / "bundles").string()},
                     &out) == 0);
  const std::string baseline = first_word_after(out, "bundle ");
  REQUIRE(baseline.size() == 64);
  REQUIRE(fleet.kiln("ci", {"bundle", "accept", baseline.substr(0, 10)}, &out) == 0);
  REQUIRE(fleet.kiln("ci", {"bundle", "build", "--at", "k2", "--rev", "a", "--bundle-dir", (dir / "bundles").string()},
                     &out) == 0);
  const std::string presubmit = first_word_after(out, "bundle ");
  REQUIRE(fleet.kiln("ci", {"bundle", "build", "--rev", "a", "--bundle-dir", (dir / "bundles").string()}, &out) == 0);
  const std::string candidate = first_word_after(out, "bundle ");
  REQUIRE(candidate.size() == 64);

  // The presubmit smoke of k2 (gelu) passes: exit 0 and JUnit without failures.
  const int smoke = fleet.kiln("ci", {"smoke", "--bundle", presubmit, "--wait", "--junit", (dir / "smoke.xml").string()},
                               &out, 240s);
  INFO(out);
  CHECK(smoke == 0);
  CHECK(read(dir / "smoke.xml").find("failures=\"0\"") != std::string::npos);

  // A nightly of that bundle passes and makes it the baseline.
  const int passing = fleet.kiln("ci", {"nightly", "--bundle", presubmit, "--wait", "--run-id", "nightly-ok"}, &out, 240s);
  INFO(out);
  CHECK(passing == 0);
  // The 16-chip model ran on both nodes at once, in a lease of the two.
  REQUIRE(fleet.kiln("ci", {"run", "nightly-ok", "--json"}, &out) == 0);
  std::vector<std::uint64_t> wide_ranks;
  const auto passing_run = nlohmann::json::parse(out);
  for (const auto& model : passing_run.at("models")) {
    if (model.at("model") != "mlp-fp8-wide") continue;
    CHECK(model.at("verdict") == "passed");
    const auto nodes = model.at("nodes").dump();
    CHECK(nodes.find("n01") != std::string::npos);
    CHECK(nodes.find("n02") != std::string::npos);
    CHECK(model.at("measure_job").at("nodes") == 2);
    wide_ranks = model.at("measure_job").at("rank_job_ids").get<std::vector<std::uint64_t>>();
  }
  REQUIRE(wide_ranks.size() == 2);
  // Its measurement reruns the same way, from either rank's job id: a lease of both nodes, the
  // ranks in it, their samples added up and judged by the same gates.
  std::string err;
  const int rerun = fleet.kiln_split("ci", {"rerun", std::to_string(wide_ranks[1]), "--json"}, &out, &err, 180s);
  INFO(err);
  REQUIRE(rerun == 0);
  const auto reproduced = nlohmann::json::parse(out);
  CHECK(reproduced.at("verdict") == "reproduced");
  CHECK(reproduced.at("job_id") == wide_ranks[1]);
  CHECK(reproduced.at("rerun_job_ids").size() == 2);
  CHECK(reproduced.at("node_id").get<std::string>().find('+') != std::string::npos);
  CHECK(err.find("whole nodes of revision a for the rerun of job " + std::to_string(wide_ranks[1])) != std::string::npos);
  REQUIRE(fleet.kiln("ci", {"bundles", "--json"}, &out) == 0);
  CHECK(nlohmann::json::parse(out).at("baselines").at("a").at("bundle_id") == presubmit);

  // A change recorded after the bundles were built, with the earliest merge time (a late import):
  // the history only grows at its end, so it goes last and no bundle's changes move under it.
  REQUIRE(fleet.kiln("ci", {"change", "add", "--id", "k9", "--layer", "runtime", "--owner", "runtime-team",
                            "--merged-at-ms", "1"},
                     &out) == 0);
  REQUIRE(fleet.kiln("ci", {"changes", "--json"}, &out) == 0);
  CHECK(nlohmann::json::parse(out).back().at("id") == "k9");

  // The next nightly fails: both regressions, each bisected to its change, one ticket per culprit.
  const int nightly = fleet.kiln("ci", {"nightly", "--bundle", candidate, "--wait", "--run-id", "nightly-it", "--junit",
                                       (dir / "nightly.xml").string()},
                                 &out, 480s);
  INFO(out);
  CHECK(nightly == 1);
  const std::string junit = read(dir / "nightly.xml");
  CHECK(junit.find("mlp-bf16-it") != std::string::npos);
  CHECK(junit.find("<failure") != std::string::npos);
  CHECK(junit.find("<skipped") == std::string::npos);
  CHECK(junit.find("mlp-fp8-wide") != std::string::npos);

  REQUIRE(fleet.kiln("ci", {"tickets", "--json"}, &out) == 0);
  const auto tickets = nlohmann::json::parse(out);
  std::map<std::string, std::string> team_of;
  for (const auto& ticket : tickets) team_of[ticket.at("culprit").get<std::string>()] = ticket.at("team");
  CHECK(team_of.size() == 2);
  CHECK(team_of["k3"] == "compiler-team");
  CHECK(team_of["k5"] == "kernels-team");

  // The same command again follows the same run: its verdict again, nothing measured twice.
  const int again = fleet.kiln("ci", {"nightly", "--bundle", candidate, "--wait", "--run-id", "nightly-it"}, &out, 60s);
  INFO(out);
  CHECK(again == 1);
  REQUIRE(fleet.kiln("ci", {"jobs", "--limit", "1000", "--json"}, &out) == 0);
  std::map<std::string, int> measured;
  for (const auto& job : nlohmann::json::parse(out)) {
    if (job.at("state") == "succeeded" && !job.at("config_hash").get<std::string>().empty()) {
      ++measured[job.at("config_hash").get<std::string>()];
    }
  }
  CHECK(!measured.empty());
  for (const auto& [hash, count] : measured) CHECK_MESSAGE(count == 1, hash);
  REQUIRE(fleet.kiln("ci", {"tickets", "--json"}, &out) == 0);
  CHECK(nlohmann::json::parse(out).size() == 2);

  // The run is recorded on the coordinator, and the failing bundle did not become the baseline.
  REQUIRE(fleet.kiln("ci", {"run", "nightly-it", "--json"}, &out) == 1);
  const auto failed_run = nlohmann::json::parse(out);
  CHECK(failed_run.at("passed") == false);
  // Every bisection kept within the rounds docs/qualification.md states: ceil(log_{k+1}(n)), plus
  // one per round with an inconclusive answer.
  std::size_t bisected = 0;
  for (const auto& model : failed_run.at("models")) {
    if (model.at("bisection").is_null()) continue;
    ++bisected;
    const auto& bisection = model.at("bisection");
    CHECK(bisection.at("rounds").get<std::size_t>() <= bisection.at("round_bound").get<std::size_t>());
  }
  CHECK(bisected >= 3);
  REQUIRE(fleet.kiln("ci", {"bundles", "--json"}, &out) == 0);
  const auto bundles = nlohmann::json::parse(out);
  CHECK(bundles.at("baselines").at("a").at("bundle_id") == presubmit);

  // What docs/cli.md lists of these commands' JSON is what they print.
  auto bundle_and_baseline = bundles.at("bundles").at(0);
  bundle_and_baseline.update(bundles.at("baselines").at("a"));
  CHECK(difference(bundle_and_baseline, documented_fields("bundles")) == "");
  REQUIRE(fleet.kiln("ci", {"changes", "--json"}, &out) == 0);
  for (const auto& change : nlohmann::json::parse(out)) CHECK(difference(change, documented_fields("changes")) == "");
  REQUIRE(fleet.kiln("ci", {"runs", "--json"}, &out) == 0);
  const auto runs = nlohmann::json::parse(out);
  CHECK(runs.size() >= 3);
  for (const auto& run : runs) CHECK(difference(run, documented_fields("runs`, `run ID")) == "");
  // The latest only, saying there are more; --all reads every one.
  REQUIRE(fleet.kiln("ci", {"runs", "--last", "2"}, &out) == 0);
  CHECK(std::count(out.begin(), out.end(), '\n') == 4);  // the header, two runs, the note
  CHECK(contains(out, "(the latest 2 runs; --last N lists more, --all every one)"));
  CHECK(contains(out, runs.back().at("run_id").get<std::string>()));
  CHECK_FALSE(contains(out, runs.front().at("run_id").get<std::string>() + " "));
  REQUIRE(fleet.kiln("ci", {"runs", "--all", "--json"}, &out) == 0);
  CHECK(nlohmann::json::parse(out) == runs);
  // The same for bundles: the baseline, the presubmit's, the candidate and the probes' bundles.
  REQUIRE(fleet.kiln("ci", {"bundles", "--all", "--json"}, &out) == 0);
  const auto every_bundle = nlohmann::json::parse(out).at("bundles");
  REQUIRE(every_bundle.size() >= 3);
  CHECK(every_bundle == bundles.at("bundles"));
  REQUIRE(fleet.kiln("ci", {"bundles", "--last", "2"}, &out) == 0);
  CHECK(std::count(out.begin(), out.end(), '\n') == 4);  // the header, two bundles, the note
  CHECK(contains(out, "(the latest 2 bundles; --last N lists more, --all every one)"));
  CHECK(contains(out, every_bundle.back().at("id").get<std::string>().substr(0, 12)));
  CHECK_FALSE(contains(out, every_bundle.front().at("id").get<std::string>().substr(0, 12)));
  CHECK(difference(tickets.at(0), documented_fields("tickets")) == "");

  // kiln plan reads these records: every model the runs measured has its measured cost, and the
  // models that failed a run have more risk (docs/strategy.md).
  std::set<std::string> models, failed, failing;
  for (const auto& run : runs) {
    for (const auto& model : run.at("models")) {
      if (model.at("fails_run").get<bool>()) failed.insert(model.at("model").get<std::string>());
      if (!model.at("measure_job").is_null()) models.insert(model.at("model").get<std::string>());
    }
  }
  for (const std::string& model : failed) {
    if (models.contains(model)) failing.insert(model);
  }
  REQUIRE_FALSE(failing.empty());
  std::string values;
  for (const std::string& model : models) values += (values.empty() ? "\"" : ", \"") + model + "\"";
  std::ofstream(dir / "matrix.toml") << "records_factor = \"model\"\n[[factor]]\nname = \"model\"\nvalues = [" << values
                                     << "]\n[[factor]]\nname = \"env\"\nvalues = [\"bare-metal\", \"kubernetes\"]\n";
  std::string plan_out, plan_err;
  REQUIRE(fleet.kiln_split("ci", {"plan", "--matrix", (dir / "matrix.toml").string(), "--budget-chip-hours", "1000",
                                  "--json"},
                           &plan_out, &plan_err) == 0);
  INFO(plan_err);
  CHECK(contains(plan_err, "measured chip-hours for " + std::to_string(models.size()) + " of " +
                               std::to_string(models.size()) + " values of 'model'"));
  CHECK(contains(plan_err, std::to_string(failing.size()) + " of them failed in the last 7d"));
  const auto plan = nlohmann::json::parse(plan_out);
  CHECK(plan.at("pairs_covered") == plan.at("pairs_total"));
  for (const auto& cell : plan.at("cells")) {
    if (failing.contains(cell.at("values").at("model").get<std::string>())) CHECK(cell.at("risk").get<double>() > 2.0);
  }
  CHECK(difference(plan, documented_fields("plan")) == "");
}

TEST_CASE("a model that fails on one node only quarantines that node and tickets the lab, without bisecting; a "
          "correct rerun of the failing job there returns it") {
  Fleet fleet("qualification-hw");
  // A hardware risk gates the model's correctness in the smoke: the lab's ticket is its page,
  // and the hardware team is not paged a second time beside it.
  write(fleet.dir() / "risks.toml", hardware_risk_register("mlp-bf16-it", "presubmit"));
  start_two_nodes(fleet, {{"risk_register", "\"risks.toml\""}});
  fleet.start_qualifier("qualifier");
  const fs::path dir = fleet.dir();
  std::string out;
  // Silent data corruption on every chip of n01: health probes do not see it, the outputs do.
  for (int chip = 0; chip < 8; ++chip) {
    REQUIRE(fleet.sim_chip("n01", {"inject", "--chip", std::to_string(chip), "--fault", "sdc", "--factor", "0.05"}) == 0);
  }
  REQUIRE(fleet.kiln("ci", {"change", "import", (dir / "history.toml").string()}, &out) == 0);
  REQUIRE(fleet.kiln("ci", {"bundle", "build", "--at", "k2", "--rev", "a", "--bundle-dir", (dir / "bundles").string()},
                     &out) == 0);
  const std::string bundle = first_word_after(out, "bundle ");
  // n02 is busy for a few seconds, so the smoke's measure jobs start on n01; they fail there, and
  // their reruns on n02 (once it is free) pass.
  REQUIRE(fleet.kiln("ci", {"submit", "--workload", "sleep", "--chips", "8", "--node", "n02", "--class", "nightly",
                            "--", "4"},
                     &out) == 0);
  REQUIRE(Fleet::eventually([&] { return fleet.kiln("ci", {"jobs", "--active"}, &out) == 0 &&
                                         out.find("running") != std::string::npos; },
                            20s));
  // The smoke of k2 (gelu) selects both models.
  const int smoke = fleet.kiln("ci", {"smoke", "--bundle", bundle, "--wait", "--run-id", "smoke-hw"}, &out, 240s);
  INFO(out);
  CHECK(smoke == 1);
  CHECK(out.find("hardware_suspect") != std::string::npos);
  CHECK(fleet.log_of("qualifier").find("bisect") == std::string::npos);
  REQUIRE(fleet.kiln("ci", {"tickets", "--json"}, &out) == 0);
  const auto tickets = nlohmann::json::parse(out);
  REQUIRE(tickets.size() == 1);
  CHECK(tickets[0].at("kind") == "hardware_suspect");
  CHECK(tickets[0].at("team") == "lab");
  CHECK(tickets[0].at("culprit") == "node:n01");
  REQUIRE(fleet.kiln("ci", {"risks", "--register", (dir / "risks.toml").string(), "--json"}, &out) <= 1);
  const auto latest = nlohmann::json::parse(out).at("risks")[0].at("latest");
  CHECK(latest.at("verdict") == "failed");
  CHECK(latest.at("paged") ==
        nlohmann::json{{"team", "lab"}, {"ticket", tickets[0].at("id")}, {"by_triage", true}});
  CHECK(fleet.log_of("qualifier").find("paged lab through the run's ticket " + tickets[0].at("id").get<std::string>()) !=
        std::string::npos);
  REQUIRE(fleet.kiln("ci", {"nodes", "--json"}, &out) == 0);
  std::uint64_t failing_job = 0;
  for (const auto& node : nlohmann::json::parse(out)) {
    CHECK(node.at("state") == (node.at("node_id") == "n01" ? "quarantined" : "up"));
    if (node.at("node_id") == "n01") failing_job = node.value("wrong_results_job_id", std::uint64_t{0});
  }
  // The quarantine names the job whose outputs were wrong: one that ran on n01.
  REQUIRE(failing_job != 0);
  // Its exit code is how the job ended: 1, failed on its wrong outputs.
  REQUIRE(fleet.kiln("ci", {"result", std::to_string(failing_job), "--json"}, &out) <= 1);
  CHECK(nlohmann::json::parse(out).at("job").at("node_id") == "n01");

  // The quarantined node takes no work: nightly work goes to n02, and work pinned to n01 waits.
  REQUIRE(fleet.kiln("ci", {"submit", "--workload", "sleep", "--chips", "8", "--class", "nightly", "--wait", "--", "0"},
                     &out) == 0);
  CHECK(contains(out, "n02"));
  REQUIRE(fleet.kiln("ci", {"submit", "--workload", "sleep", "--node", "n01", "--class", "nightly", "--json", "--",
                            "0"},
                     &out) == 0);
  const std::string pinned = std::to_string(nlohmann::json::parse(out).at("job_id").get<std::uint64_t>());

  // With the fault still there, the rerun's outputs are wrong again: n01 stays quarantined.
  std::string err;
  CHECK(fleet.kiln_split("ci", {"recheck", "n01"}, &out, &err, 120s) == 1);
  INFO(out, err);
  CHECK(contains(out, "its outputs were wrong again"));
  CHECK(contains(out, "node n01 is quarantined"));
  REQUIRE(fleet.kiln("ci", {"result", pinned, "--json"}, &out) == 0);
  CHECK(nlohmann::json::parse(out).at("job").at("state") == "queued");

  // The lab replaced the board: the same job, rerun on the same chips, is correct and n01 returns.
  REQUIRE(fleet.sim_chip("n01", {"clear"}) == 0);
  CHECK(fleet.kiln_split("ci", {"recheck", "n01", "--json"}, &out, &err, 120s) == 0);
  const auto recheck = nlohmann::json::parse(out);
  CHECK(recheck.at("released") == true);
  CHECK(recheck.at("node_state") == "up");
  CHECK(contains(recheck.at("detail").get<std::string>(), "node n01 leaves quarantine"));
  // The work pinned to n01 runs there now.
  CHECK(Fleet::eventually([&] { return fleet.kiln("ci", {"result", pinned, "--json"}, &out) == 0 &&
                                       nlohmann::json::parse(out).at("job").at("state") == "succeeded"; },
                          60s));
}

TEST_CASE("a nightly builds its bisection bundles with the configured builder and checks the set against the catalog") {
  Fleet fleet("qualification-builder");
  start_two_nodes(fleet, {{"model_set", "\"fp8.toml\""}, {"builder", "\"builder.sh\""}, {"builder_args", "[\"{change}\"]"}});
  const fs::path dir = fleet.dir();
  const fs::path builder = dir / "builder.sh";
  std::string out;
  REQUIRE(fleet.kiln("ci", {"change", "import", (dir / "history.toml").string()}, &out) == 0);
  REQUIRE(fleet.kiln("ci", {"bundle", "build", "--at", "k1", "--rev", "a", "--bundle-dir", (dir / "bundles").string()},
                     &out) == 0);
  REQUIRE(fleet.kiln("ci", {"bundle", "accept", first_word_after(out, "bundle ")}, &out) == 0);
  REQUIRE(fleet.kiln("ci", {"bundle", "build", "--at", "k3", "--rev", "a", "--bundle-dir", (dir / "bundles").string()},
                     &out) == 0);
  const std::string candidate = first_word_after(out, "bundle ");
  // A second model of the mlp-fp8 workload, owned by another team: both regress from k3.
  write(dir / "fp8.toml", std::string(kModelSet).substr(0, std::string(kModelSet).find("[[model]]\nname = \"mlp-fp8-wide\"")) +
                              "[[model]]\nname = \"mlp-fp8-ranker\"\nsize_class = \"small\"\nchips = 1\nminutes = 1\n"
                              "components = [\"gemm-fp8\", \"quantize-fp8\", \"gelu\"]\nowner_team = \"ranking-models\"\n"
                              "workload = \"mlp-fp8\"\nseed = 6\n");

  // A catalog of the fleet's workloads without the set's: the qualifier refuses to start.
  write(dir / "catalog.json", R"({"models": [{"name": "llama-70b", "components": ["gemm-bf16"]}]})");
  fleet.add_qualifier("checked", {{"model_set", "\"fp8.toml\""}, {"workload_catalog", "\"catalog.json\""}});
  const Ran checked = run(bin("kiln-qualifier") + " --config " + fleet.qualifier_config("checked").string() +
                          " check-config");
  CHECK(checked.status == 2);
  CHECK(contains(checked.output, "workload 'mlp-bf16' is not in the workload catalog"));

  // k3 slows mlp-fp8 by 10%: both of its models regress, and share one bisection between k1 and
  // k3. It needs the bundle at k2, which the configured builder (one that records its call and
  // fails) cannot make: the bisection cannot pin the culprit down, and each model's owner gets a
  // ticket with the range. The sim builder would have built it and found k3.
  write(builder, "#!/bin/sh\necho \"$1\" >> " + (dir / "builder-calls").string() + "\necho 'no compiler here' >&2\nexit 3\n");
  fs::permissions(builder, fs::perms::owner_all);
  fleet.start_qualifier("qualifier");
  const int nightly = fleet.kiln("ci", {"nightly", "--bundle", candidate, "--wait", "--no-accept"}, &out, 240s);
  INFO(out);
  CHECK(nightly == 1);
  const std::string log = fleet.log_of("qualifier");
  CHECK(log.find("could not build the bundle at change k2") != std::string::npos);
  CHECK(read(dir / "builder-calls") == "k2\n");
  std::size_t bisections = 0;
  for (auto at = log.find("bisecting over 2 changes"); at != std::string::npos; at = log.find("bisecting over 2 changes", at + 1)) {
    ++bisections;
  }
  CHECK(bisections == 1);
  CHECK(contains(out, "the bisection could not pin the culprit down: suspects k2, k3, ticketed to recsys-models"));
  CHECK(contains(out, "the bisection could not pin the culprit down: suspects k2, k3, ticketed to ranking-models"));
  REQUIRE(fleet.kiln("ci", {"tickets", "--json"}, &out) == 0);
  std::map<std::string, std::string> culprit_of_team;
  for (const auto& ticket : nlohmann::json::parse(out)) {
    CHECK(ticket.at("kind") == "performance_regression");
    culprit_of_team[ticket.at("team").get<std::string>()] = ticket.at("culprit").get<std::string>();
  }
  CHECK(culprit_of_team == std::map<std::string, std::string>{{"recsys-models", "range:mlp-fp8-it:k2..k3"},
                                                              {"ranking-models", "range:mlp-fp8-ranker:k2..k3"}});
}

TEST_CASE("a node whose eight chips run at half speed passes its nightly, and the fleet check sends it to diagnostics") {
  Fleet fleet("qualification-slow-node");
  fleet.add_key("lab1", "lab");
  start_nodes(fleet, 4);
  // Every chip of n03 at half speed: its health probes read telemetry only, and each of its
  // comparisons of a candidate with a baseline is made on its own chips.
  for (int chip = 0; chip < 8; ++chip) {
    REQUIRE(fleet.sim_chip("n03", {"inject", "--chip", std::to_string(chip), "--fault", "slow", "--factor", "0.5"}) == 0);
  }
  const std::string bundle = prepare_bundles(fleet, "k2");
  fleet.start_qualifier("qualifier");
  std::string out;
  const int nightly = fleet.kiln("ci", {"nightly", "--bundle", bundle, "--wait", "--run-id", "nightly-slow-node"}, &out,
                                 480s);
  INFO(out);
  CHECK(nightly == 0);  // the bundle is fine: the slow node is the fleet's problem, not the bundle's
  INFO(fleet.log_of("qualifier"));

  REQUIRE(fleet.kiln("ci", {"run", "nightly-slow-node", "--json"}, &out) == 0);
  const auto run = nlohmann::json::parse(out);
  const auto& check = run.at("fleet_check");
  // The two cheapest models, each on all four nodes, on the candidate and the baseline.
  CHECK(check.at("models").size() == 2);
  CHECK(check.at("job_ids").size() == 8);
  CHECK(check.at("pairs_judged") == 4);
  CHECK(check.at("nodes_compared") == 4);
  REQUIRE(check.at("slow_nodes").size() == 1);
  const auto& slow = check.at("slow_nodes").at(0);
  CHECK(slow.at("node_id") == "n03");
  CHECK(slow.at("effect").get<double>() < -0.3);
  CHECK(slow.at("models_judged") == 2);
  for (const auto& evidence : slow.at("evidence")) {
    CHECK(evidence.at("node_median").get<double>() < 0.7 * evidence.at("fleet_median").get<double>());
    CHECK(evidence.at("fleet_nodes") == 3);
  }
  CHECK(difference(run, documented_fields("runs`, `run ID")) == "");
  // `kiln run ID` says so.
  REQUIRE(fleet.kiln("ci", {"run", "nightly-slow-node"}, &out) == 0);
  CHECK(contains(out, "SLOW node n03 (revision a)"));
  CHECK(contains(out, "node n03 quarantined for the lab (diagnostics)"));

  // Out of service until its diagnostics pass, with the evidence as the reason; the others serve.
  REQUIRE(fleet.kiln("ci", {"nodes", "--json"}, &out) == 0);
  for (const auto& node : nlohmann::json::parse(out)) {
    if (node.at("node_id") != "n03") {
      CHECK(node.at("state") == "up");
      continue;
    }
    CHECK(node.at("state") == "quarantined");
    CHECK(node.at("quarantine_owner") == "lab");
    CHECK(contains(node.at("quarantine_reason").get<std::string>(), "fleet check of run nightly-slow-node: node n03"));
    CHECK(contains(node.at("quarantine_reason").get<std::string>(), "slower than the other nodes of its revision"));
  }
  REQUIRE(fleet.kiln("ci", {"tickets", "--json"}, &out) == 0);
  const auto tickets = nlohmann::json::parse(out);
  REQUIRE(tickets.size() == 1);
  CHECK(tickets[0].at("kind") == "hardware_suspect");
  CHECK(tickets[0].at("team") == "lab");
  CHECK(tickets[0].at("culprit") == "node:n03");
  // What the lab runs: diagnostics see the slow chips' bandwidth, and the node stays out.
  const int diag = fleet.kiln("lab1", {"diag", "n03", "--level", "2"}, &out, 180s);
  INFO(out);
  CHECK(diag == 1);
  REQUIRE(fleet.kiln("ci", {"nodes", "--json"}, &out) == 0);
  for (const auto& node : nlohmann::json::parse(out)) {
    if (node.at("node_id") == "n03") CHECK(node.at("state") == "quarantined");
  }
}

// The interview questions of the two problem statements, each played as a user would on a served
// fleet (real kiln-coordinator, kiln-agents on the simulated chip, kiln-qualifier, the kiln
// command, a git repository of environments), asserting the answer kiln gives from what a user
// sees. One test case per question, named by it; docs/qualification.md ("The interview
// questions, as tests") lists them. The qualification day (interview_fleets.h) is served once and
// shared; a question that needs a fleet of another shape starts its own, small one.
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <set>

#include <nlohmann/json.hpp>

#include "tests/integration/fleet_queries.h"
#include "tests/integration/interview_fleets.h"
#include "tests/integration/run_command.h"

using namespace kiln::testing;
using namespace std::chrono_literals;
using nlohmann::json;
namespace fs = std::filesystem;

// ---- seed 000: model qualification ----------------------------------------------------------------

TEST_CASE("interview: how do you decide whether a model is still correct after a compiler change?") {
  QualificationDay& day = qualification_day();
  // c04, a compiler change to the fp8 GEMM: its smoke judged the models it touches correct against
  // their golden references within tolerance, and passed.
  CHECK(day.smoke.at("passed") == true);
  const json& smoked = model_of(day.smoke, "mlp-fp8-small-01");
  CHECK(smoked.at("verdict") == "passed");
  // Correct is not bitwise equal: the outputs differ from the fp32 golden, within the format's tolerance.
  const json correctness = job_result(day.fleet, smoked.at("measure_job").at("job_id")).at("correctness");
  INFO(correctness.dump());
  CHECK(correctness.at("checked") == true);
  CHECK(correctness.at("passed") == true);
  for (const auto& output : correctness.at("outputs")) {
    CHECK(output.at("passed") == true);
    CHECK(output.at("report").at("max_abs_error").get<double>() > 0.0);
    CHECK(contains(output.at("summary").get<std::string>(), "within tolerance"));
  }

  // c12 keeps bf16 partial sums between tiles: the nightly judged every model on gemm-bf16 a
  // correctness regression, bisected it to c12 and ticketed its owner.
  const json& broken = model_of(day.nightly, "mlp-bf16-small-01");
  INFO(broken.dump());
  CHECK(broken.at("verdict") == "correctness_regression");
  CHECK(broken.at("fails_run") == true);
  CHECK(broken.at("bisection").at("culprit") == "c12");
  const json ticket = ticket_for(day.tickets, "c12");
  REQUIRE(ticket.is_object());
  CHECK(ticket.at("kind") == "correctness_regression");
  CHECK(ticket.at("team") == "kernels-team");
  // Training: the loss curve left its band against the reference curve.
  const json& training = model_of(day.nightly, "train-tiny-small-01");
  INFO(training.dump());
  CHECK(training.at("verdict") == "correctness_regression");
  const json& loss_curve = training.at("training").at("verdict").at("loss_curve");
  CHECK(loss_curve.at("passed") == false);
  CHECK(loss_curve.at("points_outside_band").get<int>() > loss_curve.at("points_allowed_outside").get<int>());
}

TEST_CASE("interview: your nightly shows llm-70b 3% slower: what happens next?") {
  QualificationDay& day = qualification_day();
  // c07 makes mlp-fp8 3% slower, one change among the 13 since the baseline.
  const json& slower = model_of(day.nightly, "mlp-fp8-small-01");
  INFO(slower.dump());
  CHECK(slower.at("verdict") == "performance_regression");
  const json& gate = slower.at("performance");
  const double shift = gate.at("initial").at("relative_shift").get<double>();
  CHECK(shift < -0.015);
  CHECK(shift > -0.05);
  // The sequential gate took its looks of repeats before it called it.
  const json& sequential = gate.at("sequential");
  CHECK(sequential.at("looks_taken").get<int>() >= 1);
  CHECK(gate.at("regression_confirmed") == true);
  CHECK(gate.at("initial_samples").at("candidate").size() >= 5);
  // One bisection found c07 within the rounds docs/qualification.md states.
  const json& bisection = slower.at("bisection");
  CHECK(bisection.at("culprit") == "c07");
  CHECK(bisection.at("rounds").get<int>() <= bisection.at("round_bound").get<int>());
  CHECK(bisection.at("candidates").size() == 13);
  CHECK(contains(day.nightly_output, "c07"));
  // The owning team has a ticket naming the change and the evidence.
  const json ticket = ticket_for(day.tickets, "c07");
  REQUIRE(ticket.is_object());
  INFO(ticket.dump());
  CHECK(ticket.at("kind") == "performance_regression");
  CHECK(ticket.at("team") == "compiler-team");
  CHECK(ticket.at("layer") == "compiler");
  CHECK(ticket.at("run_id") == "nightly-day");
  CHECK(contains(ticket.at("evidence").dump(), "mlp-fp8-small-01"));
}

TEST_CASE("interview: how many benchmark runs do you need, and why not just one?") {
  QualificationDay& day = qualification_day();
  std::map<std::string, json> plans;
  for (const auto& model : day.nightly.at("models")) {
    const std::string name = model.at("model");
    if (model.at("performance").is_null() || !model.at("performance").contains("sequential")) continue;
    const json& gate = model.at("performance");
    const json& plan = gate.at("sequential");
    plans[name] = plan;
    // What was counted: every look's repeats, on each side; the report's line says how many.
    const std::size_t counted = gate.at("initial_samples").at("candidate").size();
    CHECK(counted == plan.at("repeats_per_look").get<std::size_t>() * plan.at("looks_taken").get<std::size_t>());
    CHECK(gate.at("initial_samples").at("baseline").size() == counted);
    if (model.at("verdict") == "performance_regression" || model.at("verdict") == "passed") {
      CHECK(contains(model.at("detail").get<std::string>(),
                     std::to_string(counted) + " vs " + std::to_string(counted) + " samples"));
    }
    // Never one: at least 5 a side, so the rank test can reach its bound at all.
    CHECK(plan.at("repeats_per_look").get<int>() >= 5);

    // Warmup is run and thrown away: the measure job warmed up until steady before its timed samples.
    const json report = job_result(day.fleet, model.at("measure_job").at("job_id"));
    INFO(name << ": " << report.dump().substr(0, 2000));
    CHECK(report.at("warmup_iterations").get<int>() >= 5);
    CHECK(report.at("steady_reached") == true);
    CHECK(report.at("timed_samples") == plan.at("repeats_per_look"));  // its look's samples, the warmup's not among them
    CHECK(report.at("samples").size() ==
          report.at("warmup_iterations").get<std::size_t>() + report.at("timed_samples").get<std::size_t>());
  }
  // Repeats are sized from the noise recorded for each model: the smoke measured mlp-fp8-small-01,
  // so its noise is measured; mlp-fp8-small-02 has no record and is planned on the prior, a noisier
  // model as far as kiln knows, and gets more samples.
  REQUIRE(plans.count("mlp-fp8-small-02") == 1);
  CHECK(plans.at("mlp-fp8-small-02").at("noise").at("recorded_samples") == 0);
  const json& measured = plans.at("mlp-fp8-small-01");
  CHECK(measured.at("noise").at("recorded_samples").get<int>() > 0);
  for (const auto& [name, plan] : plans) {
    if (plan.at("noise").at("recorded_samples") != 0) continue;
    INFO(name << " against mlp-fp8-small-01: " << plan.dump() << " / " << measured.dump());
    CHECK(plan.at("noise").at("relative_sigma").get<double>() > measured.at("noise").at("relative_sigma").get<double>());
    CHECK(plan.at("max_repeats_per_side").get<int>() > measured.at("max_repeats_per_side").get<int>());
  }
}

TEST_CASE("interview: how do you keep the test matrix affordable?") {
  QualificationDay& day = qualification_day();
  // Impact-based selection: the smoke of c04 (the fp8 GEMM) ran a model it touches and no other.
  std::set<std::string> smoked;
  for (const auto& model : day.smoke.at("models")) smoked.insert(model.at("model").get<std::string>());
  CHECK(smoked == std::set<std::string>{"mlp-fp8-small-01"});
  CHECK(day.nightly.at("models").size() == 4);

  // The nightly's matrix: the day's models by their recorded costs and failures, configs and
  // software combinations, today's candidate compiler weighing more.
  const fs::path matrix = day.fleet.dir() / "matrix.toml";
  write(matrix, "records_factor = \"model\"\n"
                "[[factor]]\nname = \"model\"\nvalues = [\"mlp-bf16-small-01\", \"mlp-fp8-small-01\", \"train-tiny-small-01\"]\n"
                "[[factor]]\nname = \"config\"\nvalues = [\"bf16-tp1\", \"fp8-tp1\", \"fp8-tp8\", \"batch-64\"]\n"
                "[[factor]]\nname = \"software\"\nvalues = [\"rel-rel-rel\", \"cand-rel-rel\", \"rel-cand-rel\"]\n"
                "changed = [\"cand-rel-rel\"]\n");
  const auto plan_on = [&](const std::string& budget) {
    std::string out, err;
    REQUIRE(day.fleet.kiln_split("ci", {"plan", "--matrix", matrix.string(), "--budget-chip-hours", budget, "--json"},
                                 &out, &err) == 0);
    INFO(err);
    CHECK(contains(err, "measured chip-hours for 3 of 3 values of 'model'"));
    const json plan = json_of(out);
    CHECK(plan.at("chip_hours").get<double>() <= std::stod(budget));
    return plan;
  };
  // A budget that pays for a cover and little more: every pair of values runs tonight, in fewer
  // cells than the matrix has.
  const double cover = plan_on("100").at("pairwise_chip_hours").get<double>();
  const json covered = plan_on(std::to_string(cover * 1.05));
  CHECK(covered.at("pairs_covered") == covered.at("pairs_total"));
  CHECK(covered.at("missing_pairs").empty());
  CHECK(covered.at("cells").size() < covered.at("cells_total").get<std::size_t>());
  // Risk decides the rest: the failing models and the changed compiler weigh more than the others.
  double changed_risk = 0, unchanged_risk = 0;
  for (const auto& cell : covered.at("cells")) {
    const bool changed = cell.at("values").at("software") == "cand-rel-rel";
    double& risk = changed ? changed_risk : unchanged_risk;
    risk = std::max(risk, cell.at("risk").get<double>());
  }
  CHECK(changed_risk > unchanged_risk);
  // A budget short of a cover says which pairs go untested tonight, the heaviest first.
  const json short_of = plan_on("0.01");
  CHECK(short_of.at("pairs_covered").get<int>() < short_of.at("pairs_total").get<int>());
  CHECK(short_of.at("missing_pairs").size() ==
        short_of.at("pairs_total").get<std::size_t>() - short_of.at("pairs_covered").get<std::size_t>());
}

TEST_CASE("interview: how do you tell a hardware fault from a software regression?") {
  QualificationDay& day = qualification_day();
  // Software: c12's break failed on the node it ran on and on the other one its triage reran it on,
  // so it was bisected to its change.
  const json& software = model_of(day.nightly, "mlp-bf16-small-01");
  INFO(software.dump());
  CHECK(software.at("nodes").size() >= 2);
  CHECK(software.at("triage").at("decision") == "software_regression");
  CHECK(software.at("bisection").at("culprit") == "c12");

  // Hardware: silent data corruption on every chip of n01, which its health probes do not see.
  for (int chip = 0; chip < 8; ++chip) {
    REQUIRE(day.fleet.sim_chip("n01", {"inject", "--chip", std::to_string(chip), "--fault", "sdc", "--factor", "0.05"}) ==
            0);
  }
  // The other nodes are busy for a few seconds, so the smoke's measure job starts on n01.
  std::string out;
  for (const char* node : {"n02", "n03"}) {
    REQUIRE(day.fleet.kiln("ci", {"submit", "--workload", "sleep", "--chips", "8", "--node", node, "--class", "nightly",
                                  "--", "4"},
                           &out) == 0);
  }
  const int smoke = day.fleet.kiln("ci", {"smoke", "--bundle", day.bundle_at["c04"], "--wait", "--run-id", "smoke-hw"},
                                   &out, 240s);
  INFO(out);
  CHECK(smoke == 1);
  const json report = run_report(day.fleet, "smoke-hw");
  const json& suspect = model_of(report, "mlp-fp8-small-01");
  INFO(suspect.dump());
  CHECK(suspect.at("verdict") == "hardware_suspect");
  CHECK(suspect.at("nodes").size() >= 2);  // rerun elsewhere, where it passed
  CHECK(suspect.at("triage").at("quarantine_node") == "n01");
  CHECK(suspect.at("bisection").is_null());  // no bisection: the stack is not the suspect
  REQUIRE(day.fleet.kiln("ci", {"tickets", "--json"}, &out) == 0);
  const json ticket = ticket_for(json_of(out), "node:n01");
  REQUIRE(ticket.is_object());
  CHECK(ticket.at("kind") == "hardware_suspect");
  CHECK(ticket.at("team") == "lab");
  REQUIRE(day.fleet.kiln("ci", {"nodes", "--json"}, &out) == 0);
  for (const auto& node : json_of(out)) {
    if (node.at("node_id") != "n01") continue;
    CHECK(node.at("state") == "quarantined");
    CHECK(node.at("quarantine_owner") == "lab");
  }
}

TEST_CASE("interview: how does GitOps apply to an accelerator software stack?") {
  QualificationDay& day = qualification_day();
  const fs::path dir = day.fleet.dir();
  const fs::path repo = dir / "environments";
  const std::string candidate = day.bundle_at["c04"];
  const std::string short_id = candidate.substr(0, 12);
  const auto release = [&](const std::string& key, std::vector<std::string> args, std::string* out) {
    args.insert(args.begin(), "release");
    args.insert(args.begin() + 2, {"--release-config", day.release_config().string()});
    return day.fleet.kiln(key, args, out);
  };
  // The bundles' files in the repository, with each layer's package; the driver's is the sim's
  // installer, and the driver and firmware packages are in the coordinator for nodes to install.
  std::string out;
  for (const char* change : {"c04", "c16"}) {
    std::vector<std::string> add = {"add-bundle", day.bundle_at[change].substr(0, 12)};
    for (const char* layer : {"framework", "compiler", "kernels", "runtime", "driver", "firmware"}) {
      const fs::path package = dir / "packages" / change / layer;
      write(package, std::string(layer) == "driver"
                         ? "#!/bin/sh\nexec \"" + bin("kiln-sim-chip") +
                               "\" set-driver-version --driver-options \"$KILN_DRIVER_OPTIONS\" \"$KILN_PACKAGE_VERSION\"\n"
                         : std::string(layer) + " package of " + change);
      add.insert(add.end(), {"--package", std::string(layer) + "=" + package.string()});
    }
    REQUIRE_MESSAGE(release("ci", add, &out) == 0, out);
  }
  for (const char* layer : {"driver", "firmware"}) {
    REQUIRE(day.fleet.kiln("ops", {"artifact", "upload", (dir / "packages" / "c04" / layer).string()}, &out) == 0);
  }

  // Promotion is a commit on a branch with the gate's results attached, reviewed by someone else, merged.
  REQUIRE_MESSAGE(release("ops", {"promote", short_id, "--to", "dev"}, &out) == 0, out);
  const std::string branch = "promote/dev/" + short_id;
  const std::string proposal = git_out(repo, {"log", "-1", "--format=%B", branch});
  CHECK(has(proposal, "Kiln-Gate: smoke smoke-c04 passed"));
  CHECK(has(proposal, "Kiln-Promoted-By: ops (ops)"));
  const json evidence = json_of(git_out(repo, {"show", branch + ":evidence/dev/" + candidate + ".json"}));
  CHECK(contains(evidence.dump(), "mlp-fp8-small-01"));
  CHECK(release("ops", {"merge", "dev"}, &out) == 1);  // not approved
  CHECK(has(out, "is not approved"));
  REQUIRE(release("admin", {"approve", "dev"}, &out) == 0);
  REQUIRE(release("ops", {"merge", "dev"}, &out) == 0);
  CHECK(has(git_out(repo, {"show", "main:environments/dev.toml"}), "bundle = \"" + candidate + "\""));
  CHECK(has(git_out(repo, {"log", "-1", "--format=%B", "main"}), "Kiln-Approved-By: admin (admin)"));
  // The bundle whose nightly failed has no passing smoke: refused, saying so.
  CHECK(release("ops", {"promote", day.bundle_at["c16"].substr(0, 12), "--to", "dev"}, &out) == 1);
  CHECK(has(out, "requires a passing smoke run of bundle"));

  // The coordinator watches main: dev's node converges on the bundle's driver and firmware.
  std::string shown;
  const auto dev_rollout = [&] {
    std::string listed, err;
    day.fleet.kiln_split("ops", {"--json", "envs"}, &listed, &err);
    shown = listed + err;
    const json document = json::parse(listed, nullptr, false);
    if (document.is_object()) {
      for (const auto& env : document["environments"]) {
        if (env["name"] == "dev") return env;
      }
    }
    return json::object();
  };
  CHECK_MESSAGE(Fleet::eventually([&] {
    const json env = dev_rollout();
    return env.value("bundle_id", "") == candidate && env.value("rollout", "") == "converged";
  }, 60s), shown);
  REQUIRE(day.fleet.kiln("ops", {"envs"}, &out) == 0);
  CHECK(has(out, "dev: bundle " + short_id));

  // Rollback is a commit too: a revert on main, recorded and audited.
  REQUIRE(release("ops", {"rollback", "dev"}, &out) == 0);
  const std::string rollback = git_out(repo, {"log", "-1", "--format=%B", "main"});
  CHECK(has(rollback, "Kiln-Action: rollback"));
  CHECK(has(rollback, "Kiln-Bundle: none"));
  CHECK(has(git_out(repo, {"show", "main:environments/dev.toml"}), "bundle = \"\""));
  REQUIRE(day.fleet.kiln("ops", {"audit"}, &out) == 0);
  CHECK(has(out, "promotion_merged"));
  CHECK(has(out, "rollback"));
  CHECK_MESSAGE(Fleet::eventually([&] { return dev_rollout().value("bundle_id", "x").empty(); }, 30s), shown);
}

TEST_CASE("interview: how do you share 128 chips between CI and developers?") {
  // Two nodes; experiments may hold 8 chips of revision a and borrow none; a preempted experiment
  // gets 4 s of notice (five minutes by default).
  Fleet fleet("interview-sharing");
  fleet.add_key("ci", "ci");
  fleet.add_coordinator_tables("[scheduler]\ngrace_ms = 4000\n[scheduler.may_borrow]\nexperiment = false\n"
                               "[scheduler.quota_chips.experiment]\na = 8\n");
  auto dev = start_nodes(fleet, {{"n01", "a"}, {"n02", "a"}}, "dev", "developer");
  const fs::path dir = fleet.dir();
  // A developer's experiment holds one node; a second one waits for the experiments' quota.
  auto experiment = fleet.start_kiln("dev", {"lease", "--chips", "8", "--duration", "2h"}, dir / "experiment.out");
  REQUIRE(Fleet::eventually([&] { return contains(read(dir / "experiment.out"), "lease L1 granted"); }, 20s));
  std::string out;
  REQUIRE(fleet.kiln("dev", {"lease", "--chips", "8", "--duration", "2h", "--no-wait"}, &out) == 0);
  CHECK(contains(out, "lease L2 pending"));
  REQUIRE(fleet.kiln("dev", {"queue", "L2"}, &out) == 0);
  CHECK(contains(out, "quota of class experiment on a is used up (8/8 chips)"));

  // The nightly's work takes the free node and preempts the experiment for the other, with notice.
  std::vector<std::string> jobs;
  for (int n = 0; n < 2; ++n) {
    REQUIRE(fleet.kiln("ci", {"submit", "--workload", "sleep", "--chips", "8", "--class", "nightly", "--", "2"}, &out) ==
            0);
    jobs.push_back(first_word_after(out, "job "));
  }
  REQUIRE(fleet.kiln("ci", {"queue"}, &out) == 0);
  INFO(out);
  CHECK(contains(out, "nightly"));
  CHECK(out.find("nightly") < out.find("L2"));  // by class: the nightly's work before the experiment
  bool explained = false;
  for (const auto& job : jobs) {
    REQUIRE(fleet.kiln("ci", {"queue", job}, &out) == 0);
    explained = explained || contains(out, "preempting lease L1 for it; the grace ends in");
  }
  CHECK(explained);
  REQUIRE(Fleet::eventually([&] { return contains(read(dir / "experiment.out"), "PREEMPTION NOTICE for lease L1"); },
                            20s));
  REQUIRE(Fleet::eventually([&] { return contains(read(dir / "experiment.out"), "queued again keeping its age"); },
                            30s));
  for (const auto& job : jobs) CHECK(fleet.kiln("ci", {"result", job, "--wait"}, &out, 60s) == 0);
  // Then the experiment has its chips back, ahead of the younger one.
  REQUIRE(Fleet::eventually([&] { return fleet.kiln("dev", {"leases"}, &out) == 0 && contains(out, "granted"); }, 30s));
  CHECK(fleet.kiln("dev", {"release-lease", "L1"}, &out) == 0);
  CHECK(fleet.kiln("dev", {"release-lease", "L2"}, &out) == 0);
  experiment->wait(10s);
}

TEST_CASE("interview: which numbers tell you the CI itself is healthy?") {
  QualificationDay& day = qualification_day();
  // The qualifier counts runs by verdict, tickets by team, flakes by test, time to a presubmit signal.
  const std::string& before = day.qualifier_page_before;
  std::string after;
  REQUIRE(Fleet::eventually([&] {
    after = scrape(day.qualifier_http);
    return sample_value(after, "kiln_runs_total{kind=\"nightly\",verdict=\"failed\"}") >
           sample_value(before, "kiln_runs_total{kind=\"nightly\",verdict=\"failed\"}");
  }, 30s));
  INFO(after);
  CHECK(sample_value(after, "kiln_runs_total{kind=\"smoke\",verdict=\"passed\"}") >
        sample_value(before, "kiln_runs_total{kind=\"smoke\",verdict=\"passed\"}"));
  CHECK(sample_value(after, "kiln_presubmit_time_to_signal_seconds_count") >
        sample_value(before, "kiln_presubmit_time_to_signal_seconds_count"));
  CHECK(sample_value(after, "kiln_tickets_filed_total{team=\"compiler-team\"}") >
        sample_value(before, "kiln_tickets_filed_total{team=\"compiler-team\"}"));
  CHECK_FALSE(line_of(after, "kiln_test_flake_ratio{test=\"mlp-fp8-small-01\",owner=\"recsys-models\"} ").empty());
  CHECK(contains(after, "kiln_bisections_running 0\n"));
  // The coordinator counts jobs by class and outcome, their queue wait, and the chips in the pool.
  const std::string coordinator = scrape(day.coordinator_http);
  INFO(coordinator);
  for (const char* series : {"kiln_jobs_finished_total{class=\"nightly\",outcome=\"succeeded\"}",
                             "kiln_jobs_finished_total{class=\"presubmit\",outcome=\"succeeded\"}",
                             "kiln_queue_wait_seconds_count{class=\"nightly\"}"}) {
    CAPTURE(series);
    CHECK(sample_value(coordinator, series) > sample_value(day.coordinator_page_before, series));
  }
  CHECK(sample_value(coordinator, "kiln_chips{hw_revision=\"a\"}") == 24);
}

// ---- seed 001: model CI strategy -------------------------------------------------------------------

TEST_CASE("interview: you join a new accelerator program and silicon arrives in six months: what do you build, in what order?") {
  QualificationDay& day = qualification_day();
  std::string out;
  // First, the unit tier on the CPU reference backend and the simulated chip: it needs no chip,
  // and it catches c12's broken GEMM before any model runs.
  CHECK(day.fleet.kiln("ci", {"unit", "--bundle", day.bundle_at["c12"]}, &out) == 1);
  INFO(out);
  CHECK(contains(out, "unit tier of change c12: FAILED"));
  CHECK(contains(out, "FAIL gemm-bf16 on sim"));
  CHECK(contains(out, "FAIL gemm-bf16 on cpu"));
  CHECK(day.fleet.kiln("ci", {"unit", "--bundle", day.bundle_at["c04"]}, &out) == 0);
  // Then the model gates, the same ones silicon will run, on the simulated chip: the day's smoke
  // and nightly measured every model there, and each result says on which backend.
  for (const auto& model : day.nightly.at("models")) {
    INFO(model.dump());
    REQUIRE(model.contains("node_backends"));
    for (const auto& [node, backend] : model.at("node_backends").items()) CHECK(backend == "sim");
  }
  // Last, the view that says when silicon can take over: nothing is calibrated on it yet.
  std::string err;
  CHECK(day.fleet.kiln_split("ci", {"switchover", "--models", (day.fleet.dir() / "day.toml").string()}, &out, &err) ==
        1);
  CHECK(contains(out, "NOT READY"));
}

TEST_CASE("interview: the matrix is 15 models x 12 configs x 3 hardware generations x 8 software combinations x 4 environments on 2,000 chip-hours a night: how do you choose what runs?") {
  const std::string matrix = (kShippedData / "matrix.toml").string();
  const std::string plan = bin("kiln") + " --config /nonexistent/client.toml plan --offline --matrix " + matrix +
                           " --budget-chip-hours 2000";
  const Ran json_run = run(plan + " --json 2>/dev/null");
  REQUIRE(json_run.status == 0);
  const json chosen = json_of(json_run.output);
  CHECK(chosen.at("cells_total") == 15 * 12 * 3 * 8 * 4);
  // It fits the budget and covers every pair of values of any two factors.
  CHECK(chosen.at("budget_chip_hours") == 2000.0);
  CHECK(chosen.at("chip_hours").get<double>() <= 2000.0);
  CHECK(chosen.at("pairs_covered") == chosen.at("pairs_total"));
  CHECK(chosen.at("missing_pairs").empty());
  // And it says how it chose each cell: the pairwise cover, then rotation and risk per chip-hour.
  std::map<std::string, int> reasons;
  for (const auto& cell : chosen.at("cells")) ++reasons[cell.at("reason").get<std::string>()];
  CHECK(reasons["pairwise"] > 0);
  CHECK(reasons.size() >= 2);
  const Ran text = run(plan + " --top 3");
  INFO(text.output);
  REQUIRE(text.status == 0);
  CHECK(contains(text.output, "pairs covered: 653 of 653"));
  CHECK(contains(text.output, "skipped, the riskiest 3 of "));
  CHECK(contains(text.output, "rotation: "));
}

TEST_CASE("interview: how do you turn release risks from the compiler, kernel, runtime, firmware and hardware teams into automated gates?") {
  QualificationDay& day = qualification_day();
  std::string out, err;
  const int listed = day.fleet.kiln_split("ci", {"risks", "--register", (day.fleet.dir() / "risks.toml").string(),
                                                 "--json"},
                                          &out, &err);
  CHECK(listed <= 1);
  const json risks = json_of(out);
  INFO(risks.dump());
  // Each team's risk is a gate the nightly judged with no one asking.
  std::map<std::string, json> by_id;
  std::set<std::string> teams;
  for (const auto& risk : risks.at("risks")) {
    by_id[risk.at("id").get<std::string>()] = risk;
    teams.insert(risk.at("owner_team").get<std::string>());
    REQUIRE(risk.at("latest").is_object());
    CHECK(risk.at("latest").at("run_id") == "nightly-day");
  }
  CHECK(teams == std::set<std::string>{"compiler", "kernels", "runtime", "firmware", "hardware"});
  // A failing gate pages: through the run's ticket to the owner the triage named, once.
  const auto paged = [&](const std::string& id, const std::string& team, const std::string& culprit) {
    const json& latest = by_id.at(id).at("latest");
    CHECK(latest.at("verdict") == "failed");
    CHECK(latest.at("paged").at("team") == team);
    CHECK(latest.at("paged").at("ticket") == ticket_for(day.tickets, culprit).at("id"));
  };
  paged("compiler-fp8-fusion", "compiler-team", "c07");
  paged("kernels-bf16-accumulation", "kernels-team", "c12");
  paged("runtime-training-divergence", "kernels-team", "c12");
  // The hardware risk failed too, but triage called it software: the hardware team is not paged.
  paged("hardware-bf16-rounding", "kernels-team", "c12");
  CHECK(by_id.at("firmware-ecc-scrub").at("latest").at("verdict") == "passed");
  CHECK(contains(day.fleet.log_of("qualifier"), "risk compiler-fp8-fusion: gate"));
}

TEST_CASE("interview: design stability testing for a training stack: how long, how many chips, and what counts as a failure?") {
  // Two nodes of two chips: the run leases both whole nodes, a rank on each, and trains for an
  // hour of the run's clock (1200 times the wall clock).
  Fleet fleet("interview-stability");
  fleet.add_key("ci", "ci");
  for (const char* node : {"n01", "n02"}) fleet.add_agent({node, "a"}, "chip_count=2");
  fleet.start_coordinator();
  for (const char* node : {"n01", "n02"}) fleet.start_agent(node);
  write_golden(fleet.dir(), "train-tiny");
  write(fleet.dir() / "stability.toml", "[run]\ntime_scale = 1200\n[hang]\nminutes = 30\n");
  std::string out, err;
  REQUIRE(Fleet::eventually([&] { return fleet.kiln("ci", {"nodes"}, &out) == 0 && contains(out, "n02"); }, 20s));
  // What counts as a failure: a loss spike every 200 steps on one chip is one episode, however often it fires.
  REQUIRE(fleet.sim_chip("n01", {"inject", "--chip", "1", "--fault", "loss_spike"}) == 0);
  const int code = fleet.kiln_split("ci", {"stability", "--model", "train-tiny", "--chips", "4", "--duration", "1h",
                                           "--criteria", (fleet.dir() / "stability.toml").string(), "--json"},
                                    &out, &err, 120s);
  INFO(err);
  CHECK(code == 1);
  const json report = json_of(out);
  CHECK(report.at("ranks").size() == 2);
  CHECK(report.at("chip_hours").get<double>() == doctest::Approx(4.0).epsilon(0.02));
  CHECK(report.at("total").at("episodes") == 1);
  CHECK(report.at("total").at("failures").get<int>() >= 1);
  REQUIRE(report.at("episodes").size() == 1);
  CHECK(report.at("episodes")[0].at("kind") == "loss_spike");
  CHECK(report.at("episodes")[0].at("node_id") == "n01");
  // The rate per 1000 chip-hours with its exact interval: one episode in 4 chip-hours says little.
  CHECK(report.at("total").at("per_1000_chip_hours").get<double>() ==
        doctest::Approx(1000.0 / report.at("chip_hours").get<double>()).epsilon(0.001));
  CHECK(report.at("total").at("upper").get<double>() > 5 * report.at("total").at("per_1000_chip_hours").get<double>());
  // How long and how many chips: the chip-hours a run needs to bound the rate, counted offline.
  REQUIRE(fleet.kiln_split("ci", {"stability", "--episodes", "0", "--chip-hours", "768", "--json"}, &out, &err) == 0);
  CHECK(json_of(out).at("upper").get<double>() == doctest::Approx(3688.9 / 768).epsilon(0.001));
  REQUIRE(fleet.kiln("ci", {"stability", "--episodes", "2", "--chip-hours", "768"}, &out) == 0);
  CHECK(contains(out, "2 episodes in 768 chip-hours: 2.60 per 1000 chip-hours (95% CI 0.32 to 9.41)"));
}

namespace {

// The release of the MoE model: k3 of the qualification tests' history retunes the fp8 GEMMs and
// here costs the MoE model 4% of its tokens/s. The sim has no MoE workload: the set's fp8 model
// (workload mlp-fp8) stands for it, its bf16 model for everything else.
std::string release_set() {
  const std::string set(kModelSet);
  std::string models = set.substr(0, set.find("[[model]]\nname = \"mlp-fp8-wide\""));
  models.replace(models.find("mlp-fp8-it"), std::string("mlp-fp8-it").size(), "moe-fp8");
  return models;
}

std::string release_history() {
  std::string history(kHistory);
  const std::string slowdown = "throughput = { \"mlp-fp8\" = 0.9 }";
  history.replace(history.find(slowdown), slowdown.size(), "throughput = { \"mlp-fp8\" = 0.96 }");
  return history.substr(0, history.find("[[change]]\nid = \"k4\""));
}

}  // namespace

TEST_CASE("interview: the day before a planned release, one blocking gate fails: tokens/s on the MoE model is 4 percent below baseline: what do you do?") {
  Fleet fleet("interview-release");
  const fs::path dir = fleet.dir();
  fleet.add_key("mei", "developer");  // an approver of the MoE model's team
  fleet.add_key("ops", "ops");
  write(dir / "release-set.toml", release_set());
  write(dir / "risks.toml", risk_register("release-set.toml", {{"moe-serving", "mei"}},
                                          {{"moe-tokens-per-second", "the MoE model serves fewer tokens/s than its baseline",
                                            "moe-serving", "compiler", "release", "moe-fp8", "throughput", "sev2"}}));
  fleet.add_coordinator_settings("risk_register = \"risks.toml\"\n");
  start_two_nodes(fleet, {{"model_set", "\"release-set.toml\""}, {"risk_register", "\"risks.toml\""}});
  write(dir / "history.toml", release_history());
  fleet.start_qualifier("qualifier");
  const std::string candidate = prepare_bundles(fleet, "k3");

  // The release qualification: the MoE model's throughput gate fails, everything else passes, and
  // the soak round runs all the same.
  std::string out;
  const int qualified = fleet.kiln("ci", {"qualify-release", "--bundle", candidate, "--wait", "--run-id", "release-moe",
                                          "--soak-rounds", "1", "--no-accept"},
                                   &out, 480s);
  INFO(out);
  REQUIRE(qualified == 1);
  const json report = run_report(fleet, "release-moe");
  const json& moe = model_of(report, "moe-fp8");
  CHECK(moe.at("verdict") == "performance_regression");
  const double shift = moe.at("performance").at("initial").at("relative_shift").get<double>();
  CHECK(shift < -0.02);
  CHECK(shift > -0.07);
  for (const auto& model : report.at("models")) {
    if (model.at("model") != "moe-fp8") CHECK(model.at("fails_run") == false);
  }
  CHECK(report.at("soak").at("rounds_run") == 1);

  // The release gate blocks the promotion.
  const fs::path repo = environments_repo(fleet, candidate, "release");
  const std::vector<std::string> promote = {"release", "promote", candidate.substr(0, 12), "--to", "serving", "--repo",
                                            repo.string()};
  CHECK(fleet.kiln("ops", promote, &out) == 1);
  CHECK(has(out, "requires a passing release run of bundle"));

  // The owning team's approver takes the risk, with a reason and an expiry: the run passes by the
  // waiver, and the promotion carries it for its reviewers.
  const std::vector<std::string> waive = {"waive", "release-moe", "--model", "moe-fp8", "--metric", "throughput",
                                          "--reason", "4% low, fix in k7 after the release", "--expires", "2d"};
  CHECK(fleet.kiln("ops", waive, &out) == 3);  // not an approver of moe-serving
  REQUIRE(fleet.kiln("mei", waive, &out) == 0);
  REQUIRE(Fleet::eventually([&] { return run_report(fleet, "release-moe").at("passed") == true; }, 30s));
  REQUIRE(fleet.kiln("ci", {"run", "release-moe"}, &out) == 0);
  CHECK(has(out, "passed with waivers"));
  REQUIRE(fleet.kiln("ops", promote, &out) == 0);
  const std::string branch = "promote/serving/" + candidate.substr(0, 12);
  CHECK(has(git_out(repo, {"log", "-1", "--format=%B", branch}),
            "Kiln-Waiver: release release-moe moe-fp8 throughput: waived by mei until "));
  git_out(repo, {"branch", "-D", branch});

  // Withdrawn, the waiver lets nothing through: the run fails again and the promotion is refused.
  REQUIRE(fleet.kiln("mei", {"waiver", "withdraw", "release-moe/moe-fp8/throughput"}, &out) == 0);
  CHECK(fleet.kiln("ci", {"run", "release-moe"}, &out) == 1);
  CHECK(has(out, "WITHDRAWN moe-fp8 on revision a (throughput)"));
  CHECK(fleet.kiln("ops", promote, &out) == 1);
  CHECK(has(out, "passed only by a waiver that is no longer in force"));
}

TEST_CASE("interview: how do you run meaningful model CI before silicon exists, and how do you switch over when it arrives?") {
  QualificationDay& day = qualification_day();
  // A backend is what the node's driver declares, whatever its version string says.
  std::string out, err;
  REQUIRE(day.fleet.kiln_split("ci", {"nodes", "--json"}, &out, &err) == 0);
  for (const auto& node : json_of(out)) {
    const auto labels = node.at("labels").get<std::vector<std::string>>();
    CHECK(std::find(labels.begin(), labels.end(), "backend=sim") != labels.end());
  }
  // Readiness counts every gate of the set: the day's models, and one the runs never measured.
  const fs::path set = day.fleet.dir() / "switchover-set.toml";
  write(set, read(day.fleet.dir() / "day.toml") + shipped_models({"transformer-block-bf16-small-01"}));
  CHECK(day.fleet.kiln_split("ci", {"switchover", "--models", set.string(), "--json"}, &out, &err) == 1);
  const json report = json_of(out);
  INFO(report.dump());
  CHECK(report.at("model_set_known") == true);
  CHECK(report.at("ready") == false);
  CHECK(report.at("calibrated") == 0);
  CHECK(report.at("gates").size() == 10);  // five models, correctness and performance, revision a
  CHECK(report.at("never_run") == 2);
  for (const auto& gate : report.at("gates")) {
    CHECK(gate.at("calibrated_on_silicon") == false);
    CHECK(gate.at("evidence").at("silicon") == 0);
    CHECK(gate.at("never_run") == (gate.at("model") == "transformer-block-bf16-small-01"));
    CHECK(contains(gate.at("remaining").get<std::string>(), "silicon"));
    // A model the runs found correct on the simulated chip has that evidence, and only that.
    if (gate.at("model") == "mlp-fp8-small-01") CHECK(gate.at("evidence").at("sim").get<int>() > 0);
  }
}

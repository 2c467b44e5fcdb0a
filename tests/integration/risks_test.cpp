// The risk register and waivers end to end with the real binaries: a nightly fails a blocking
// gate of the register, whose page is the run's ticket to the culprit's owner; a person who is not
// an approver of the owning team is refused; an approver's waiver lets the run through, shown in
// its report, the audit log and a promotion; a waiver replaced by a shorter one, expired or
// withdrawn lets nothing through any more, in the run report, `kiln risks` and `kiln release
// promote` alike. A release whose gate failed still runs its soak rounds, and a waiver of the gate
// does not stand in for them. And a multi-node model whose outputs are wrong is judged, bisected
// and ticketed like any model, its hardware risk paging no one a second time.
#include <doctest/doctest.h>

#include <filesystem>

#include <nlohmann/json.hpp>

#include "client/client.h"
#include "tests/integration/fleet_fixture.h"
#include "tests/integration/metrics_page.h"
#include "tests/integration/qualification_fleet.h"
#include "tests/integration/release_gates.h"
#include "tests/integration/run_command.h"

using namespace kiln::testing;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

namespace {

constexpr const char* kRegister = R"(
model_set = "models.toml"

[[team]]
name = "recsys"
approvers = ["approver"]

[[risk]]
id = "fp8-tiles"
title = "retuned fp8 GEMM tiles lose throughput"
owner_team = "recsys"
layer = "kernels"
tier = "nightly"
gate = { model = "mlp-fp8-it", metric = "throughput" }
page = { team = "recsys-oncall", severity = "sev2" }
)";

// The fleet of these tests: the register on the coordinator and the qualifier, two nodes, and the
// candidate at k3 (whose fp8 tiles lose throughput).
std::string start_risk_fleet(Fleet& fleet) {
  fleet.add_key("approver", "developer");
  fleet.add_key("bystander", "developer");
  fleet.add_key("auditor", "ops");
  fleet.add_key("root", "admin");
  // The coordinator checks waivers against the same register the qualifier judges gates by.
  write(fleet.dir() / "risks.toml", kRegister);
  fleet.add_coordinator_settings("risk_register = \"risks.toml\"\n");
  start_two_nodes(fleet, {{"risk_register", "\"risks.toml\""}});
  fleet.start_qualifier("qualifier");
  return prepare_bundles(fleet, "k3");
}

}  // namespace

TEST_CASE("a failing gate pages its team; an approver's waiver lets the run through until it expires") {
  Fleet fleet("risks");
  const std::string candidate = start_risk_fleet(fleet);
  const std::string registry = (fleet.dir() / "risks.toml").string();

  // The nightly fails the register's gate. The run bisected the slowdown to k3 and ticketed its
  // owner: one incident, one page, so that ticket is the gate's page and recsys-oncall is not
  // paged beside it.
  std::string out;
  const int nightly = fleet.kiln("ci", {"nightly", "--bundle", candidate, "--wait", "--run-id", "nightly-w", "--max-models", "2"}, &out, 240s);
  INFO(out);
  REQUIRE(nightly == 1);
  REQUIRE(fleet.kiln("ci", {"tickets", "--json"}, &out) == 0);
  std::string culprit_ticket;
  for (const auto& ticket : nlohmann::json::parse(out)) {
    CHECK(ticket.at("kind") != "risk_gate");
    if (ticket.at("culprit") == "k3") culprit_ticket = ticket.at("id").get<std::string>();
  }
  REQUIRE_FALSE(culprit_ticket.empty());
  REQUIRE(fleet.kiln("ci", {"risks", "--register", registry, "--json"}, &out) == 0);
  const auto risks = nlohmann::json::parse(out);
  CHECK(risks.at("gaps") == 0);
  CHECK(risks.at("risks")[0].at("latest").at("verdict") == "failed");
  CHECK(risks.at("risks")[0].at("latest").at("run_id") == "nightly-w");
  CHECK(risks.at("risks")[0].at("latest").at("paged") ==
        nlohmann::json{{"team", "compiler-team"}, {"ticket", culprit_ticket}, {"by_triage", true}});

  // Someone who is not an approver of the owning team is refused, and told whom to ask.
  // `kiln waive` reads the register the coordinator holds: no --register.
  const std::vector<std::string> waive = {"waive",      "nightly-w", "--model",           "mlp-fp8-it",
                                          "--metric",   "throughput", "--reason", "10% low, fix in k7"};
  std::vector<std::string> for_an_hour = waive;
  for_an_hour.insert(for_an_hour.end(), {"--expires", "1h"});
  CHECK(fleet.kiln("bystander", for_an_hour, &out) == 3);
  CHECK(out.find("bystander is not an approver of the team that owns the gate mlp-fp8-it throughput; ask one of "
                 "recsys (approver)") != std::string::npos);
  // Nor may the CI key, even writing the record itself: the coordinator takes a waiver from a
  // person only.
  auto ci = fleet.client("ci");
  const nlohmann::json forged = {{"schema", "kiln.waiver/1"}, {"scope", "nightly-w"},   {"model", "mlp-fp8-it"},
                                 {"metric", "throughput"},    {"team", "recsys"},       {"approver", "approver"},
                                 {"reason", "the machine says so"}, {"created_at_ms", 0}, {"expires_at_ms", 0}};
  auto refused = kiln::cli::expect_reply<kiln::protocol::Ok>(ci->request(kiln::protocol::PutRecord{
      kiln::protocol::RecordKind::waiver, "nightly-w/mlp-fp8-it/throughput", forged.dump()}));
  REQUIRE(!refused);
  CHECK(refused.error().code == kiln::Errc::unauthorized);
  CHECK(fleet.kiln("ci", {"waivers"}, &out) == 0);
  CHECK(out.find("no waiver is in force") != std::string::npos);

  // The approver's waiver for 7 days lets the finished run through: the qualifier judges it
  // again, and a promotion may rely on it.
  const auto waive_for = [&](const std::string& expiry) {
    std::vector<std::string> args = waive;
    args.insert(args.end(), {"--expires", expiry});
    std::string said;
    INFO(said);
    REQUIRE(fleet.kiln("approver", args, &said) == 0);
    CHECK(has(said, "waived by approver until "));
  };
  waive_for("7d");
  REQUIRE(Fleet::eventually([&] { return run_report(fleet, "nightly-w").at("passed") == true; }, 15s));
  const auto waived = run_report(fleet, "nightly-w");
  REQUIRE(waived.at("waivers").size() == 1);
  CHECK(waived.at("waivers")[0].at("approver") == "approver");
  CHECK(model_of(waived, "mlp-fp8-it").at("fails_run") == false);
  CHECK(model_of(waived, "mlp-fp8-it").at("verdict") == "performance_regression");
  REQUIRE(fleet.kiln("ci", {"run", "nightly-w"}, &out) == 0);
  CHECK(has(out, "passed with waivers"));
  CHECK(has(out, "WAIVED mlp-fp8-it on revision a (throughput): waived by approver until "));
  REQUIRE(fleet.kiln("ci", {"risks", "--register", registry, "--json"}, &out) == 0);
  CHECK(nlohmann::json::parse(out).at("risks")[0].at("latest").at("verdict") == "waived");
  REQUIRE(fleet.kiln("ci", {"waivers"}, &out) == 0);
  CHECK(has(out, "nightly-w/mlp-fp8-it/throughput"));
  const fs::path repo = environments_repo(fleet, candidate, "nightly");
  const std::vector<std::string> promote = {"release", "promote", candidate.substr(0, 12), "--to", "serving",
                                            "--repo", repo.string()};
  REQUIRE(fleet.kiln("auditor", promote, &out) == 0);
  CHECK(has(git_out(repo, {"log", "-1", "--format=%B", "promote/serving/" + candidate.substr(0, 12)}),
            "Kiln-Waiver: nightly nightly-w mlp-fp8-it throughput: waived by approver until "));
  git_out(repo, {"branch", "-D", "promote/serving/" + candidate.substr(0, 12)});

  // Waived again with a 20 s expiry: the record is replaced, and the audit says so. Once it has
  // expired, nothing counts the 7-day waiver any more: not the run report, not `kiln risks`, not
  // a promotion.
  waive_for("20s");
  REQUIRE(fleet.kiln("auditor", {"audit", "--json"}, &out) == 0);
  bool replaced = false;
  for (const auto& line : nlohmann::json::parse(out)) {
    if (line.at("action") != "waiver_replaced") continue;
    replaced = true;
    CHECK(line.at("actor") == "approver");
    CHECK(line.at("subject") == "gate mlp-fp8-it throughput");
    CHECK(has(line.at("detail").get<std::string>(), ", replacing waived by approver until "));
  }
  CHECK(replaced);
  REQUIRE(Fleet::eventually([&] {
    return fleet.kiln("ci", {"waivers"}, &out) == 0 && out.find("no waiver is in force") != std::string::npos;
  }, 60s));
  CHECK(fleet.kiln("ci", {"run", "nightly-w"}, &out) == 1);
  CHECK(has(out, "kiln nightly nightly-w: FAILED ("));
  CHECK(has(out, "EXPIRED mlp-fp8-it on revision a (throughput)"));
  REQUIRE(fleet.kiln("ci", {"risks", "--register", registry, "--json"}, &out) == 0);
  CHECK(nlohmann::json::parse(out).at("risks")[0].at("latest").at("verdict") == "failed");
  CHECK(fleet.kiln("auditor", promote, &out) == 1);
  CHECK(has(out, "passed only by a waiver that is no longer in force (gate mlp-fp8-it throughput"));
  // The qualifier records the run failed again, too.
  REQUIRE(Fleet::eventually([&] {
    auto recorded = kiln::cli::expect_reply<kiln::protocol::RecordEntry>(ci->request(
        kiln::protocol::GetRecord{kiln::protocol::RecordKind::qualification_run, "nightly-w"}));
    return recorded && nlohmann::json::parse(recorded->document).at("passed") == false;
  }, 30s));
  REQUIRE(fleet.kiln("ci", {"waivers", "--all"}, &out) == 0);
  CHECK(has(out, "EXPIRED waived by approver"));

  // Withdrawn: only by an approver of the team that waived it (or an admin), audited, and from
  // that moment nothing relies on it.
  waive_for("1h");
  REQUIRE(Fleet::eventually([&] { return fleet.kiln("ci", {"run", "nightly-w"}, &out) == 0; }, 15s));
  const std::vector<std::string> withdraw = {"waiver", "withdraw", "nightly-w/mlp-fp8-it/throughput"};
  CHECK(fleet.kiln("bystander", withdraw, &out) == 3);
  CHECK(has(out, "bystander is not an approver of team recsys"));
  REQUIRE(fleet.kiln("approver", withdraw, &out) == 0);
  CHECK(has(out, "withdrew nightly-w/mlp-fp8-it/throughput"));
  CHECK(fleet.kiln("ci", {"run", "nightly-w"}, &out) == 1);
  CHECK(has(out, "WITHDRAWN mlp-fp8-it on revision a (throughput)"));
  CHECK(has(out, "withdrawn by approver at "));
  REQUIRE(fleet.kiln("ci", {"risks", "--register", registry, "--json"}, &out) == 0);
  CHECK(nlohmann::json::parse(out).at("risks")[0].at("latest").at("verdict") == "failed");
  // Refused: the promotion names the first lapse of the waivers the recorded run relied on, which
  // may be the replacement above if the qualifier has not recorded the run again since.
  CHECK(fleet.kiln("auditor", promote, &out) == 1);
  CHECK(has(out, "passed only by a waiver that is no longer in force"));
  REQUIRE(fleet.kiln("ci", {"waivers"}, &out) == 0);
  CHECK(has(out, "no waiver is in force"));
  REQUIRE(fleet.kiln("ci", {"waivers", "--all"}, &out) == 0);
  CHECK(has(out, "WITHDRAWN by approver waived by approver"));
  CHECK(fleet.kiln("approver", withdraw, &out) == 1);
  CHECK(has(out, "already withdrawn by approver"));
  REQUIRE(fleet.kiln("auditor", {"audit"}, &out) == 0);
  CHECK(has(out, "waiver_withdrawn"));
}

TEST_CASE("a release whose gate failed still runs its soak rounds; a waiver of the gate does not stand in for them") {
  Fleet fleet("risks-release");
  const std::string candidate = start_risk_fleet(fleet);
  std::string out;
  const int release = fleet.kiln("ci", {"qualify-release", "--bundle", candidate, "--wait", "--run-id", "release-w",
                                        "--max-models", "2", "--soak-rounds", "1", "--no-accept"},
                                 &out, 480s);
  INFO(out);
  REQUIRE(release == 1);
  auto report = run_report(fleet, "release-w");
  // The first round failed the gate, and the soak round ran all the same.
  CHECK(model_of(report, "mlp-fp8-it").at("verdict") == "performance_regression");
  REQUIRE(report.contains("soak"));
  CHECK(report.at("soak").at("rounds_asked") == 1);
  CHECK(report.at("soak").at("rounds_run") == 1);
  std::size_t soaked = 0;
  for (const auto& entry : report.at("models")) {
    soaked += entry.at("detail").get<std::string>().starts_with("soak round 1: ");
  }
  CHECK(soaked >= 2);
  CHECK(has(report.at("summary").get<std::string>(), "soak: 1 of 1 rounds run"));

  // Waived, the gate's failure passes; the release gate takes the run with its soak evidence.
  REQUIRE(fleet.kiln("approver", {"waive", "release-w", "--model", "mlp-fp8-it", "--metric", "throughput", "--reason",
                                  "10% low, fix in k7", "--expires", "1h"},
                     &out) == 0);
  REQUIRE(Fleet::eventually([&] { return run_report(fleet, "release-w").at("passed") == true; }, 15s));
  const fs::path repo = environments_repo(fleet, candidate, "release");
  REQUIRE(fleet.kiln("auditor", {"release", "promote", candidate.substr(0, 12), "--to", "serving", "--repo",
                                 repo.string()},
                     &out) == 0);
  CHECK(has(out, "proposed"));
}

namespace {

// The sim's bf16 MLP on one chip and across two whole nodes: k5 of the history breaks its GEMM.
constexpr const char* kWideSet = R"(
[[model]]
name = "mlp-bf16-it"
size_class = "small"
chips = 1
minutes = 1
components = ["gemm-bf16", "gelu"]
owner_team = "recsys-models"
workload = "mlp-bf16"
seed = 3

[[model]]
name = "mlp-bf16-wide"
size_class = "medium"
chips = 16
minutes = 1
components = ["gemm-bf16", "gelu"]
owner_team = "recsys-models"
workload = "mlp-bf16"
seed = 6
proxy = "mlp-bf16-it"
)";

}  // namespace

TEST_CASE("a multi-node model with wrong outputs is judged, bisected and ticketed once; its hardware risk pages no one") {
  // The nightly of a broken bf16 change: every rank of the two-node model runs and reports wrong
  // outputs. The gang is judged from their result documents (not cancelled, retried and counted as
  // not run), triaged as software, bisected to k5, and k5's owner is paged once, by the run's
  // ticket: the hardware risk the failure trips does not page the hardware team.
  Fleet fleet("risks-wide");
  const fs::path dir = fleet.dir();
  write(dir / "risks.toml", hardware_risk_register("mlp-bf16-wide", "nightly"));
  start_two_nodes(fleet, {{"risk_register", "\"risks.toml\""}});
  write(dir / "models.toml", kWideSet);
  fleet.start_qualifier("qualifier");
  const std::string candidate = prepare_bundles(fleet, "k5");

  std::string out;
  const int nightly = fleet.kiln("ci", {"nightly", "--bundle", candidate, "--wait", "--run-id", "nightly-wide"}, &out, 480s);
  INFO(out);
  REQUIRE(nightly == 1);
  const auto report = run_report(fleet, "nightly-wide");
  const auto& wide = model_of(report, "mlp-bf16-wide");
  INFO(wide.dump());
  CHECK(wide.at("verdict") == "correctness_regression");
  CHECK(wide.at("detail").get<std::string>().find("did not run") == std::string::npos);
  CHECK(wide.at("detail").get<std::string>().find("culprit k5") != std::string::npos);
  const auto nodes = wide.at("nodes").dump();
  CHECK(nodes.find("n01") != std::string::npos);
  CHECK(nodes.find("n02") != std::string::npos);
  REQUIRE(wide.at("ticket_ids").size() == 1);
  const std::string culprit_ticket = wide.at("ticket_ids")[0].get<std::string>();

  // One ticket, to k5's owner; none to the hardware team.
  REQUIRE(fleet.kiln("ci", {"tickets", "--json"}, &out) == 0);
  const auto tickets = nlohmann::json::parse(out);
  REQUIRE(tickets.size() == 1);
  CHECK(tickets[0].at("id") == culprit_ticket);
  CHECK(tickets[0].at("culprit") == "k5");
  CHECK(tickets[0].at("team") == "kernels-team");
  REQUIRE(fleet.kiln("ci", {"risks", "--register", (dir / "risks.toml").string(), "--json"}, &out) == 0);
  const auto latest = nlohmann::json::parse(out).at("risks")[0].at("latest");
  CHECK(latest.at("verdict") == "failed");
  CHECK(latest.at("paged") == nlohmann::json{{"team", "kernels-team"}, {"ticket", culprit_ticket}, {"by_triage", true}});
  REQUIRE(fleet.kiln("ci", {"risks", "--register", (dir / "risks.toml").string()}, &out) == 0);
  CHECK(out.find("paged kernels-team through the run's ticket " + culprit_ticket) != std::string::npos);
  CHECK(out.find("paged hardware") == std::string::npos);
}

TEST_CASE("two multi-node models on the same two nodes take turns: each gang's lease is released once its jobs end") {
  // Both wide models need both nodes: the second gang's lease waits for the first's. The run must
  // hear the first gang's jobs end while the second waits for its lease, release that lease, and
  // so let the second gang run: a nightly that finishes. The grant is pushed to the run by its
  // watch, as the jobs' changes are: no lease is looked for, and the node list is read at the
  // start, not after every change.
  Fleet fleet("risks-two-gangs");
  const fs::path dir = fleet.dir();
  const std::string coordinator_http = Fleet::free_loopback_address();
  fleet.add_coordinator_tables(http_table(coordinator_http));
  start_two_nodes(fleet);
  std::string set = kWideSet;
  set += R"(
[[model]]
name = "mlp-bf16-wide-2"
size_class = "medium"
chips = 16
minutes = 1
components = ["gemm-bf16", "gelu"]
owner_team = "recsys-models"
workload = "mlp-bf16"
seed = 7
proxy = "mlp-bf16-it"
)";
  write(dir / "models.toml", set);
  fleet.start_qualifier("qualifier");
  const std::string candidate = prepare_bundles(fleet, "k4");

  std::string out;
  const std::string before = scrape(coordinator_http);
  // --json: the follower prints no progress, and so reads no fleet; what is counted is the run's.
  const int nightly = fleet.kiln(
      "ci", {"--json", "nightly", "--bundle", candidate, "--wait", "--run-id", "nightly-two-gangs"}, &out, 300s);
  INFO(out);
  REQUIRE(nightly == 0);
  const std::string after = scrape(coordinator_http);
  const auto answered = [&](const std::string& type) {
    const std::string series = "kiln_client_request_seconds_count{type=\"" + type + "\"}";
    return sample_value(after, series) - sample_value(before, series);
  };
  MESSAGE("the nightly's watch_jobs " << answered("watch_jobs") << ", list_leases " << answered("list_leases")
                                      << ", list_nodes " << answered("list_nodes") << ", request_lease "
                                      << answered("request_lease"));
  CHECK(answered("request_lease") >= 2);
  CHECK(answered("watch_jobs") > 0);
  CHECK(answered("list_leases") == 0);
  // Read by the run's start (its revisions and its driver's first list) and its fleet check.
  CHECK(answered("list_nodes") <= 4);
  const auto report = run_report(fleet, "nightly-two-gangs");
  for (const char* model : {"mlp-bf16-wide", "mlp-bf16-wide-2"}) {
    const auto& wide = model_of(report, model);
    INFO(wide.dump());
    CHECK(wide.at("verdict") == "passed");
    const auto nodes = wide.at("nodes").dump();
    CHECK(nodes.find("n01") != std::string::npos);
    CHECK(nodes.find("n02") != std::string::npos);
  }
}

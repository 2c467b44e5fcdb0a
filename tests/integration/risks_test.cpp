// The risk register and waivers end to end with the real binaries: a nightly fails a blocking
// gate of the register, whose page is the run's ticket to the culprit's owner; a person who is not
// an approver of the owning team is refused; an approver's waiver lets the run through, shown in
// its report and the audit log; once the waiver expires, the gate fails the run again. And a
// multi-node model whose outputs are wrong is judged, bisected and ticketed like any model, its
// hardware risk paging no one a second time.
#include <doctest/doctest.h>

#include <filesystem>

#include <nlohmann/json.hpp>

#include "coordinator/cli/client.h"
#include "tests/integration/fleet_fixture.h"
#include "tests/integration/qualification_fleet.h"

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

// The run's report as recorded (`kiln run` exits 1 for a failed run).
nlohmann::json run_report(Fleet& fleet, const std::string& run_id) {
  std::string out;
  std::string err;
  REQUIRE(fleet.kiln_split("ci", {"run", run_id, "--json"}, &out, &err) <= 1);
  return nlohmann::json::parse(out);
}

const nlohmann::json& model_of(const nlohmann::json& report, const std::string& model) {
  for (const auto& entry : report.at("models")) {
    if (entry.at("model") == model) return entry;
  }
  FAIL("no model run of " << model);
  return report;
}

}  // namespace

TEST_CASE("a failing gate pages its team; an approver's waiver lets the run through until it expires") {
  Fleet fleet("risks");
  fleet.add_key("approver", "developer");
  fleet.add_key("bystander", "developer");
  fleet.add_key("auditor", "ops");
  const fs::path dir = fleet.dir();
  // The coordinator checks waivers against the same register the qualifier judges gates by.
  write(dir / "risks.toml", kRegister);
  fleet.add_coordinator_settings("risk_register = \"risks.toml\"\n");
  start_two_nodes(fleet, {{"risk_register", "\"risks.toml\""}});
  fleet.start_qualifier("qualifier");
  const std::string candidate = prepare_bundles(fleet, "k3");
  const std::string registry = (dir / "risks.toml").string();

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
  const std::vector<std::string> waive = {"waive",    "nightly-w", "--model",    "mlp-fp8-it",        "--metric",
                                          "throughput", "--reason", "10% low, fix in k7", "--register", registry};
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

  // The approver's waiver lets the finished run through: the qualifier judges it again.
  std::vector<std::string> briefly = waive;
  briefly.insert(briefly.end(), {"--expires", "20s"});
  REQUIRE(fleet.kiln("approver", briefly, &out) == 0);
  CHECK(out.find("waived by approver until ") != std::string::npos);
  REQUIRE(Fleet::eventually([&] { return run_report(fleet, "nightly-w").at("passed") == true; }, 15s));
  const auto waived = run_report(fleet, "nightly-w");
  REQUIRE(waived.at("waivers").size() == 1);
  CHECK(waived.at("waivers")[0].at("approver") == "approver");
  CHECK(model_of(waived, "mlp-fp8-it").at("fails_run") == false);
  CHECK(model_of(waived, "mlp-fp8-it").at("verdict") == "performance_regression");
  REQUIRE(fleet.kiln("ci", {"run", "nightly-w"}, &out) == 0);
  CHECK(out.find("passed with waivers") != std::string::npos);
  CHECK(out.find("WAIVED mlp-fp8-it on revision a (throughput): waived by approver until ") != std::string::npos);
  REQUIRE(fleet.kiln("ci", {"risks", "--register", registry, "--json"}, &out) == 0);
  CHECK(nlohmann::json::parse(out).at("risks")[0].at("latest").at("verdict") == "waived");
  REQUIRE(fleet.kiln("ci", {"waivers"}, &out) == 0);
  CHECK(out.find("nightly-w") != std::string::npos);
  REQUIRE(fleet.kiln("auditor", {"audit"}, &out) == 0);
  CHECK(out.find("waiver") != std::string::npos);
  CHECK(out.find("gate mlp-fp8-it throughput") != std::string::npos);
  CHECK(out.find("approver") != std::string::npos);

  // Once the waiver has expired, the run fails again.
  REQUIRE(Fleet::eventually([&] { return run_report(fleet, "nightly-w").at("passed") == false; }, 60s));
  const auto expired = run_report(fleet, "nightly-w");
  CHECK(model_of(expired, "mlp-fp8-it").at("fails_run") == true);
  CHECK(expired.at("summary").get<std::string>().find("EXPIRED mlp-fp8-it") != std::string::npos);
  CHECK(fleet.kiln("ci", {"run", "nightly-w"}, &out) == 1);
  REQUIRE(fleet.kiln("ci", {"risks", "--register", registry, "--json"}, &out) == 0);
  CHECK(nlohmann::json::parse(out).at("risks")[0].at("latest").at("verdict") == "failed");
  REQUIRE(fleet.kiln("ci", {"waivers", "--all"}, &out) == 0);
  CHECK(out.find("EXPIRED waived by approver") != std::string::npos);
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

// The risk register: its loader, gap detection from recorded runs, and the waiver rule.
#include <doctest/doctest.h>

#include <filesystem>

#include <nlohmann/json.hpp>

#include "qualification/model_set.h"
#include "records/risk_register.h"
#include "qualification/risk_status.h"
#include "qualification/run_report.h"
#include "qualification/stability_gates.h"
#include "qualification/waiver.h"

namespace q = kiln::qualification;
using nlohmann::json;

namespace {

constexpr std::int64_t kHourMs = 3600 * 1000;
constexpr std::int64_t kNow = 1'800'000'000'000;

constexpr const char* kSet = R"(
[[model]]
name = "moe-large"
size_class = "large"
chips = 32
minutes = 45
components = ["gemm-bf16", "attention"]
owner_team = "llm-models"

[[model]]
name = "mlp-small"
size_class = "small"
chips = 1
minutes = 10
components = ["gemm-fp8"]
owner_team = "recsys-models"

[[model]]
name = "train-small"
size_class = "small"
chips = 1
minutes = 10
components = ["sgd"]
owner_team = "training-models"
)";

constexpr const char* kRegister = R"(
model_set = "set.toml"

[[team]]
name = "kernels"
approvers = ["mei"]

[[team]]
name = "compiler"
approvers = ["priya"]

[[risk]]
id = "moe-tokens"
title = "MoE tokens/s"
owner_team = "kernels"
layer = "kernels"
tier = "nightly"
gate = { model = "moe-large", metric = "throughput" }
page = { team = "kernels", severity = "sev1" }

[[risk]]
id = "fp8-presubmit"
title = "fp8 numerics"
owner_team = "compiler"
layer = "compiler"
tier = "presubmit"
gate = { model = "mlp-small", metric = "correctness" }
page = { team = "compiler", severity = "sev2" }

[[risk]]
id = "release-fp8"
title = "fp8 throughput at release"
owner_team = "compiler"
layer = "compiler"
tier = "release"
gate = { model = "mlp-small", metric = "throughput" }
page = { team = "compiler", severity = "sev2" }
)";

q::ModelSet set() {
  auto s = q::parse_model_set(kSet, "set.toml");
  REQUIRE(s);
  return *s;
}

q::RiskRegister reg(const std::string& text = kRegister) {
  auto r = q::parse_risk_register(text, "risks.toml");
  INFO((r ? "" : r.error().message));
  REQUIRE(r);
  return *r;
}

json model_entry(const std::string& model, const std::string& verdict, bool performance = true) {
  const bool fails = verdict == "performance_regression" || verdict == "correctness_regression";
  return {{"model", model},         {"revision", "a"},          {"verdict", verdict}, {"fails_run", fails},
          {"detail", "the detail"}, {"performance", performance ? json::object() : json(nullptr)}};
}

json report(const std::string& run_id, const std::string& tier, std::int64_t finished_at_ms, std::vector<json> models) {
  bool passed = true;
  for (const auto& m : models) passed = passed && !m.at("fails_run").get<bool>();
  return {{"schema", "kiln.qualification-run/1"},
          {"run_id", run_id},
          {"tier", tier},
          {"finished", true},
          {"passed", passed},
          {"started_at_ms", finished_at_ms - kHourMs},
          {"finished_at_ms", finished_at_ms},
          {"models", models},
          {"summary", "kiln " + tier + " " + run_id + ": " + (passed ? "passed" : "FAILED") + " (candidate abc)\n"}};
}

const q::RiskStatus& status_of(const std::vector<q::RiskStatus>& statuses, const std::string& id) {
  for (const auto& s : statuses) {
    if (s.risk->id == id) return s;
  }
  FAIL("no status for " << id);
  return statuses.front();
}

bool has_gap(const q::RiskStatus& s, q::GapKind kind) {
  for (const auto& gap : s.gaps) {
    if (gap.kind == kind) return true;
  }
  return false;
}

}  // namespace

TEST_CASE("the risk register loads its teams, risks, gates and pages") {
  const auto r = reg();
  REQUIRE(r.risks.size() == 3);
  CHECK(r.model_set == "set.toml");
  const q::Risk* moe = r.find("moe-tokens");
  REQUIRE(moe);
  CHECK(moe->layer == q::RiskLayer::kernels);
  CHECK(moe->tier == q::RiskTier::nightly);
  CHECK(moe->page.severity == q::Severity::sev1);
  CHECK(moe->gate->model == "moe-large");
  REQUIRE(r.team("kernels"));
  CHECK(r.team("kernels")->approvers == std::vector<std::string>{"mei"});
  CHECK(r.risks_of_gate("mlp-small", q::GateMetric::correctness).size() == 1);
}

TEST_CASE("the checked-in register loads, and its gates name models of the checked-in set") {
  const auto path = std::filesystem::path(KILN_SOURCE_DIR) / q::kRiskRegisterPath;
  auto r = q::load_risk_register_file(path);
  INFO((r ? "" : r.error().message));
  REQUIRE(r);
  auto s = q::load_model_set_file(r->model_set);
  REQUIRE(s);
  CHECK(r->risks.size() >= 10);
  for (const auto layer : {q::RiskLayer::compiler, q::RiskLayer::kernels, q::RiskLayer::runtime,
                           q::RiskLayer::firmware, q::RiskLayer::hardware}) {
    CHECK(std::any_of(r->risks.begin(), r->risks.end(), [&](const q::Risk& risk) { return risk.layer == layer; }));
  }
  // One stability run of the set's model judges both stability risks.
  for (const auto& risk : r->risks) {
    if (risk.tier == q::RiskTier::stability) CHECK(risk.gate->model == "train-tiny-large-01");
  }
  // With no run recorded every gate is a gap of one kind only: it has never run.
  const auto statuses = q::assess_risks(*r, *s, {}, {}, kNow);
  for (const auto& status : statuses) {
    REQUIRE(status.gaps.size() == 1);
    CHECK(status.gaps[0].kind == q::GapKind::never_run);
  }
}

TEST_CASE("the register's mistakes are reported with file:line and the nearest name") {
  std::string text = kRegister;
  text.replace(text.find("layer = \"kernels\""), 17, "layer = \"kernel\"");
  text.replace(text.find("severity = \"sev2\""), 17, "severity = \"high\"");
  text.replace(text.find("owner_team = \"compiler\""), 23, "owner_team = \"compilr\"");
  text += "\n[[risk]]\nid = \"moe-tokens\"\ntitle = \"again\"\nlayer = \"runtime\"\ntier = \"weekly\"\n"
          "page = { team = \"runtime\", severity = \"sev3\" }\ngates = \"x\"\n";
  auto r = q::parse_risk_register(text, "risks.toml");
  REQUIRE(!r);
  const std::string message = r.error().message;
  CHECK(message.find("risks.toml:16:9: layer 'kernel' of risk 'moe-tokens' is not one of") != std::string::npos);
  CHECK(message.find("did you mean 'kernels'?") != std::string::npos);
  CHECK(message.find("severity 'high'") != std::string::npos);
  CHECK(message.find("owner_team 'compilr' is not a declared [[team]]; did you mean 'compiler'?") != std::string::npos);
  CHECK(message.find("risk 'moe-tokens' is declared twice") != std::string::npos);
  CHECK(message.find("tier 'weekly'") != std::string::npos);
  CHECK(message.find("unknown key 'gates' in [[risk]]; did you mean 'gate'?") != std::string::npos);
}

TEST_CASE("a risk without an owner or a gate, or whose gate names an unknown model or metric, is a gap") {
  std::string text = kRegister;
  text += R"(
[[risk]]
id = "orphan"
title = "nobody owns it"
layer = "firmware"
tier = "nightly"
gate = { model = "moe-large", metric = "throughput" }
page = { team = "firmware", severity = "sev3" }

[[risk]]
id = "ungated"
title = "no gate covers it"
owner_team = "kernels"
layer = "kernels"
tier = "nightly"
page = { team = "kernels", severity = "sev3" }

[[risk]]
id = "typos"
title = "its gate names nothing real"
owner_team = "kernels"
layer = "kernels"
tier = "nightly"
gate = { model = "moe-larg", metric = "tokens" }
page = { team = "kernels", severity = "sev3" }
)";
  const auto runs = q::gate_runs_from_reports({report("n1", "nightly", kNow - kHourMs, {model_entry("moe-large", "passed")})});
  const auto r = reg(text);
  const auto statuses = q::assess_risks(r, set(), runs, {}, kNow);
  const auto& orphan = status_of(statuses, "orphan");
  CHECK(has_gap(orphan, q::GapKind::no_owner));
  CHECK(orphan.latest->state == q::GateState::passed);
  CHECK(has_gap(status_of(statuses, "ungated"), q::GapKind::no_gate));
  const auto& typos = status_of(statuses, "typos");
  CHECK(has_gap(typos, q::GapKind::unknown_model));
  CHECK(has_gap(typos, q::GapKind::unknown_metric));
  CHECK(typos.gaps[0].detail.find("did you mean 'moe-large'?") != std::string::npos);
  CHECK(q::risks_text(statuses).find("GAP orphan (no_owner)") != std::string::npos);
  CHECK(q::to_json(statuses).at("gaps").get<std::size_t>() == q::gap_count(statuses));
}

TEST_CASE("each risk's verdict is its gate's in the latest run of its tier, with its age") {
  const auto runs = q::gate_runs_from_reports({
      report("n1", "nightly", kNow - 30 * kHourMs, {model_entry("moe-large", "passed")}),
      report("n2", "nightly", kNow - 2 * kHourMs, {model_entry("moe-large", "performance_regression")}),
      // A smoke does not judge a nightly gate; a run still going judges nothing.
      report("s1", "smoke", kNow - kHourMs, {model_entry("moe-large", "passed"), model_entry("mlp-small", "passed")}),
  });
  const auto r = reg();
  const auto statuses = q::assess_risks(r, set(), runs, {}, kNow);
  const auto& moe = status_of(statuses, "moe-tokens");
  REQUIRE(moe.latest);
  CHECK(moe.latest->run_id == "n2");
  CHECK(moe.latest->state == q::GateState::failed);
  CHECK(moe.latest->age_ms == 2 * kHourMs);
  CHECK(moe.gaps.empty());
  CHECK(status_of(statuses, "fp8-presubmit").latest->run_id == "s1");
  CHECK(q::risks_text(statuses).find("FAILED in n2") != std::string::npos);
}

TEST_CASE("a gate not judged within its tier's period is a gap") {
  const auto r = reg();
  SUBCASE("nightly: more than a day") {
    const auto runs = q::gate_runs_from_reports({report("n1", "nightly", kNow - 25 * kHourMs,
                                                        {model_entry("moe-large", "passed")})});
    CHECK(has_gap(status_of(q::assess_risks(r, set(), runs, {}, kNow), "moe-tokens"), q::GapKind::stale));
    CHECK(!has_gap(status_of(q::assess_risks(r, set(), runs, {}, kNow - 2 * kHourMs), "moe-tokens"),
                   q::GapKind::stale));
  }
  SUBCASE("presubmit: a change touching the model merged after its last smoke") {
    const auto runs = q::gate_runs_from_reports({report("s1", "smoke", kNow - kHourMs, {model_entry("mlp-small", "passed")})});
    q::Change other{"c1", q::Layer::kernels, "kernels", {"attention"}, kNow - 10 * 60 * 1000, "", std::nullopt};
    CHECK(!has_gap(status_of(q::assess_risks(r, set(), runs, {other}, kNow), "fp8-presubmit"), q::GapKind::stale));
    q::Change touching{"c2", q::Layer::compiler, "compiler", {"gemm-fp8"}, kNow - 10 * 60 * 1000, "", std::nullopt};
    const auto statuses = q::assess_risks(r, set(), runs, {other, touching}, kNow);
    const auto& s = status_of(statuses, "fp8-presubmit");
    REQUIRE(has_gap(s, q::GapKind::stale));
    CHECK(s.gaps[0].detail.find("change c2") != std::string::npos);
  }
  SUBCASE("release: the last release qualification did not judge it") {
    const auto judged = report("r1", "release", kNow - 48 * kHourMs, {model_entry("mlp-small", "passed")});
    CHECK(status_of(q::assess_risks(r, set(), q::gate_runs_from_reports({judged}), {}, kNow), "release-fp8")
              .gaps.empty());
    const auto later = report("r2", "release", kNow - kHourMs, {model_entry("moe-large", "passed")});
    const auto statuses = q::assess_risks(r, set(), q::gate_runs_from_reports({judged, later}), {}, kNow);
    const auto& s = status_of(statuses, "release-fp8");
    CHECK(has_gap(s, q::GapKind::stale));
    CHECK(s.latest->run_id == "r1");
  }
  SUBCASE("never judged") {
    CHECK(has_gap(status_of(q::assess_risks(r, set(), {}, {}, kNow), "moe-tokens"), q::GapKind::never_run));
  }
}

TEST_CASE("only an approver of the gate's owning team may waive it") {
  const auto r = reg();
  auto team = q::waiving_team(r, "moe-tokens", "moe-large", q::GateMetric::throughput, "mei");
  REQUIRE(team);
  CHECK(*team == "kernels");
  // By run id: the risks gating that model and metric decide.
  CHECK(q::waiving_team(r, "nightly-1", "moe-large", q::GateMetric::throughput, "mei"));
  auto refused = q::waiving_team(r, "nightly-1", "moe-large", q::GateMetric::throughput, "priya");
  REQUIRE(!refused);
  CHECK(refused.error().code == kiln::Errc::unauthorized);
  CHECK(refused.error().message.find("ask one of kernels (mei)") != std::string::npos);
  auto ungated = q::waiving_team(r, "nightly-1", "moe-large", q::GateMetric::correctness, "mei");
  REQUIRE(!ungated);
  CHECK(ungated.error().code == kiln::Errc::not_found);
}

TEST_CASE("a waiver needs a reason and an expiry within 30 days") {
  q::Waiver w{"moe-tokens", "moe-large", q::GateMetric::throughput, "kernels", "mei", "fix in c9", kNow,
              kNow + kHourMs, "", 0};
  CHECK(q::validate_new_waiver(w, kNow));
  auto no_reason = w;
  no_reason.reason.clear();
  CHECK(!q::validate_new_waiver(no_reason, kNow));
  auto past = w;
  past.expires_at_ms = kNow;
  CHECK(!q::validate_new_waiver(past, kNow));
  auto too_long = w;
  too_long.expires_at_ms = kNow + q::kMaxWaiverMs + 1;
  CHECK(q::validate_new_waiver(too_long, kNow).error().message.find("30 days") != std::string::npos);
  auto back = q::waiver_from_json(q::to_json(w));
  REQUIRE(back);
  CHECK(q::waiver_key(*back) == "moe-tokens/moe-large/throughput");
  CHECK(q::waiver_text(*back).starts_with("waived by mei until "));
}

TEST_CASE("a waived failing gate lets its run through until the waiver expires") {
  const auto r = reg();
  const q::Waiver w{"nightly-7", "moe-large", q::GateMetric::throughput, "kernels", "mei", "4% low, fix in c9", kNow,
                    kNow + 2 * kHourMs, "", 0};
  const json failed = report("nightly-7", "nightly", kNow, {model_entry("moe-large", "performance_regression"),
                                                            model_entry("mlp-small", "passed")});
  REQUIRE(!failed.at("passed").get<bool>());

  json waived = failed;
  const auto texts = q::apply_waivers(waived, {w}, r, kNow + kHourMs);
  REQUIRE(texts.size() == 1);
  CHECK(waived.at("passed").get<bool>());
  CHECK(!waived.at("models")[0].at("fails_run").get<bool>());
  CHECK(waived.at("summary").get<std::string>().find("passed with waivers") != std::string::npos);
  CHECK(waived.at("summary").get<std::string>().find("WAIVED moe-large on revision a (throughput): waived by mei") !=
        std::string::npos);
  // The register reads the waived verdict as such.
  const auto statuses = q::assess_risks(r, set(), q::gate_runs_from_reports({waived}), {}, kNow + kHourMs);
  CHECK(status_of(statuses, "moe-tokens").latest->state == q::GateState::waived);
  CHECK(status_of(statuses, "moe-tokens").latest->waiver.starts_with("waived by mei"));
  // While the very waiver it relied on is in force at the coordinator, the report stands.
  CHECK(q::revoke_lapsed_waivers(waived, {w}, kNow + kHourMs).empty());
  CHECK(waived.at("passed").get<bool>());

  SUBCASE("after expiry the next evaluation fails the gate") {
    json again = failed;
    CHECK(q::apply_waivers(again, {w}, r, kNow + 2 * kHourMs).empty());
    CHECK(!again.at("passed").get<bool>());
    // The report that relied on it is failed again, and the register reads the gate as failed.
    CHECK(status_of(q::assess_risks(r, set(), q::gate_runs_from_reports({waived}), {}, kNow + 2 * kHourMs),
                    "moe-tokens")
              .latest->state == q::GateState::failed);
    REQUIRE(q::revoke_lapsed_waivers(waived, {w}, kNow + 2 * kHourMs).size() == 1);
    CHECK(!waived.at("passed").get<bool>());
    CHECK(waived.at("models")[0].at("fails_run").get<bool>());
    CHECK(waived.at("waivers").empty());
    REQUIRE(waived.at("lapsed_waivers").size() == 1);
    CHECK(waived.at("lapsed_waivers")[0].at("why").get<std::string>().starts_with("expired at "));
    const std::string summary = waived.at("summary").get<std::string>();
    CHECK(summary.starts_with("kiln nightly nightly-7: FAILED ("));
    CHECK(summary.find("EXPIRED moe-large on revision a (throughput): waived by mei") != std::string::npos);
  }
  SUBCASE("a waiver withdrawn lets nothing through from then on, whatever the report recorded") {
    auto withdrawn = w;
    withdrawn.withdrawn_by = "jonas";
    withdrawn.withdrawn_at_ms = kNow + kHourMs / 2;
    json again = failed;
    CHECK(q::apply_waivers(again, {withdrawn}, r, kNow + kHourMs).empty());
    const auto lapsed = q::revoke_lapsed_waivers(waived, {withdrawn}, kNow + kHourMs);
    REQUIRE(lapsed.size() == 1);
    CHECK(lapsed[0].find(": withdrawn by jonas at ") != std::string::npos);
    CHECK(!waived.at("passed").get<bool>());
    CHECK(waived.at("summary").get<std::string>().find("WITHDRAWN moe-large on revision a (throughput)") !=
          std::string::npos);
    CHECK(status_of(q::assess_risks(r, set(), q::gate_runs_from_reports({waived}), {}, kNow + kHourMs), "moe-tokens")
              .latest->state == q::GateState::failed);
  }
  SUBCASE("a waiver replaced by a shorter one: the report relied on the earlier one, which holds no more") {
    auto shorter = w;
    shorter.created_at_ms = kNow + kHourMs / 2;
    shorter.expires_at_ms = kNow + kHourMs / 2 + 45'000;
    const auto lapsed = q::revoke_lapsed_waivers(waived, {shorter}, kNow + kHourMs);
    REQUIRE(lapsed.size() == 1);
    CHECK(lapsed[0].find(": replaced by waived by mei until ") != std::string::npos);
    CHECK(!waived.at("passed").get<bool>());
    // Nor does the shorter one let it through once it has expired.
    CHECK(q::apply_waivers(waived, {shorter}, r, kNow + kHourMs).empty());
    CHECK(!waived.at("passed").get<bool>());
  }
  SUBCASE("a waiver no longer recorded holds no more") {
    REQUIRE(q::revoke_lapsed_waivers(waived, {}, kNow + kHourMs).size() == 1);
    CHECK(!waived.at("passed").get<bool>());
  }
  SUBCASE("another run is not waived by a waiver of one run") {
    json other = failed;
    other["run_id"] = "nightly-8";
    CHECK(q::apply_waivers(other, {w}, r, kNow + kHourMs).empty());
  }
  SUBCASE("a waiver by someone the register does not list lets nothing through") {
    auto forged = w;
    forged.approver = "priya";
    json again = failed;
    CHECK(q::apply_waivers(again, {forged}, r, kNow + kHourMs).empty());
  }
  SUBCASE("a waiver of the risk covers its gate in every run") {
    auto by_risk = w;
    by_risk.scope = "moe-tokens";
    json other = failed;
    other["run_id"] = "nightly-8";
    CHECK(q::apply_waivers(other, {by_risk}, r, kNow + kHourMs).size() == 1);
  }
  SUBCASE("a failure the waiver does not name still fails the run") {
    json two = report("nightly-7", "nightly", kNow, {model_entry("moe-large", "performance_regression"),
                                                     model_entry("mlp-small", "correctness_regression")});
    CHECK(q::apply_waivers(two, {w}, r, kNow + kHourMs).size() == 1);
    CHECK(!two.at("passed").get<bool>());
  }
}

TEST_CASE("a failing gate pages its risk's team with its severity, once per run, and a waived one pages no one") {
  const auto r = reg();
  const json failed = report("nightly-7", "nightly", kNow, {model_entry("moe-large", "performance_regression")});
  const auto tickets = q::risk_gate_tickets(r, failed, kNow);
  REQUIRE(tickets.size() == 1);
  CHECK(tickets[0].kind == q::TicketKind::risk_gate);
  CHECK(tickets[0].team == "kernels");
  CHECK(tickets[0].severity == "sev1");
  CHECK(tickets[0].culprit_change == "risk:moe-tokens@nightly-7");
  CHECK(q::validate(tickets[0]));
  auto back = q::ticket_from_json_text(q::to_json_text(tickets[0]), "ticket");
  REQUIRE(back);
  CHECK(back->severity == "sev1");
  // A smoke does not judge the nightly's gate; a passing nightly pages no one.
  CHECK(q::risk_gate_tickets(r, report("s1", "smoke", kNow, {model_entry("moe-large", "performance_regression")}), kNow)
            .empty());
  CHECK(q::risk_gate_tickets(r, report("n8", "nightly", kNow, {model_entry("moe-large", "passed")}), kNow).empty());
  json waived = failed;
  const q::Waiver w{"moe-tokens", "moe-large", q::GateMetric::throughput, "kernels", "mei", "fix in c9", kNow,
                    kNow + kHourMs, "", 0};
  REQUIRE(q::apply_waivers(waived, {w}, r, kNow).size() == 1);
  CHECK(q::risk_gate_tickets(r, waived, kNow).empty());
}

TEST_CASE("a failing gate's page follows the run's triage: one incident, one page, to the owner triage names") {
  // The shipped register's hardware-fp8-rounding risk gates transformer-block-fp8-small-01
  // correctness in the nightly, and pages the hardware team.
  auto loaded = q::load_risk_register_file(std::filesystem::path(KILN_SOURCE_DIR) / q::kRiskRegisterPath);
  REQUIRE(loaded);
  const q::RiskRegister& r = *loaded;
  const std::string model = "transformer-block-fp8-small-01";
  const auto nightly_with = [&](json entry, std::vector<q::Ticket> filed) {
    entry["owner_team"] = "llm-models";
    json doc = report("nightly-9", "nightly", kNow, {entry});
    doc["tickets"] = json::array();
    for (const auto& t : filed) doc["tickets"].push_back(json::parse(q::to_json_text(t)));
    return doc;
  };
  const auto page_of = [&](const json& doc) {
    auto pages = q::risk_gate_pages(r, doc, kNow);
    REQUIRE(pages.size() == 1);
    CHECK(pages[0].risk->id == "hardware-fp8-rounding");
    CHECK(pages[0].result.state == q::GateState::failed);
    return pages[0];
  };

  SUBCASE("a hardware suspect: the lab's ticket is the page, the hardware team is not paged again") {
    const q::Ticket lab = q::make_ticket(q::TicketKind::hardware_suspect, "lab", "node n07 suspect", "node:n07",
                                         std::nullopt, "{}", kNow);
    json entry = model_entry(model, "hardware_suspect", false);
    entry["ticket_ids"] = {lab.id};
    const json doc = nightly_with(entry, {lab});
    const auto page = page_of(doc);
    CHECK_FALSE(page.ticket);
    CHECK(page.result.paged_team == "lab");
    CHECK(page.result.paged_ticket == lab.id);
    CHECK(page.result.paged_by_triage);
    CHECK(q::risk_gate_tickets(r, doc, kNow).empty());
    CHECK(q::page_text(page).find("paged lab through the run's ticket " + lab.id) != std::string::npos);
    // kiln risks links the lab's ticket where it said "paged hardware".
    auto s = q::load_model_set_file(r.model_set);
    REQUIRE(s);
    const auto statuses = q::assess_risks(r, *s, q::gate_runs_from_reports({doc}), {}, kNow);
    const std::string text = q::risks_text(statuses);
    CHECK(text.find("(paged lab through the run's ticket " + lab.id + ")") != std::string::npos);
    CHECK(text.find("paged hardware") == std::string::npos);
    const json listed = q::to_json(statuses);
    for (const auto& risk : listed.at("risks")) {
      if (risk.at("id") != "hardware-fp8-rounding") continue;
      CHECK(risk.at("latest").at("paged") == json{{"team", "lab"}, {"ticket", lab.id}, {"by_triage", true}});
    }
  }
  SUBCASE("a bisected software regression: the culprit's owner's ticket is the page") {
    q::Change culprit;
    culprit.id = "c42";
    culprit.layer = q::Layer::compiler;
    culprit.owner_team = "compiler-team";
    const q::Ticket found =
        q::make_culprit_ticket(culprit, q::TicketKind::correctness_regression, "outputs incorrect", "{}", kNow);
    json entry = model_entry(model, "correctness_regression", false);
    entry["ticket_ids"] = {found.id};
    const auto page = page_of(nightly_with(entry, {found}));
    CHECK_FALSE(page.ticket);
    CHECK(page.result.paged_team == "compiler-team");
    CHECK(page.result.paged_ticket == found.id);
  }
  SUBCASE("a software regression no bisection pinned: the model's owner, never the hardware team") {
    const auto page = page_of(nightly_with(model_entry(model, "correctness_regression", false), {}));
    REQUIRE(page.ticket);
    CHECK(page.ticket->team == "llm-models");
    CHECK(page.ticket->severity == "sev2");
    CHECK(page.ticket->culprit_change == "risk:hardware-fp8-rounding@nightly-9");
    CHECK(page.result.paged_team == "llm-models");
    CHECK(page.result.paged_ticket == page.ticket->id);
    CHECK_FALSE(page.result.paged_by_triage);
  }
  SUBCASE("a software risk's unpinned regression still pages the risk's own team") {
    const auto pages = q::risk_gate_pages(
        r, nightly_with(model_entry("transformer-block-fp8-medium-01", "correctness_regression", false), {}), kNow);
    REQUIRE(pages.size() == 1);
    CHECK(pages[0].risk->id == "compiler-fp8-fusion");
    REQUIRE(pages[0].ticket);
    CHECK(pages[0].ticket->team == "compiler");
  }
}

TEST_CASE("a waived model run is no JUnit failure, and says so") {
  q::RunReport run;
  run.run_id = "nightly-7";
  run.finished = true;
  run.finished_at_ms = kNow;
  q::ModelReport model;
  model.model = "moe-large";
  model.revision = "a";
  model.owner_team = "llm-models";
  model.verdict = q::ModelVerdict::performance_regression;
  model.detail = "throughput -4%";
  run.models.push_back(model);
  json document = q::to_json(run);
  const auto failing = q::report_outline_from_json(document);
  REQUIRE(failing);
  CHECK(q::to_junit_xml(*failing).find("<failure") != std::string::npos);
  const q::Waiver w{"nightly-7", "moe-large", q::GateMetric::throughput, "kernels", "mei", "fix in c9", kNow,
                    kNow + kHourMs, "", 0};
  REQUIRE(q::apply_waivers(document, {w}, reg(), kNow).size() == 1);
  const auto waived = q::report_outline_from_json(document);
  REQUIRE(waived);
  const std::string junit = q::to_junit_xml(*waived);
  CHECK(junit.find("<failure") == std::string::npos);
  CHECK(junit.find("waived by mei until ") != std::string::npos);
}

namespace {

constexpr const char* kStabilityRegister = R"(
model_set = "set.toml"

[[team]]
name = "runtime"
approvers = ["sam"]

[[team]]
name = "hardware"
approvers = ["dana"]

[[risk]]
id = "allocator-leak"
title = "the allocator leaks over a long run"
owner_team = "runtime"
layer = "runtime"
tier = "stability"
gate = { model = "train-small", metric = "loss_curve" }
page = { team = "runtime", severity = "sev2" }
period_days = 7

[[risk]]
id = "thermal-derating"
title = "thermal derating slows long runs"
owner_team = "hardware"
layer = "hardware"
tier = "stability"
gate = { model = "train-small", metric = "throughput" }
page = { team = "hardware", severity = "sev3" }
period_days = 7
)";

kiln::stability::RankRun rank_on(const std::string& node, std::uint32_t rank,
                                 std::vector<kiln::stability::Failure> failures = {}) {
  kiln::stability::RankRun run;
  run.rank = rank;
  run.job_id = 10 + rank;
  run.node_id = node;
  run.reported = true;
  run.chips = 2;
  run.steps = 700;
  run.run_hours = 1;
  run.failures = std::move(failures);
  return run;
}

kiln::stability::Failure failure(kiln::stability::FailureKind kind, std::uint64_t step) {
  kiln::stability::Failure f;
  f.kind = kind;
  f.step = step;
  f.detail = "the evidence";
  return f;
}

q::GateState state_of(const std::vector<q::StabilityGate>& gates, q::GateMetric metric) {
  for (const auto& gate : gates) {
    if (gate.metric == metric) return gate.state;
  }
  FAIL("no gate " << kiln::enum_name(metric));
  return q::GateState::passed;
}

json stability_document(std::vector<kiln::stability::RankRun> ranks, const std::string& run_id,
                        std::int64_t finished_at_ms) {
  const auto report = kiln::stability::make_report("train-small", 4, 1, {}, std::move(ranks));
  return q::stability_run_document(report,
                                   {run_id, "train-small", "a", finished_at_ms - kHourMs, finished_at_ms, {{"n01", "sim"}}});
}

}  // namespace

TEST_CASE("a stability run judges its model's loss curve, throughput and device errors") {
  using kiln::stability::FailureKind;
  const auto gates_of = [](std::vector<kiln::stability::RankRun> ranks) {
    return q::stability_gates(kiln::stability::make_report("train-small", 4, 1, {}, std::move(ranks)));
  };
  const auto clean = gates_of({rank_on("n01", 0), rank_on("n02", 1)});
  REQUIRE(clean.size() == 3);
  for (const auto& gate : clean) CHECK(gate.state == q::GateState::passed);

  for (const auto kind : {FailureKind::nan, FailureKind::loss_spike, FailureKind::hang}) {
    const auto gates = gates_of({rank_on("n01", 0, {failure(kind, 40)}), rank_on("n02", 1)});
    CHECK(state_of(gates, q::GateMetric::loss_curve) == q::GateState::failed);
    CHECK(state_of(gates, q::GateMetric::throughput) == q::GateState::passed);
    CHECK(gates[0].detail.find(std::string(kiln::enum_name(kind)) + " on n01 rank 0 at step 40: the evidence") !=
          std::string::npos);
  }
  const auto decayed = gates_of({rank_on("n01", 0), rank_on("n02", 1, {failure(FailureKind::throughput_decay, 300)})});
  CHECK(state_of(decayed, q::GateMetric::throughput) == q::GateState::failed);
  CHECK(state_of(decayed, q::GateMetric::loss_curve) == q::GateState::passed);
  for (const auto kind : {FailureKind::ecc, FailureKind::link}) {
    CHECK(state_of(gates_of({rank_on("n01", 0, {failure(kind, 9)})}), q::GateMetric::correctness) ==
          q::GateState::failed);
  }
  // A rank that did not report leaves the gates it did not fail unjudged, not passed.
  kiln::stability::RankRun lost = rank_on("n02", 1);
  lost.reported = false;
  const auto partial = gates_of({rank_on("n01", 0, {failure(FailureKind::nan, 5)}), lost});
  CHECK(state_of(partial, q::GateMetric::loss_curve) == q::GateState::failed);
  CHECK(state_of(partial, q::GateMetric::throughput) == q::GateState::inconclusive);
}

TEST_CASE("a recorded stability run gives its risks their verdict, pages their teams, and takes a waiver per gate") {
  using kiln::stability::FailureKind;
  const auto r = reg(kStabilityRegister);
  const json clean = stability_document({rank_on("n01", 0), rank_on("n02", 1)}, "stability-1", kNow - 2 * kHourMs);
  CHECK(clean.at("schema") == "kiln.stability-run/1");
  CHECK(clean.at("tier") == "stability");
  CHECK(clean.at("models").size() == 3);
  auto statuses = q::assess_risks(r, set(), q::gate_runs_from_reports({clean}), {}, kNow);
  for (const auto& id : {"allocator-leak", "thermal-derating"}) {
    const auto& s = status_of(statuses, id);
    REQUIRE(s.latest);
    CHECK(s.latest->state == q::GateState::passed);
    CHECK(s.latest->run_id == "stability-1");
    CHECK(s.gaps.empty());
  }
  // Past its period, the run no longer covers the risk.
  CHECK(has_gap(status_of(q::assess_risks(r, set(), q::gate_runs_from_reports({clean}), {}, kNow + 7 * 24 * kHourMs),
                          "allocator-leak"),
                q::GapKind::stale));

  json failed = stability_document({rank_on("n01", 0, {failure(FailureKind::loss_spike, 200)}),
                                    rank_on("n02", 1, {failure(FailureKind::throughput_decay, 300)})},
                                   "stability-2", kNow);
  CHECK(failed.at("passed") == false);
  CHECK(failed.at("summary").get<std::string>().starts_with("kiln stability stability-2: FAILED (train-small"));
  statuses = q::assess_risks(r, set(), q::gate_runs_from_reports({clean, failed}), {}, kNow);
  CHECK(status_of(statuses, "allocator-leak").latest->state == q::GateState::failed);
  CHECK(status_of(statuses, "thermal-derating").latest->state == q::GateState::failed);
  const auto tickets = q::risk_gate_tickets(r, failed, kNow);
  REQUIRE(tickets.size() == 2);
  CHECK(tickets[0].team == "runtime");
  CHECK(tickets[0].severity == "sev2");
  CHECK(tickets[0].culprit_change == "risk:allocator-leak@stability-2");
  CHECK(tickets[1].team == "hardware");

  // The runtime approver waives the loss curve: that gate reads waived and pages no one; the
  // throughput gate still fails the run.
  const q::Waiver w{"stability-2", "train-small", q::GateMetric::loss_curve, "runtime", "sam", "injected spikes", kNow,
                    kNow + kHourMs, "", 0};
  REQUIRE(q::apply_waivers(failed, {w}, r, kNow).size() == 1);
  CHECK(failed.at("passed") == false);
  statuses = q::assess_risks(r, set(), q::gate_runs_from_reports({failed}), {}, kNow);
  CHECK(status_of(statuses, "allocator-leak").latest->state == q::GateState::waived);
  CHECK(status_of(statuses, "thermal-derating").latest->state == q::GateState::failed);
  const auto still = q::risk_gate_tickets(r, failed, kNow);
  REQUIRE(still.size() == 1);
  CHECK(still[0].team == "hardware");
  // Once the throughput failure is waived too, the run passes with waivers.
  const q::Waiver thermal{"thermal-derating", "train-small", q::GateMetric::throughput, "hardware", "dana",
                          "chassis fans replaced next week", kNow, kNow + kHourMs, "", 0};
  REQUIRE(q::apply_waivers(failed, {w, thermal}, r, kNow).size() == 1);
  CHECK(failed.at("passed") == true);
  CHECK(failed.at("summary").get<std::string>().starts_with("kiln stability stability-2: passed with waivers ("));
}

TEST_CASE("a report read as a typed run and written back is the document it was read from, unknown keys kept") {
  json document = report("nightly-9", "nightly", kNow, {model_entry("moe-large", "performance_regression")});
  document["baseline_bundle_ids"] = {{"a", "b0"}};
  document["models"][0]["nodes"] = {"n01"};
  document["a_key_of_a_later_version"] = {{"kept", true}};
  const q::GateRun run = q::gate_run_from_report(document);
  CHECK(run.run_id == "nightly-9");
  CHECK(run.finished);
  CHECK(!run.passed);
  REQUIRE(run.models.size() == 1);
  CHECK(run.models[0].fails_run == true);
  CHECK(q::to_json(run).dump() == document.dump());
}

TEST_CASE("waivers judge a typed report: the report given stays as it was, the judged one is written as stored") {
  const auto r = reg();
  const q::Waiver w{"nightly-7", "moe-large", q::GateMetric::throughput, "kernels", "mei", "4% low, fix in c9", kNow,
                    kNow + 2 * kHourMs, "", 0};
  json stored = report("nightly-7", "nightly", kNow, {model_entry("moe-large", "performance_regression"),
                                                      model_entry("mlp-small", "passed")});
  stored["fleet_check"] = {{"nodes", 4}};
  const q::GateRun failed = q::gate_run_from_report(stored);

  const auto waived = q::apply_waivers(failed, {w}, r, kNow + kHourMs);
  REQUIRE(waived.texts.size() == 1);
  CHECK(!failed.passed);
  CHECK(failed.models[0].waivers.empty());
  CHECK(waived.run.passed);
  REQUIRE(waived.run.models[0].waivers.size() == 1);
  CHECK(waived.run.models[0].waivers[0].metric == "throughput");
  // The document overload stores exactly what the typed decision writes.
  json in_place = stored;
  q::apply_waivers(in_place, {w}, r, kNow + kHourMs);
  CHECK(q::to_json(waived.run).dump() == in_place.dump());
  CHECK(in_place.at("fleet_check") == stored.at("fleet_check"));

  // The waiver withdrawn: judged again, the run fails and says why.
  q::Waiver withdrawn = w;
  withdrawn.withdrawn_by = "jonas";
  withdrawn.withdrawn_at_ms = kNow + kHourMs;
  const auto revoked = q::revoke_lapsed_waivers(waived.run, {withdrawn}, kNow + kHourMs);
  REQUIRE(revoked.texts.size() == 1);
  CHECK(!revoked.run.passed);
  CHECK(revoked.run.waivers.empty());
  REQUIRE(revoked.run.lapsed_waivers.size() == 1);
  CHECK(revoked.run.lapsed_waivers[0].why.starts_with("withdrawn by jonas"));
  const json written = q::to_json(revoked.run);
  CHECK(!written.at("models")[0].contains("waivers"));
  CHECK(written.at("models")[0].at("fails_run") == true);
  CHECK(written.at("waivers") == json::array());
}

TEST_CASE("a finished stability run is judged once: waivers applied, its failing gates paged, marked judged") {
  using kiln::stability::FailureKind;
  const auto r = reg(kStabilityRegister);
  const json failed = stability_document({rank_on("n01", 0, {failure(FailureKind::loss_spike, 200)}),
                                          rank_on("n02", 1, {failure(FailureKind::throughput_decay, 300)})},
                                         "stability-3", kNow);
  const q::Waiver w{"stability-3", "train-small", q::GateMetric::loss_curve, "runtime", "sam", "injected spikes", kNow,
                    kNow + kHourMs, "", 0};
  auto judged = q::judge_stability_run(q::gate_run_from_report(failed), {w}, r, kNow);
  REQUIRE(judged);
  REQUIRE(judged->waived.size() == 1);
  REQUIRE(judged->pages.size() == 1);
  CHECK(judged->pages[0].team == "hardware");
  const json recorded = q::to_json(judged->run);
  CHECK(recorded.at("judged") == true);
  CHECK(recorded.at("passed") == false);
  CHECK(!q::judge_stability_run(q::gate_run_from_report(recorded), {w}, r, kNow));
}

// The fleets the interview scenarios play their questions on (interview_scenarios_test.cpp).
//
// The qualification day is served once and shared: a coordinator (SQLite, /metrics, a risk
// register, an environments repository it watches), three simulated nodes of revision a, and
// kiln-qualifier, with the demo's day of changes (docs/qualification.md, "The demo day"): c07 makes
// mlp-fp8 3% slower, c12 breaks the bf16 numerics of gemm-bf16. The bundle at c03 is the baseline;
// the presubmit smoke of c04 (a compiler change to the fp8 GEMM; one model) and the nightly of c16
// (four models of the shipped set) run once,
// and each question reads what they left, as a user would: the CLI, the run reports, /metrics.
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <doctest/doctest.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "tests/integration/fleet_fixture.h"
#include "tests/integration/git_repo.h"
#include "tests/integration/metrics_page.h"
#include "tests/integration/qualification_fleet.h"
#include "tests/integration/release_gates.h"

namespace kiln::testing {

inline const std::filesystem::path kShippedData = std::filesystem::path(KILN_SOURCE_DIR) / "qualification/data";

// A risk of the register (docs/risks.md): its owner's team pages at the severity, its gate is the
// model's metric in the tier's runs.
struct GatedRisk {
  std::string id;
  std::string title;
  std::string team;
  std::string layer;
  std::string tier;
  std::string model;
  std::string metric;
  std::string severity;
};

// A register over `model_set`: each team with its one approver, then the risks.
inline std::string risk_register(const std::string& model_set,
                                 const std::vector<std::pair<std::string, std::string>>& approvers,
                                 const std::vector<GatedRisk>& risks) {
  std::string text = "model_set = \"" + model_set + "\"\n";
  for (const auto& [team, approver] : approvers) {
    text += fmt::format("\n[[team]]\nname = \"{}\"\napprovers = [\"{}\"]\n", team, approver);
  }
  for (const GatedRisk& r : risks) {
    text += fmt::format("\n[[risk]]\nid = \"{}\"\ntitle = \"{}\"\nowner_team = \"{}\"\nlayer = \"{}\"\ntier = \"{}\"\n"
                        "gate = {{ model = \"{}\", metric = \"{}\" }}\npage = {{ team = \"{}\", severity = \"{}\" }}\n",
                        r.id, r.title, r.team, r.layer, r.tier, r.model, r.metric, r.team, r.severity);
  }
  return text;
}

// The day's register: a risk of each partner team, each gated in the nightly.
inline std::string day_register() {
  return risk_register(
      "day.toml", {{"compiler", "priya"}, {"kernels", "mei"}, {"runtime", "sam"}, {"firmware", "oleg"}, {"hardware", "dana"}},
      {{"compiler-fp8-fusion", "fusing the fp8 quantize into its GEMM loses throughput", "compiler", "compiler",
        "nightly", "mlp-fp8-small-01", "throughput", "sev3"},
       {"kernels-bf16-accumulation", "a GEMM kernel keeps partial sums in too narrow a format", "kernels", "kernels",
        "nightly", "mlp-bf16-small-01", "correctness", "sev2"},
       {"runtime-training-divergence", "the runtime's stream ordering makes training diverge", "runtime", "runtime",
        "nightly", "train-tiny-small-01", "loss_curve", "sev2"},
       {"firmware-ecc-scrub", "a new ECC scrub schedule corrupts fp8 results in flight", "firmware", "firmware",
        "nightly", "mlp-fp8-small-01", "correctness", "sev1"},
       {"hardware-bf16-rounding", "a revision's matrix unit rounds bf16 differently from the reference", "hardware",
        "hardware", "nightly", "mlp-bf16-small-01", "correctness", "sev2"}});
}

// The shipped qualification set's models named, in its order (its entries verbatim).
inline std::string shipped_models(const std::vector<std::string>& names) {
  const std::string set = read(kShippedData / "qualification-set.toml");
  std::string chosen;
  for (std::size_t at = set.find("[[model]]"); at != std::string::npos;) {
    const std::size_t next = set.find("[[model]]", at + 1);
    const std::string entry = set.substr(at, next == std::string::npos ? std::string::npos : next - at);
    for (const auto& name : names) {
      if (entry.find("name = \"" + name + "\"\n") != std::string::npos) chosen += entry;
    }
    at = next;
  }
  return chosen;
}

inline void write_golden(const std::filesystem::path& dir, const std::string& workload) {
  const std::string command = std::string(KILN_BIN_DIR) + "/kiln-workload-model --model " + workload +
                              " --data-seed 1 --write-golden " + (dir / "golden").string() + " >/dev/null";
  REQUIRE(std::system(command.c_str()) == 0);
}

inline nlohmann::json json_of(const std::string& text) {
  const auto document = nlohmann::json::parse(text, nullptr, false);
  REQUIRE_MESSAGE(!document.is_discarded(), text);
  return document;
}

struct QualificationDay {
  Fleet fleet{"interview-day"};
  std::string coordinator_http = Fleet::free_loopback_address();
  std::string qualifier_http = Fleet::free_loopback_address();
  std::map<std::string, std::string> bundle_at;  // change id -> the bundle up to it
  std::string coordinator_page_before;           // /metrics before the day's runs
  std::string qualifier_page_before;
  int smoke_exit = -1;
  int nightly_exit = -1;
  std::string nightly_output;
  nlohmann::json smoke;    // the smoke's report
  nlohmann::json nightly;  // the nightly's report
  nlohmann::json tickets;  // `kiln tickets --json` after the nightly

  std::filesystem::path release_config() const { return fleet.dir() / "release.toml"; }

  void serve() {
    namespace fs = std::filesystem;
    const fs::path dir = fleet.dir();
    write(dir / "day.toml", shipped_models({"mlp-bf16-small-01", "mlp-fp8-small-01", "train-tiny-small-01", "mlp-fp8-small-02"}));
    write(dir / "risks.toml", day_register());
    // The environments repository: dev, on n03, takes a bundle whose presubmit smoke passed.
    const fs::path repo = dir / "environments";
    git_out(dir, {"init", "-q", "-b", "main", repo.string()});
    write(repo / "compatibility.toml",
          "[[combination]]\nhardware_revision = \"a\"\nfirmware = [\"*\"]\ndriver = [\"*\"]\nruntime = [\"*\"]\n");
    write(repo / "environments" / "dev.toml", "bundle = \"\"\nrequires = [\"smoke\"]\nnodes = [\"n03\"]\n");
    git_out(repo, {"add", "-A"});
    git_out(repo, {"commit", "-q", "-m", "Environments: dev"});
    write(release_config(), "[release]\nrepo = \"" + repo.string() + "\"\nremote = \"\"\n");
    fleet.add_key("ops", "ops");
    fleet.add_key("admin", "admin");
    fleet.add_coordinator_settings("risk_register = \"risks.toml\"\n");
    fleet.add_coordinator_tables(http_table(coordinator_http) +
                                 "[environments]\nrepo = \"environments\"\npoll_interval_ms = 200\n");
    start_nodes(fleet, 3, {{"model_set", "\"day.toml\""}, {"risk_register", "\"risks.toml\""}}, {"qualifier"},
                http_table(qualifier_http));
    write_golden(dir, "train-tiny");
    fleet.start_qualifier("qualifier");

    std::string out;
    REQUIRE(fleet.kiln("ci", {"change", "import", (kShippedData / "demo-day-changes.toml").string()}, &out) == 0);
    for (const char* change : {"c03", "c04", "c12", "c16"}) {
      REQUIRE(fleet.kiln("ci", {"bundle", "build", "--at", change, "--rev", "a", "--bundle-dir",
                                (dir / "bundles").string()},
                         &out) == 0);
      bundle_at[change] = first_word_after(out, "bundle ");
    }
    REQUIRE(fleet.kiln("ci", {"bundle", "accept", bundle_at["c03"]}, &out) == 0);
    coordinator_page_before = scrape(coordinator_http);
    REQUIRE(Fleet::eventually([&] { return kiln::http::get(qualifier_http, "/metrics").status == 200; },
                              std::chrono::seconds(30)));
    qualifier_page_before = scrape(qualifier_http);

    smoke_exit = fleet.kiln("ci", {"smoke", "--bundle", bundle_at["c04"], "--max-models", "1", "--wait", "--run-id", "smoke-c04"}, &out,
                            std::chrono::seconds(240));
    INFO(out);
    REQUIRE(smoke_exit == 0);
    smoke = run_report(fleet, "smoke-c04");
    nightly_exit = fleet.kiln("ci", {"nightly", "--bundle", bundle_at["c16"], "--wait", "--run-id", "nightly-day"},
                              &nightly_output, std::chrono::seconds(480));
    INFO(nightly_output);
    REQUIRE(nightly_exit == 1);
    nightly = run_report(fleet, "nightly-day");
    REQUIRE(fleet.kiln("ci", {"tickets", "--json"}, &out) == 0);
    tickets = json_of(out);
  }
};

// The day, served on first use and shared by every question that reads it.
inline QualificationDay& qualification_day() {
  static std::unique_ptr<QualificationDay> day;
  if (!day) {
    auto served = std::make_unique<QualificationDay>();
    served->serve();
    day = std::move(served);
  }
  return *day;
}

// The result document of a job, as `kiln result JOB --json` shows it (a job that failed exits 1).
inline nlohmann::json job_result(Fleet& fleet, std::uint64_t job_id) {
  std::string out;
  REQUIRE(fleet.kiln("ci", {"result", std::to_string(job_id), "--json"}, &out) <= 1);
  const nlohmann::json result = json_of(out).at("result");
  return result.is_string() ? json_of(result.get<std::string>()) : result;
}

// The ticket filed for `culprit`, or null.
inline nlohmann::json ticket_for(const nlohmann::json& tickets, const std::string& culprit) {
  for (const auto& ticket : tickets) {
    if (ticket.at("culprit") == culprit) return ticket;
  }
  return nullptr;
}

}  // namespace kiln::testing

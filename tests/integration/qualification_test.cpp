// Qualification end to end with the real binaries: changes and bundles recorded on the
// coordinator, a presubmit smoke that passes, and a nightly that catches a slowdown and a broken
// kernel, bisects each to its change and files one ticket per culprit, with the CI verdict as
// exit code and JUnit XML.
#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "tests/integration/documented_fields.h"
#include "tests/integration/fleet_fixture.h"
#include "tests/integration/qualification_samples.h"

using namespace kiln::testing;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

namespace {

void write(const fs::path& path, const std::string& text) { std::ofstream(path, std::ios::trunc) << text; }

std::string read(const fs::path& path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string first_word_after(const std::string& text, const std::string& prefix) {
  auto at = text.find(prefix);
  if (at == std::string::npos) return "";
  at += prefix.size();
  return text.substr(at, text.find_first_of(" \n", at) - at);
}

// A CI key, two nodes of revision a (up), the model set, the change history and the goldens in
// the fleet's directory.
void start_two_nodes(Fleet& fleet) {
  fleet.add_key("ci", "ci");
  fleet.add_agent({"n01", "a"});
  fleet.add_agent({"n02", "a"});
  fleet.start_coordinator();
  fleet.start_agent("n01");
  fleet.start_agent("n02");
  const fs::path dir = fleet.dir();
  write(dir / "models.toml", kModelSet);
  write(dir / "history.toml", kHistory);
  for (const char* model : {"mlp-bf16", "mlp-fp8"}) {
    const std::string command = std::string(KILN_BIN_DIR) + "/kiln-workload-model --model " + model +
                                " --data-seed 1 --write-golden " + (dir / "golden").string() + " >/dev/null";
    REQUIRE(std::system(command.c_str()) == 0);
  }
  std::string out;
  REQUIRE(Fleet::eventually([&] { return fleet.kiln("ci", {"nodes"}, &out) == 0 && out.find("n02") != std::string::npos; },
                            20s));
}

}  // namespace

TEST_CASE("a nightly catches a slowdown and a broken kernel, bisects both and tickets each owner once") {
  Fleet fleet("qualification");
  start_two_nodes(fleet);
  const fs::path dir = fleet.dir();
  const std::vector<std::string> dirs = {"--model-set", (dir / "models.toml").string(), "--bundle-dir",
                                         (dir / "bundles").string(), "--golden-dir", (dir / "golden").string(),
                                         "--tickets-dir", (dir / "tickets").string()};
  auto with_dirs = [&](std::vector<std::string> args) {
    args.insert(args.end(), dirs.begin(), dirs.end());
    return args;
  };
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
  const int smoke = fleet.kiln("ci", with_dirs({"smoke", "--bundle", presubmit, "--wait", "--junit",
                                                (dir / "smoke.xml").string()}),
                               &out, 240s);
  INFO(out);
  CHECK(smoke == 0);
  CHECK(read(dir / "smoke.xml").find("failures=\"0\"") != std::string::npos);

  // A nightly of that bundle passes and makes it the baseline.
  const int passing = fleet.kiln("ci", with_dirs({"nightly", "--bundle", presubmit, "--wait", "--run-id", "nightly-ok"}),
                                 &out, 240s);
  INFO(out);
  CHECK(passing == 0);
  // The 16-chip model ran on both nodes at once, in a lease of the two.
  REQUIRE(fleet.kiln("ci", {"run", "nightly-ok", "--json"}, &out) == 0);
  bool wide_ran = false;
  const auto passing_run = nlohmann::json::parse(out);
  for (const auto& model : passing_run.at("models")) {
    if (model.at("model") != "mlp-fp8-wide") continue;
    wide_ran = true;
    CHECK(model.at("verdict") == "passed");
    const auto nodes = model.at("nodes").dump();
    CHECK(nodes.find("n01") != std::string::npos);
    CHECK(nodes.find("n02") != std::string::npos);
  }
  CHECK(wide_ran);
  REQUIRE(fleet.kiln("ci", {"bundles", "--json"}, &out) == 0);
  CHECK(nlohmann::json::parse(out).at("baselines").at("a").at("bundle_id") == presubmit);

  // The next nightly fails: both regressions, each bisected to its change, one ticket per culprit.
  const int nightly = fleet.kiln("ci", with_dirs({"nightly", "--bundle", candidate, "--wait", "--run-id", "nightly-it",
                                                  "--junit", (dir / "nightly.xml").string()}),
                                 &out, 480s);
  INFO(out);
  CHECK(nightly == 1);
  const std::string junit = read(dir / "nightly.xml");
  CHECK(junit.find("mlp-bf16-it") != std::string::npos);
  CHECK(junit.find("<failure") != std::string::npos);
  CHECK(junit.find("<skipped") == std::string::npos);
  CHECK(junit.find("mlp-fp8-wide") != std::string::npos);

  REQUIRE(fleet.kiln("ci", {"tickets", "--json", "--tickets-dir", (dir / "tickets").string()}, &out) == 0);
  const auto tickets = nlohmann::json::parse(out);
  std::map<std::string, std::string> team_of;
  for (const auto& ticket : tickets) team_of[ticket.at("culprit").get<std::string>()] = ticket.at("team");
  CHECK(team_of.size() == 2);
  CHECK(team_of["k3"] == "compiler-team");
  CHECK(team_of["k5"] == "kernels-team");

  // The same command again (a driver that died is restarted like this) takes up the jobs the run
  // already submitted: no measurement is made twice, and the culprits are not ticketed again.
  const int again = fleet.kiln("ci", with_dirs({"nightly", "--bundle", candidate, "--wait", "--run-id", "nightly-it"}),
                               &out, 480s);
  INFO(out);
  CHECK(again == 1);
  CHECK(out.find("taken up") != std::string::npos);
  REQUIRE(fleet.kiln("ci", {"jobs", "--limit", "1000", "--json"}, &out) == 0);
  std::map<std::string, int> measured;
  for (const auto& job : nlohmann::json::parse(out)) {
    if (job.at("state") == "succeeded" && !job.at("config_hash").get<std::string>().empty()) {
      ++measured[job.at("config_hash").get<std::string>()];
    }
  }
  CHECK(!measured.empty());
  for (const auto& [hash, count] : measured) CHECK_MESSAGE(count == 1, hash);
  REQUIRE(fleet.kiln("ci", {"tickets", "--json", "--tickets-dir", (dir / "tickets").string()}, &out) == 0);
  CHECK(nlohmann::json::parse(out).size() == 2);

  // The run is recorded on the coordinator, and the failing bundle did not become the baseline.
  REQUIRE(fleet.kiln("ci", {"run", "nightly-it", "--json"}, &out) == 1);
  CHECK(nlohmann::json::parse(out).at("passed") == false);
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
  CHECK(difference(tickets.at(0), documented_fields("tickets")) == "");
}

TEST_CASE("a model that fails on one node only quarantines that node and tickets the lab, without bisecting") {
  Fleet fleet("qualification-hw");
  start_two_nodes(fleet);
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
  const int smoke = fleet.kiln("ci", {"smoke", "--bundle", bundle, "--wait", "--run-id", "smoke-hw", "--model-set",
                                      (dir / "models.toml").string(), "--bundle-dir", (dir / "bundles").string(),
                                      "--golden-dir", (dir / "golden").string(), "--tickets-dir",
                                      (dir / "tickets").string()},
                               &out, 240s);
  INFO(out);
  CHECK(smoke == 1);
  CHECK(out.find("hardware_suspect") != std::string::npos);
  CHECK(out.find("bisect") == std::string::npos);
  REQUIRE(fleet.kiln("ci", {"tickets", "--json", "--tickets-dir", (dir / "tickets").string()}, &out) == 0);
  const auto tickets = nlohmann::json::parse(out);
  REQUIRE(tickets.size() == 1);
  CHECK(tickets[0].at("kind") == "hardware_suspect");
  CHECK(tickets[0].at("team") == "lab");
  CHECK(tickets[0].at("culprit") == "node:n01");
  REQUIRE(fleet.kiln("ci", {"nodes", "--json"}, &out) == 0);
  for (const auto& node : nlohmann::json::parse(out)) {
    CHECK(node.at("state") == (node.at("node_id") == "n01" ? "quarantined" : "up"));
  }

  // Mistakes are usage errors that say what to give, and listing does not create directories.
  const bool paths_in_environment = std::getenv("KILN_MODEL_SET") || std::getenv("KILN_BUNDLE_DIR") ||
                                    std::getenv("KILN_GOLDEN_DIR") || std::getenv("KILN_TICKETS_DIR");
  if (!paths_in_environment) {
    CHECK(fleet.kiln("ci", {"nightly", "--bundle", bundle}, &out) == 2);
    CHECK(out.find("--model-set PATH, or set KILN_MODEL_SET") != std::string::npos);
  }
  CHECK(fleet.kiln("ci", {"tickets", "--tickets-dir", (dir / "no-tickets").string()}, &out) == 5);
  CHECK_FALSE(fs::exists(dir / "no-tickets"));
}

TEST_CASE("a nightly builds its bisection bundles with the configured builder and checks the set against the catalog") {
  Fleet fleet("qualification-builder");
  start_two_nodes(fleet);
  const fs::path dir = fleet.dir();
  std::string out;
  REQUIRE(fleet.kiln("ci", {"change", "import", (dir / "history.toml").string()}, &out) == 0);
  REQUIRE(fleet.kiln("ci", {"bundle", "build", "--at", "k1", "--rev", "a", "--bundle-dir", (dir / "bundles").string()},
                     &out) == 0);
  REQUIRE(fleet.kiln("ci", {"bundle", "accept", first_word_after(out, "bundle ")}, &out) == 0);
  REQUIRE(fleet.kiln("ci", {"bundle", "build", "--at", "k3", "--rev", "a", "--bundle-dir", (dir / "bundles").string()},
                     &out) == 0);
  const std::string candidate = first_word_after(out, "bundle ");
  write(dir / "fp8.toml", std::string(kModelSet).substr(0, std::string(kModelSet).find("[[model]]\nname = \"mlp-fp8-wide\"")));
  const std::vector<std::string> run = {"nightly", "--bundle", candidate, "--wait", "--no-accept", "--model-set",
                                        (dir / "fp8.toml").string(), "--bundle-dir", (dir / "bundles").string(),
                                        "--golden-dir", (dir / "golden").string(), "--tickets-dir",
                                        (dir / "tickets").string()};

  // A catalog of the fleet's workloads without the set's: refused before anything runs.
  write(dir / "catalog.json", R"({"models": [{"name": "llama-70b", "components": ["gemm-bf16"]}]})");
  std::vector<std::string> with_catalog = run;
  with_catalog.insert(with_catalog.end(), {"--workload-catalog", (dir / "catalog.json").string()});
  CHECK(fleet.kiln("ci", with_catalog, &out) != 0);
  CHECK(out.find("workload 'mlp-bf16' is not in the workload catalog") != std::string::npos);

  // k3 slows mlp-fp8 by 10%; the bisection between k1 and k3 needs the bundle at k2, which the
  // configured builder (one that records its call and fails) cannot make: the bisection is
  // ambiguous and tickets nobody. The sim builder would have built it and found k3.
  const fs::path builder = dir / "builder.sh";
  write(builder, "#!/bin/sh\necho \"$1\" >> " + (dir / "builder-calls").string() + "\necho 'no compiler here' >&2\nexit 3\n");
  fs::permissions(builder, fs::perms::owner_all);
  std::vector<std::string> with_builder = run;
  with_builder.insert(with_builder.end(), {"--builder", builder.string(), "--builder-arg", "{change}"});
  const int nightly = fleet.kiln("ci", with_builder, &out, 240s);
  INFO(out);
  CHECK(nightly == 1);
  CHECK(out.find("could not build the bundle at change k2") != std::string::npos);
  CHECK(read(dir / "builder-calls") == "k2\n");
  CHECK(out.find("bisection ambiguous, no ticket") != std::string::npos);
  REQUIRE(fleet.kiln("ci", {"tickets", "--json", "--tickets-dir", (dir / "tickets").string()}, &out) == 0);
  CHECK(nlohmann::json::parse(out).empty());
}

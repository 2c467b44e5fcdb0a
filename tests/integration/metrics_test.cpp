// /metrics with the real binaries on loopback: the coordinator, two agents on simulated chips and
// the qualifier each serve a page that `promtool check metrics` accepts, and the values people
// rely on are there: a job that ran counts for its class and outcome, every chip is a series
// with its serial and revision, a scheduled nightly counts with its deadline, a quarantined
// node shows with its reason, and each page ends with its process's own figures (the
// coordinator's limit on open files raised for its agents' connections).
#include <sys/resource.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <regex>
#include <set>
#include <string>

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include "tests/integration/fleet_fixture.h"
#include "tests/integration/metrics_page.h"
#include "tests/integration/qualification_fleet.h"
#include "tests/integration/run_command.h"
#include "tests/support/text.h"

using namespace kiln::testing;
using namespace std::chrono_literals;

TEST_CASE("the coordinator, the agents and the qualifier serve metrics promtool accepts, counting what happened") {
  Fleet fleet("metrics");
  const std::string coordinator_http = Fleet::free_loopback_address();
  const std::string qualifier_http = Fleet::free_loopback_address();
  const std::map<std::string, std::string> agent_http = {{"n01", Fleet::free_loopback_address()},
                                                         {"n02", Fleet::free_loopback_address()}};
  const Tonight tonight = tonight_starting_now();
  fleet.add_coordinator_tables(http_table(coordinator_http));
  fleet.add_key("ci", "ci");
  fleet.add_qualifier("qualifier", {{"model_set", "\"bf16.toml\""}},
                      http_table(qualifier_http) + "\n" + tonight.schedule_table);
  for (const auto& [node, address] : agent_http) fleet.add_agent({node, "a"}, "", "", http_table(address));
  // Started with a service's low soft limit on open files, the coordinator takes its hard limit:
  // each agent's connection is a file.
  rlimit files{};
  REQUIRE(::getrlimit(RLIMIT_NOFILE, &files) == 0);
  const rlimit ours = files;
  const rlim_t low = std::min<rlim_t>(512, files.rlim_max);
  files.rlim_cur = low;
  REQUIRE(::setrlimit(RLIMIT_NOFILE, &files) == 0);
  fleet.start_coordinator();
  REQUIRE(::setrlimit(RLIMIT_NOFILE, &ours) == 0);
  for (const auto& [node, address] : agent_http) fleet.start_agent(node);

  // A one-model set and two changes: tonight's nightly measures the bundle at k2 against k1's.
  const std::string set(kModelSet);
  write(fleet.dir() / "bf16.toml", set.substr(0, set.find("[[model]]\nname = \"mlp-fp8-it\"")));
  const std::string history(kHistory);
  write(fleet.dir() / "k1-k2.toml", history.substr(0, history.find("[[change]]\nid = \"k3\"")));
  REQUIRE(std::system((std::string(KILN_BIN_DIR) + "/kiln-workload-model --model mlp-bf16 --data-seed 1 --write-golden " +
                       (fleet.dir() / "golden").string() + " >/dev/null")
                          .c_str()) == 0);
  std::string out;
  REQUIRE(Fleet::eventually([&] { return contains(kiln::http::get(coordinator_http, "/metrics").body, "kiln_agents_connected 2\n"); },
                            30s));
  REQUIRE(fleet.kiln("ci", {"change", "import", (fleet.dir() / "k1-k2.toml").string()}, &out) == 0);
  REQUIRE(fleet.kiln("ci", {"bundle", "build", "--at", "k1", "--rev", "a", "--bundle-dir",
                            (fleet.dir() / "bundles").string()},
                     &out) == 0);
  REQUIRE(fleet.kiln("ci", {"bundle", "accept", first_word_after(out, "bundle ")}, &out) == 0);
  fleet.start_qualifier("qualifier");

  // A presubmit job that ran counts for its class and outcome.
  REQUIRE(fleet.kiln("ci", {"submit", "--workload", "smoke", "--class", "presubmit", "--wait"}, &out) == 0);
  CHECK(Fleet::eventually([&] {
    return contains(scrape(coordinator_http), "kiln_jobs_finished_total{class=\"presubmit\",outcome=\"succeeded\"} 1\n");
  }, 10s));
  // The submission was timed from the loop taking it to its answer.
  const std::string submitted = line_of(scrape(coordinator_http), "kiln_client_request_seconds_count{type=\"submit_job\"} ");
  REQUIRE_FALSE(submitted.empty());
  CHECK(std::stod(submitted.substr(submitted.rfind(' ') + 1)) >= 1);
  // Storing it was a group commit of the store, timed too.
  const std::string committed = line_of(scrape(coordinator_http), "kiln_store_commit_seconds_count ");
  REQUIRE_FALSE(committed.empty());
  CHECK(std::stod(committed.substr(committed.rfind(' ') + 1)) >= 1);
  // The process's own figures follow the fleet's: its files against their limit, which it raised.
  const std::string coordinator_process = scrape(coordinator_http);
  const auto value = [](const std::string& page, const std::string& name) {
    const std::string line = line_of(page, name + " ");
    INFO(name << " in: " << page);
    REQUIRE_FALSE(line.empty());
    return std::stod(line.substr(line.rfind(' ') + 1));
  };
  if (ours.rlim_max == RLIM_INFINITY || ours.rlim_max > low) {
    const double max_fds = value(coordinator_process, "process_max_fds");
    CHECK(max_fds > static_cast<double>(low));
    if (ours.rlim_max != RLIM_INFINITY) CHECK(max_fds == static_cast<double>(ours.rlim_max));
    CHECK(contains(fleet.log_of("coordinator"), "open files: the limit was " + std::to_string(low) + ", now "));
  }
  CHECK(value(coordinator_process, "process_open_fds") >= 3);
  CHECK(value(coordinator_process, "process_resident_memory_bytes") > 1e6);
  CHECK(value(coordinator_process, "process_cpu_seconds_total") >= 0);
  CHECK(value(coordinator_process, "process_start_time_seconds") > 1.7e9);

  // Each agent shows one series per chip, with the serial and revision the coordinator knows it by.
  REQUIRE(fleet.kiln("ci", {"nodes", "--json"}, &out) == 0);
  for (const auto& node : nlohmann::json::parse(out)) {
    const std::string id = node.at("node_id");
    REQUIRE(Fleet::eventually([&] { return contains(scrape(agent_http.at(id)), "kiln_chip_temperature_celsius{"); }, 10s));
    const std::string page = scrape(agent_http.at(id));
    std::set<std::string> chips;
    for (const auto& chip : node.at("chips")) {
      const std::string serial = chip.at("serial");
      CHECK(serial != "unknown");
      const std::string labels = "{node=\"" + id + "\",chip=\"" + std::to_string(chip.at("index").get<int>()) +
                                 "\",serial=\"" + serial + "\",hw_revision=\"a\"}";
      for (const char* family : {"kiln_chip_temperature_celsius", "kiln_chip_power_watts", "kiln_chip_clock_hertz",
                                 "kiln_chip_utilization_ratio"}) {
        CAPTURE(family);
        CHECK_FALSE(line_of(page, family + labels + " ").empty());
      }
      chips.insert(serial);
    }
    CHECK(chips.size() == 8);
    CHECK(std::regex_search(page, std::regex("\nkiln_chip_temperature_celsius\\{[^}]*\\} ")));
    CHECK(contains(page, "kiln_agent_coordinator_connected{node=\"" + id + "\"} 1\n"));
    CHECK_FALSE(line_of(page, "process_open_fds ").empty());
    CHECK(contains(page, "kiln_agent_install_state{node=\"" + id + "\",state=\"none\"} 1\n"));
  }

  // Tonight's scheduled nightly counts in the qualifier's metrics, with its deadline and finish.
  REQUIRE(fleet.kiln("ci", {"run", tonight.run_id, "--wait"}, &out, 240s) == 0);
  std::string qualifier_page;
  CHECK(Fleet::eventually([&] {
    qualifier_page = scrape(qualifier_http);
    return contains(qualifier_page, "kiln_runs_total{kind=\"nightly\",verdict=\"passed\"} 1\n");
  }, 20s));
  CHECK(contains(qualifier_page, "kiln_nightly_late 0\n"));
  CHECK_FALSE(line_of(qualifier_page, "kiln_nightly_deadline_timestamp_seconds ").empty());
  CHECK_FALSE(line_of(qualifier_page, "kiln_nightly_finish_timestamp_seconds ").empty());
  CHECK(contains(qualifier_page, "kiln_test_flake_ratio{test=\"mlp-bf16-it\",owner=\"recsys-models\"} 0\n"));
  CHECK(contains(qualifier_page, "kiln_bisections_running 0\n"));
  CHECK_FALSE(line_of(qualifier_page, "process_resident_memory_bytes ").empty());

  // A node whose probe fails is quarantined: the coordinator shows since when and why, its agent
  // which chip failed which check.
  REQUIRE(fleet.sim_chip("n02", {"inject", "--chip", "3", "--fault", "ecc_storm"}) == 0);
  std::string coordinator_page;
  REQUIRE(Fleet::eventually([&] {
    coordinator_page = scrape(coordinator_http);
    return contains(coordinator_page, "kiln_nodes{state=\"quarantined\"} 1\n");
  }, 30s));
  const std::string quarantined = line_of(coordinator_page, "kiln_node_quarantined_since_timestamp_seconds{node=\"n02\"");
  CHECK(contains(quarantined, "ecc chip 3 fail: ecc_uncorrected"));
  const double since = std::stod(quarantined.substr(quarantined.rfind(' ') + 1));
  CHECK(since > 1.7e9);
  std::string agent_page;
  CHECK(Fleet::eventually([&] {
    agent_page = scrape(agent_http.at("n02"));
    return contains(line_of(agent_page, "kiln_chip_probe_passed{node=\"n02\",chip=\"3\","), "probe=\"ecc\"} 0");
  }, 10s));

  // promtool accepts every page as it is now, every family with samples.
  if (run("command -v promtool").status != 0) {
    MESSAGE("promtool is not installed (Debian's prometheus package; scripts/setup installs it): the pages were not "
            "checked with `promtool check metrics`");
    return;
  }
  const std::map<std::string, std::string> pages = {{"coordinator", scrape(coordinator_http)},
                                                    {"qualifier", scrape(qualifier_http)},
                                                    {"agent-n01", scrape(agent_http.at("n01"))},
                                                    {"agent-n02", scrape(agent_http.at("n02"))}};
  for (const auto& [name, page] : pages) {
    const auto file = fleet.dir() / (name + ".prom");
    write(file, page);
    const Ran checked = run("promtool check metrics < " + file.string());
    INFO(name << " page:\n" << page);
    CHECK_MESSAGE(checked.status == 0, "promtool check metrics on the " << name << " page: " << checked.output);
  }
}

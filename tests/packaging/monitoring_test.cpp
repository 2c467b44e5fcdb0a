// The monitoring files the kiln-coordinator package ships (monitoring/; docs/operations.md,
// "Alerts and the dashboard"): promtool checks and tests the alert rules and the scrape config,
// and the dashboard's every query is valid PromQL over the metrics kiln serves.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/integration/run_command.h"
#include "tests/support/temp_dir.h"
#include "tests/support/text.h"

using namespace kiln::testing;
namespace fs = std::filesystem;

namespace {

const fs::path kMonitoring = fs::path(KILN_SOURCE_DIR) / "monitoring";

// The metrics kiln-coordinator, kiln-qualifier and kiln-agent serve on /metrics: the names the
// rules and the dashboard may use.
enum class Kind { gauge, counter, histogram };
const std::map<std::string, Kind>& contract() {
  static const std::map<std::string, Kind> metrics = {
      // kiln-coordinator
      {"kiln_agents_connected", Kind::gauge},
      {"kiln_nodes", Kind::gauge},
      {"kiln_node_quarantined_since_timestamp_seconds", Kind::gauge},
      {"kiln_jobs_queued", Kind::gauge},
      {"kiln_queue_wait_seconds", Kind::histogram},
      {"kiln_chips", Kind::gauge},
      {"kiln_chips_leased", Kind::gauge},
      {"kiln_preemptions_total", Kind::counter},
      {"kiln_preemption_lost_chip_seconds_total", Kind::counter},
      {"kiln_jobs_finished_total", Kind::counter},
      {"kiln_store_commit_seconds", Kind::histogram},
      // kiln-qualifier
      {"kiln_presubmit_time_to_signal_seconds", Kind::histogram},
      {"kiln_nightly_deadline_timestamp_seconds", Kind::gauge},
      {"kiln_nightly_finish_timestamp_seconds", Kind::gauge},
      {"kiln_nightly_late", Kind::gauge},
      {"kiln_runs_total", Kind::counter},
      {"kiln_test_flake_ratio", Kind::gauge},
      {"kiln_bisections_running", Kind::gauge},
      {"kiln_bisection_rounds", Kind::gauge},
      {"kiln_tickets_filed_total", Kind::counter},
      // kiln-agent
      {"kiln_chip_temperature_celsius", Kind::gauge},
      {"kiln_chip_power_watts", Kind::gauge},
      {"kiln_chip_clock_hertz", Kind::gauge},
      {"kiln_chip_utilization_ratio", Kind::gauge},
      {"kiln_chip_ecc_errors_total", Kind::counter},
      {"kiln_chip_throttled", Kind::gauge},
      {"kiln_chip_probe_passed", Kind::gauge},
      {"kiln_chip_probe_timestamp_seconds", Kind::gauge},
      {"kiln_agent_install_state", Kind::gauge},
      {"kiln_agent_coordinator_connected", Kind::gauge},
      // every process (docs/metrics.md, "Every process")
      {"process_cpu_seconds_total", Kind::counter},
      {"process_open_fds", Kind::gauge},
      {"process_max_fds", Kind::gauge},
      {"process_resident_memory_bytes", Kind::gauge},
      {"process_virtual_memory_bytes", Kind::gauge},
      {"process_start_time_seconds", Kind::gauge},
  };
  return metrics;
}

// The contract's metric a series name belongs to ("" when none): a histogram is queried by its
// _bucket, _sum and _count series.
std::string metric_of(const std::string& series) {
  if (contract().count(series) && contract().at(series) != Kind::histogram) return series;
  for (const char* suffix : {"_bucket", "_sum", "_count"}) {
    const std::string s = suffix;
    if (series.size() > s.size() && series.compare(series.size() - s.size(), s.size(), s) == 0) {
      const std::string base = series.substr(0, series.size() - s.size());
      if (contract().count(base) && contract().at(base) == Kind::histogram) return base;
    }
  }
  return "";
}

// kiln's series an expression names: identifiers starting kiln_ or process_, outside quoted label
// values.
std::vector<std::string> kiln_series(const std::string& expression) {
  const std::string unquoted = std::regex_replace(expression, std::regex("\"[^\"]*\""), "\"\"");
  static const std::regex identifier("[A-Za-z_:][A-Za-z0-9_:]*");
  std::vector<std::string> out;
  for (auto it = std::sregex_iterator(unquoted.begin(), unquoted.end(), identifier); it != std::sregex_iterator(); ++it) {
    if (it->str().rfind("kiln_", 0) == 0 || it->str().rfind("process_", 0) == 0) out.push_back(it->str());
  }
  return out;
}

bool skipped() {
  if (run("command -v promtool").status == 0) return false;
  MESSAGE("kiln test skipped: promtool (package prometheus) is not installed; scripts/setup installs it");
  return true;
}

// Every query of the dashboard: its panels' targets (rows' panels too) and its variables'.
void collect_queries(const nlohmann::json& panels, std::vector<std::pair<std::string, std::string>>& out) {
  for (const auto& panel : panels) {
    for (const auto& target : panel.value("targets", nlohmann::json::array())) {
      out.emplace_back(panel.at("title").get<std::string>(), target.at("expr").get<std::string>());
    }
    collect_queries(panel.value("panels", nlohmann::json::array()), out);
  }
}

}  // namespace

TEST_CASE("promtool accepts the alert rules and the scrape config, and every alert fires and stays quiet in its tests") {
  if (skipped()) return;
  const Ran check = run("promtool check rules " + (kMonitoring / "kiln-alerts.yml").string());
  INFO(check.output);
  CHECK(check.status == 0);
  CHECK(contains(check.output, "SUCCESS: 9 rules found"));

  const Ran test = run("cd " + kMonitoring.string() + " && promtool test rules kiln-alerts.test.yml");
  INFO(test.output);
  CHECK(test.status == 0);

  // The rules test covers every alert, firing (exp_alerts) and not (an eval_time without them).
  const std::string rules = read_file(kMonitoring / "kiln-alerts.yml");
  const std::string tests = read_file(kMonitoring / "kiln-alerts.test.yml");
  static const std::regex alert_name("- alert: (\\w+)");
  int alerts = 0;
  for (auto it = std::sregex_iterator(rules.begin(), rules.end(), alert_name); it != std::sregex_iterator(); ++it) {
    const std::string name = (*it)[1];
    const std::regex evaluated("alertname: " + name + "\\n(\\s+)(exp_alerts:)?");
    int firing = 0;
    int quiet = 0;
    for (auto e = std::sregex_iterator(tests.begin(), tests.end(), evaluated); e != std::sregex_iterator(); ++e) {
      ++((*e)[2].matched ? firing : quiet);
    }
    CHECK_MESSAGE(firing >= 1, name << " is never tested firing");
    CHECK_MESSAGE(quiet >= 1, name << " is never tested staying quiet");
    ++alerts;
  }
  CHECK(alerts == 9);
  // The rules name only kiln's metrics.
  for (const std::string& series : kiln_series(rules)) CHECK_MESSAGE(!metric_of(series).empty(), series);

  // The scrape config loads (and with it the rules it names) and has the rules' three jobs.
  const Ran config = run("promtool check config " + (kMonitoring / "prometheus.yml").string());
  INFO(config.output);
  CHECK(config.status == 0);
  const std::string scrape = read_file(kMonitoring / "prometheus.yml");
  for (const char* job : {"kiln-coordinator", "kiln-qualifier", "kiln-agent"}) {
    CHECK(contains(scrape, std::string("job_name: ") + job));
    CHECK(contains(rules, std::string("up{job=\"") + job + "\"} == 0"));
  }
}

TEST_CASE("the dashboard's every query is valid PromQL over the metrics kiln serves, and shows each of them") {
  if (skipped()) return;
  const auto dashboard = nlohmann::json::parse(read_file(kMonitoring / "kiln-dashboard.json"));
  std::vector<std::pair<std::string, std::string>> queries;  // panel title, expression
  collect_queries(dashboard.at("panels"), queries);
  for (const auto& variable : dashboard.at("templating").at("list")) {
    if (variable.at("type") != "query") continue;
    // label_values(METRIC, LABEL): its metric as a query of its own.
    static const std::regex label_values("label_values\\((\\w+), *\\w+\\)");
    std::smatch m;
    const std::string definition = variable.at("definition");
    REQUIRE(std::regex_match(definition, m, label_values));
    queries.emplace_back("variable " + variable.at("name").get<std::string>(), m[1].str());
  }
  CHECK(queries.size() >= 30);

  std::set<std::string> shown;
  std::string recording_rules = "groups:\n  - name: kiln-dashboard\n    rules:\n";
  int n = 0;
  for (const auto& [title, expression] : queries) {
    INFO(title << ": " << expression);
    const std::vector<std::string> series = kiln_series(expression);
    CHECK((!series.empty() || contains(expression, "up{job=~\"kiln-coordinator|kiln-qualifier|kiln-agent\"}")));
    for (const std::string& name : series) {
      const std::string metric = metric_of(name);
      CHECK_MESSAGE(!metric.empty(), name << " is not a metric kiln serves");
      shown.insert(metric);
    }
    // The dashboard's variables as Grafana would fill them in: all values.
    const std::string filled = std::regex_replace(expression, std::regex("\\$(node|class)"), ".*");
    recording_rules += "      - record: kiln:dashboard_query_" + std::to_string(++n) + "\n        expr: " +
                       nlohmann::json(filled).dump() + "\n";
  }
  for (const auto& [metric, kind] : contract()) CHECK_MESSAGE(shown.count(metric), metric << " is on no panel");

  // promtool parses every expression of a rules file: the queries as recording rules.
  TempDir dir("kiln-dashboard");
  const std::string file = dir.write("queries.yml", recording_rules);
  const Ran check = run("promtool check rules " + file);
  INFO(check.output);
  CHECK(check.status == 0);

  // Every panel queries the dashboard's Prometheus data source, and ids are unique.
  std::set<int> ids;
  for (const auto& panel : dashboard.at("panels")) {
    CHECK(ids.insert(panel.at("id").get<int>()).second);
    if (panel.at("type") == "row") continue;
    CHECK(panel.at("datasource").at("uid") == "${datasource}");
  }
}

// The agent's /metrics: one series per chip labelled like dcgm-exporter's, readings that aged out
// left off, the last probe's checks, the install state and the session.
#include <doctest/doctest.h>

#include "agent/metrics/agent_metrics.h"
#include "tests/support/text.h"

using namespace kiln;
using namespace kiln::agent;
using kiln::testing::contains;

namespace {

AgentMetricsInput three_chips() {
  AgentMetricsInput in;
  in.node_id = "n07";
  in.hardware_revision = "b";
  for (std::uint32_t i = 0; i < 3; ++i) in.chips.push_back(protocol::ChipInfo{i, "SN-" + std::to_string(i), "1.0", 0, true});
  in.now_wall_ms = 100000;
  in.max_sample_age_ms = 3000;
  // Chip 0 from a driver with chip_activity, hot; chip 1 from one without, throttled; chip 2's
  // reading is too old to show.
  in.samples[0] = ChipSample{99000, 95.5, 330.0, 1110.0, 1000, 3, true, 1.0, true, false};
  in.samples[1] = ChipSample{99500, 40.25, 70.0, 1850.0, 2, 0, true, std::nullopt, std::nullopt, std::nullopt};
  in.samples[2] = ChipSample{90000, 41.0, 65.0, 1850.0, 0, 0, false, 0.0, false, false};
  return in;
}

}  // namespace

TEST_CASE("every chip series carries node, chip, serial and hw_revision; old readings are left off") {
  const std::string text = render_agent_metrics(three_chips());
  CHECK(contains(text, "# TYPE kiln_chip_temperature_celsius gauge\n"
                       "kiln_chip_temperature_celsius{node=\"n07\",chip=\"0\",serial=\"SN-0\",hw_revision=\"b\"} 95.5\n"
                       "kiln_chip_temperature_celsius{node=\"n07\",chip=\"1\",serial=\"SN-1\",hw_revision=\"b\"} 40.25\n"
                       "# HELP kiln_chip_power_watts"));
  CHECK_FALSE(contains(text, "chip=\"2\""));
  CHECK(contains(text, "kiln_chip_clock_hertz{node=\"n07\",chip=\"1\",serial=\"SN-1\",hw_revision=\"b\"} 1850000000\n"));
  CHECK(contains(text, "kiln_chip_ecc_errors_total{node=\"n07\",chip=\"0\",serial=\"SN-0\",hw_revision=\"b\",kind="
                       "\"corrected\"} 1000\n"));
  CHECK(contains(text, "kiln_chip_ecc_errors_total{node=\"n07\",chip=\"0\",serial=\"SN-0\",hw_revision=\"b\",kind="
                       "\"uncorrected\"} 3\n"));
}

TEST_CASE("utilization and throttle reasons come from the driver's activity, when it reports it") {
  const std::string text = render_agent_metrics(three_chips());
  CHECK(contains(text, "kiln_chip_utilization_ratio{node=\"n07\",chip=\"0\",serial=\"SN-0\",hw_revision=\"b\"} 1\n"));
  CHECK_FALSE(contains(text, "kiln_chip_utilization_ratio{node=\"n07\",chip=\"1\""));
  CHECK(contains(text, "kiln_chip_throttled{node=\"n07\",chip=\"0\",serial=\"SN-0\",hw_revision=\"b\",reason=\"thermal\"} 1\n"
                       "kiln_chip_throttled{node=\"n07\",chip=\"0\",serial=\"SN-0\",hw_revision=\"b\",reason=\"power\"} 0\n"
                       "kiln_chip_throttled{node=\"n07\",chip=\"1\",serial=\"SN-1\",hw_revision=\"b\",reason=\"unspecified\"} 1\n"));
}

TEST_CASE("the last probe's per-chip checks are shown with when that probe began; skipped ones are not") {
  AgentMetricsInput in = three_chips();
  in.probe_at_wall_ms = 97500;
  in.probe_checks = {{"ecc", 0, protocol::HealthStatus::fail, "ecc_uncorrected", "memory", "3 uncorrected", "drain"},
                     {"thermal", 1, protocol::HealthStatus::warn, "", "thermal", "", ""},
                     {"thermal", 2, protocol::HealthStatus::skip, "chip_unhealthy", "", "", ""},
                     {"driver", -1, protocol::HealthStatus::pass, "", "software", "", ""}};
  const std::string text = render_agent_metrics(in);
  CHECK(contains(text, "kiln_chip_probe_passed{node=\"n07\",chip=\"0\",serial=\"SN-0\",hw_revision=\"b\",probe=\"ecc\"} 0\n"
                       "kiln_chip_probe_passed{node=\"n07\",chip=\"1\",serial=\"SN-1\",hw_revision=\"b\",probe=\"thermal\"} 1\n"
                       "# HELP kiln_chip_probe_timestamp_seconds"));
  CHECK(contains(text, "kiln_chip_probe_timestamp_seconds{node=\"n07\",chip=\"0\",serial=\"SN-0\",hw_revision=\"b\","
                       "probe=\"ecc\"} 97.5\n"));
  CHECK_FALSE(contains(text, "probe=\"driver\""));
}

TEST_CASE("the install state is one of its states at 1, and the session is shown") {
  AgentMetricsInput in = three_chips();
  in.install_state = "rolled_back";
  in.coordinator_connected = true;
  std::string text = render_agent_metrics(in);
  CHECK(contains(text, "kiln_agent_install_state{node=\"n07\",state=\"none\"} 0\n"));
  CHECK(contains(text, "kiln_agent_install_state{node=\"n07\",state=\"rolled_back\"} 1\n"));
  CHECK(contains(text, "kiln_agent_coordinator_connected{node=\"n07\"} 1\n"));
  in.coordinator_connected = false;
  CHECK(contains(render_agent_metrics(in), "kiln_agent_coordinator_connected{node=\"n07\"} 0\n"));
}

TEST_CASE("an install job's result gives the install state: its outcome, or failed without a report") {
  CHECK(install_state_after(R"({"outcome": "installed", "steps": []})") == "installed");
  CHECK(install_state_after(R"({"outcome": "quarantined"})") == "quarantined");
  CHECK(install_state_after("") == "failed");
  CHECK(install_state_after("not json") == "failed");
  CHECK(install_state_after(R"({"outcome": "installing"})") == "failed");
  CHECK(install_state_after(R"({"outcome": 3})") == "failed");
}

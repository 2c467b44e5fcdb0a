#include "agent/metrics/agent_metrics.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "common/metrics/exposition.h"

namespace kiln::agent {
namespace {

constexpr double kHertzPerMegahertz = 1e6;

bool passed(protocol::HealthStatus status) {
  return status == protocol::HealthStatus::pass || status == protocol::HealthStatus::warn;
}

}  // namespace

std::string install_state_after(std::string_view result_document) {
  const auto report = nlohmann::json::parse(result_document, nullptr, /*allow_exceptions=*/false);
  if (!report.is_object() || !report.contains("outcome") || !report["outcome"].is_string()) return "failed";
  const std::string outcome = report["outcome"].get<std::string>();
  const bool known = std::find(std::begin(kInstallStates), std::end(kInstallStates), outcome) != std::end(kInstallStates);
  return known && outcome != "none" && outcome != "installing" ? outcome : "failed";
}

std::string render_agent_metrics(const AgentMetricsInput& in) {
  metrics::Exposition out;
  const auto chip_labels = [&](const protocol::ChipInfo& chip) {
    return metrics::Labels{{"node", in.node_id},
                           {"chip", std::to_string(chip.index)},
                           {"serial", chip.serial},
                           {"hw_revision", in.hardware_revision}};
  };
  const auto with = [](metrics::Labels labels, std::string name, std::string value) {
    labels.emplace_back(std::move(name), std::move(value));
    return labels;
  };
  // The chips with a fresh reading, in index order.
  std::vector<std::pair<const protocol::ChipInfo*, const ChipSample*>> read;
  for (const protocol::ChipInfo& chip : in.chips) {
    const auto sample = in.samples.find(chip.index);
    if (sample == in.samples.end() || in.now_wall_ms - sample->second.at_wall_ms > in.max_sample_age_ms) continue;
    read.emplace_back(&chip, &sample->second);
  }
  const auto per_chip = [&](const char* name, const char* help, auto value) {
    out.gauge(name, help);
    for (const auto& [chip, sample] : read) out.sample(chip_labels(*chip), value(*sample));
  };
  per_chip("kiln_chip_temperature_celsius", "The chip's temperature.", [](const ChipSample& s) { return s.temperature_c; });
  per_chip("kiln_chip_power_watts", "The chip's power draw.", [](const ChipSample& s) { return s.power_w; });
  per_chip("kiln_chip_clock_hertz", "The chip's clock.",
           [](const ChipSample& s) { return s.clock_mhz * kHertzPerMegahertz; });

  out.gauge("kiln_chip_utilization_ratio",
            "Fraction of the last second the chip's compute units were busy, as its driver reports it.");
  for (const auto& [chip, sample] : read) {
    if (sample->utilization) out.sample(chip_labels(*chip), *sample->utilization);
  }

  out.counter("kiln_chip_ecc_errors_total", "ECC errors since the chip's last reset, by kind.");
  for (const auto& [chip, sample] : read) {
    out.sample(with(chip_labels(*chip), "kind", "corrected"), static_cast<double>(sample->ecc_corrected));
    out.sample(with(chip_labels(*chip), "kind", "uncorrected"), static_cast<double>(sample->ecc_uncorrected));
  }

  out.gauge("kiln_chip_throttled",
            "1 while the chip's clocks are reduced for the reason: thermal or power as its driver reports them, or "
            "unspecified from a driver that tells only that they are.");
  for (const auto& [chip, sample] : read) {
    if (sample->thermal_throttle || sample->power_throttle) {
      out.sample(with(chip_labels(*chip), "reason", "thermal"), sample->thermal_throttle.value_or(false) ? 1 : 0);
      out.sample(with(chip_labels(*chip), "reason", "power"), sample->power_throttle.value_or(false) ? 1 : 0);
    } else {
      out.sample(with(chip_labels(*chip), "reason", "unspecified"), sample->throttled ? 1 : 0);
    }
  }

  // The last probe's checks of each chip: a check that did not run on it (skip) says nothing.
  std::vector<std::pair<const protocol::ChipInfo*, const protocol::HealthCheck*>> checks;
  for (const protocol::HealthCheck& check : in.probe_checks) {
    if (check.chip < 0 || (check.status != protocol::HealthStatus::fail && !passed(check.status))) continue;
    const auto chip = std::find_if(in.chips.begin(), in.chips.end(), [&](const protocol::ChipInfo& c) {
      return c.index == static_cast<std::uint32_t>(check.chip);
    });
    if (chip != in.chips.end()) checks.emplace_back(&*chip, &check);
  }
  out.gauge("kiln_chip_probe_passed", "1 when the chip passed the health probe's check (pass or warn) in its last run.");
  for (const auto& [chip, check] : checks) out.sample(with(chip_labels(*chip), "probe", check->check), passed(check->status) ? 1 : 0);
  out.gauge("kiln_chip_probe_timestamp_seconds", "When the health probe run that checked the chip began (Unix seconds).");
  for (const auto& [chip, check] : checks) {
    out.sample(with(chip_labels(*chip), "probe", check->check), static_cast<double>(in.probe_at_wall_ms) / 1000.0);
  }

  out.gauge("kiln_agent_install_state",
            "1 for the node's install state: none, installing, or the last install's outcome (failed: no report).");
  for (std::string_view state : kInstallStates) {
    out.sample({{"node", in.node_id}, {"state", std::string(state)}}, state == in.install_state ? 1 : 0);
  }
  out.gauge("kiln_agent_coordinator_connected", "1 while the agent is registered with the coordinator.");
  out.sample({{"node", in.node_id}}, in.coordinator_connected ? 1 : 0);
  return out.text();
}

}  // namespace kiln::agent

#include "qualification/backends/switchover.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <tuple>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

namespace kiln::backends {

std::optional<Backend> declared_backend(const std::vector<std::string>& labels) {
  constexpr std::string_view kKey = "backend=";
  for (const std::string& label : labels) {
    if (label.starts_with(kKey)) return enum_from_name<Backend>(std::string_view(label).substr(kKey.size()));
  }
  return std::nullopt;
}

namespace {

using json = nlohmann::json;

double median_of(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

// Run-to-run noise of one run's samples: the median absolute deviation scaled to a standard
// deviation (1.4826), relative to the median; robust to the sim's and real hosts' outliers.
std::optional<double> relative_noise(const std::vector<double>& samples) {
  if (samples.size() < 3) return std::nullopt;
  const double center = median_of(samples);
  if (!(center > 0)) return std::nullopt;
  std::vector<double> deviations;
  for (double s : samples) deviations.push_back(std::abs(s - center));
  return 1.4826 * median_of(deviations) / center;
}

// Verdicts whose outputs agreed with the golden: the correctness gate passed on those nodes.
bool correct(std::string_view verdict) {
  return verdict == "passed" || verdict == "improved" || verdict == "performance_regression" ||
         verdict == "inconclusive";
}

struct Evidence {
  std::map<Backend, std::size_t> correct_runs;
  std::map<Backend, std::size_t> baseline_samples;
  std::vector<std::pair<double, std::size_t>> silicon_noise;  // per run: noise, samples
  // The baseline samples counted, by backend and seed: the same ones again are a repeat.
  std::set<std::tuple<Backend, std::string, std::vector<double>>> seen_samples;
};

// The seed of a result's measure job (its submission), as text; "" when it was not recorded.
std::string seed_of(const json& model) {
  const auto job = model.find("measure_job");
  if (job == model.end() || !job->is_object()) return "";
  const auto submission = job->find("submission");
  if (submission == job->end() || !submission->is_object() || !submission->contains("seed")) return "";
  return (*submission)["seed"].dump();
}

GateStatus never_run_gate(const std::string& model, const std::string& revision, const std::string& gate) {
  GateStatus status{model, revision, gate, {}, false, std::nullopt, ""};
  status.never_run = true;
  status.remaining = fmt::format("never run: no recorded run measured {} on revision {}; run it on a silicon node of "
                                 "that revision",
                                 model, revision);
  return status;
}

}  // namespace

SwitchoverReport switchover_report(const std::vector<json>& runs, const NodeBackends& nodes,
                                   const SwitchoverOptions& options) {
  SwitchoverReport report;
  std::map<std::pair<std::string, std::string>, Evidence> by_model;
  std::set<std::string> unknown;
  for (const json& run : runs) {
    if (!run.is_object() || !run.value("finished", false) || !run.contains("models")) continue;
    ++report.runs_read;
    for (const json& m : run["models"]) {
      const std::string model = m.value("model", "");
      const std::string revision = m.value("revision", "");
      if (model.empty() || !m.contains("nodes") || !m["nodes"].is_array() || m["nodes"].empty()) continue;
      // A result's backend is its nodes' when it was made (node_backends); one on nodes of several
      // backends calibrates none. A report from before backends were recorded has no
      // node_backends: its nodes' drivers now stand in, and the report counts those results.
      const auto recorded = m.find("node_backends");
      const bool by_record = recorded != m.end() && recorded->is_object();
      std::set<Backend> backends;
      bool unknown_backend = false;
      for (const json& node : m["nodes"]) {
        const std::string id = node.get<std::string>();
        if (by_record) {
          const auto at = recorded->find(id);
          const auto backend = at != recorded->end() && at->is_string()
                                   ? enum_from_name<Backend>(at->get<std::string>())
                                   : std::nullopt;
          if (backend) backends.insert(*backend);
          unknown_backend = unknown_backend || !backend;
          continue;
        }
        const auto declared = nodes.find(id);
        if (declared == nodes.end()) {
          unknown.insert(id);
          continue;
        }
        if (declared->second) backends.insert(*declared->second);
        unknown_backend = unknown_backend || !declared->second;
      }
      if (backends.size() != 1 || unknown_backend) continue;
      if (!by_record) ++report.results_by_current_driver;
      const Backend backend = *backends.begin();
      Evidence& evidence = by_model[{model, revision}];
      if (correct(m.value("verdict", ""))) ++evidence.correct_runs[backend];
      const json* samples = nullptr;
      if (m.contains("performance") && m["performance"].is_object() && m["performance"].contains("initial_samples")) {
        samples = &m["performance"]["initial_samples"];
      }
      if (samples == nullptr || !samples->contains("baseline") || !(*samples)["baseline"].is_array()) continue;
      std::vector<double> baseline;
      for (const json& s : (*samples)["baseline"]) {
        if (s.is_number()) baseline.push_back(s.get<double>());
      }
      if (!evidence.seen_samples.insert({backend, seed_of(m), baseline}).second) {
        report.repeated_samples += baseline.size();
        continue;
      }
      evidence.baseline_samples[backend] += baseline.size();
      if (backend == Backend::silicon) {
        if (auto noise = relative_noise(baseline)) evidence.silicon_noise.emplace_back(*noise, baseline.size());
      }
    }
  }
  for (const auto& [key, evidence] : by_model) {
    const auto& [model, revision] = key;
    GateStatus correctness{model, revision, "correctness", evidence.correct_runs, false, std::nullopt, ""};
    correctness.calibrated = evidence.correct_runs.count(Backend::silicon) > 0;
    if (!correctness.calibrated) {
      correctness.remaining = fmt::format("confirm the golden on silicon: a correct run of {} on a silicon node of "
                                          "revision {} (its correctness now rests on the simulator and the CPU "
                                          "reference)",
                                          model, revision);
    }
    report.gates.push_back(std::move(correctness));

    GateStatus performance{model, revision, "performance", evidence.baseline_samples, false, std::nullopt, ""};
    const auto silicon = evidence.baseline_samples.find(Backend::silicon);
    const std::size_t have = silicon == evidence.baseline_samples.end() ? 0 : silicon->second;
    if (!evidence.silicon_noise.empty()) {
      // Pooled over runs by their samples: each run's noise around its own level (bundles and
      // nodes move the level between runs, not the noise).
      double weighted = 0;
      std::size_t weight = 0;
      for (const auto& [noise, n] : evidence.silicon_noise) {
        weighted += noise * static_cast<double>(n);
        weight += n;
      }
      performance.silicon_noise = weighted / static_cast<double>(weight);
    }
    performance.calibrated = have >= options.min_noise_samples && performance.silicon_noise.has_value();
    if (!performance.calibrated) {
      // Runs of fewer than 3 samples each give no noise, however many there are: at least one more.
      const std::size_t missing = std::max<std::size_t>(options.min_noise_samples - std::min(have, options.min_noise_samples), 1);
      performance.remaining = fmt::format("measure the noise on silicon: {} more baseline sample{} of {} on revision "
                                          "{} (has {} of {}; its repeats and thresholds now come from the "
                                          "simulator's noise)",
                                          missing, missing == 1 ? "" : "s", model, revision, have,
                                          options.min_noise_samples);
    }
    report.gates.push_back(std::move(performance));
  }
  // Every gate of the set counts, measured or not: a model that did not run is not calibrated.
  if (options.models) {
    report.model_set_known = true;
    std::set<std::string> revisions(options.revisions.begin(), options.revisions.end());
    for (const auto& [key, evidence] : by_model) revisions.insert(key.second);
    for (const std::string& model : *options.models) {
      for (const std::string& revision : revisions) {
        if (by_model.count({model, revision}) > 0) continue;
        report.gates.push_back(never_run_gate(model, revision, "correctness"));
        report.gates.push_back(never_run_gate(model, revision, "performance"));
        report.never_run += 2;
      }
    }
    std::stable_sort(report.gates.begin(), report.gates.end(), [](const GateStatus& x, const GateStatus& y) {
      return std::tie(x.model, x.revision) < std::tie(y.model, y.revision);
    });
  }
  for (const auto& g : report.gates) report.calibrated += g.calibrated ? 1 : 0;
  report.ready = report.model_set_known && !report.gates.empty() && report.calibrated == report.gates.size();
  report.unknown_nodes.assign(unknown.begin(), unknown.end());
  return report;
}

json to_json(const SwitchoverReport& report) {
  json gates = json::array();
  for (const auto& g : report.gates) {
    json evidence = json::object();
    for (const Backend b : enum_values<Backend>()) {
      const auto found = g.evidence.find(b);
      evidence[std::string(enum_name(b))] = found == g.evidence.end() ? 0 : found->second;
    }
    gates.push_back({{"model", g.model},
                     {"revision", g.revision},
                     {"gate", g.gate},
                     {"evidence", evidence},
                     {"calibrated_on_silicon", g.calibrated},
                     {"silicon_noise", g.silicon_noise ? json(*g.silicon_noise) : json(nullptr)},
                     {"never_run", g.never_run},
                     {"remaining", g.remaining}});
  }
  return {{"schema", "kiln.switchover/1"},
          {"runs_read", report.runs_read},
          {"gates", gates},
          {"calibrated", report.calibrated},
          {"ready", report.ready},
          {"model_set_known", report.model_set_known},
          {"never_run", report.never_run},
          {"repeated_samples", report.repeated_samples},
          {"unknown_nodes", report.unknown_nodes},
          {"results_by_current_driver", report.results_by_current_driver}};
}

std::string to_text(const SwitchoverReport& report) {
  std::string out = fmt::format("{} of {} gates calibrated on silicon ({} recorded runs read)\n", report.calibrated,
                                report.gates.size(), report.runs_read);
  for (const auto& g : report.gates) {
    std::vector<std::string> parts;
    for (const Backend b : enum_values<Backend>()) {
      const auto found = g.evidence.find(b);
      parts.push_back(fmt::format("{} {}", enum_name(b), found == g.evidence.end() ? 0 : found->second));
    }
    out += fmt::format("  {:<24} {:<3} {:<12} {:<9} {}: {}{}\n", g.model, g.revision, g.gate,
                       g.calibrated ? "silicon" : "simulator",
                       g.gate == "correctness" ? "correct runs" : "baseline samples", fmt::join(parts, ", "),
                       g.silicon_noise ? fmt::format("; noise on silicon {:.2f}%", 100 * *g.silicon_noise)
                                       : std::string());
    if (!g.remaining.empty()) out += "      to do: " + g.remaining + "\n";
  }
  if (report.results_by_current_driver > 0) {
    const bool one = report.results_by_current_driver == 1;
    out += fmt::format("  {} result{} recorded without a backend (before kiln kept it) {} counted by {} driver now\n",
                       report.results_by_current_driver, one ? "" : "s", one ? "is" : "are",
                       one ? "its node's" : "their nodes'");
  }
  if (report.repeated_samples > 0) {
    out += fmt::format("  {} baseline samples left out: an earlier result of the same seed had the very same ones (a "
                       "rerun is not new evidence)\n",
                       report.repeated_samples);
  }
  if (!report.unknown_nodes.empty()) {
    out += fmt::format("  results on nodes the coordinator no longer knows were left out: {}\n",
                       fmt::join(report.unknown_nodes, ", "));
  }
  if (report.ready) {
    out += "READY: every gate of the model set is calibrated on silicon\n";
  } else if (!report.model_set_known) {
    out += "NOT READY: readiness counts every gate of the model set; give --register or --models to judge it\n";
  } else {
    out += fmt::format("NOT READY: {} of {} gates of the model set still rely on the simulator{}\n",
                       report.gates.size() - report.calibrated, report.gates.size(),
                       report.never_run > 0 ? fmt::format(" ({} never run)", report.never_run) : "");
  }
  return out;
}

}  // namespace kiln::backends

#include "qualification/fleet_outliers.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <tuple>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "common/stats/mann_whitney.h"
#include "common/stats/shift.h"

namespace kiln::qualification {

using json = nlohmann::json;

namespace {

// The scaled median absolute deviation: a standard deviation's estimate that one outlier cannot move.
constexpr double kMadToSigma = 1.4826;

struct PairKey {
  std::string revision;
  std::string bundle_id;
  std::string model;
  auto operator<=>(const PairKey&) const = default;
};

using NodeSamples = std::map<std::string, std::vector<double>>;  // node -> its samples of one pair

double median_of(std::vector<double> values) { return stats::median(values); }

NodeComparison compare(const PairKey& key, const std::string& node, const NodeSamples& nodes,
                       const FleetOutlierOptions& options) {
  NodeComparison c;
  c.bundle_id = key.bundle_id;
  c.model = key.model;
  const std::vector<double>& own = nodes.at(node);
  std::vector<double> medians;
  std::vector<double> others;
  for (const auto& [other, samples] : nodes) {
    if (other == node) continue;
    medians.push_back(stats::median(samples));
    others.insert(others.end(), samples.begin(), samples.end());
  }
  c.node_median = stats::median(own);
  c.fleet_median = median_of(medians);
  c.effect = c.node_median / c.fleet_median - 1.0;
  c.node_samples = own.size();
  c.fleet_samples = others.size();
  c.fleet_nodes = medians.size();
  std::vector<double> deviations;
  for (double m : medians) deviations.push_back(std::abs(m - c.fleet_median));
  const double spread = kMadToSigma * median_of(deviations);
  if (auto test = stats::mann_whitney_u(others, own)) c.p_value = test->p_value;
  const bool below_floor = c.effect <= -static_cast<double>(options.min_slowdown_percent) / 100.0;
  const bool outside_spread = c.fleet_median - c.node_median >= options.outlier_mads * spread;
  c.slow = below_floor && outside_spread && c.p_value <= options.max_p_value;
  return c;
}

std::string percent_text(double fraction) { return fmt::format("{:+.1f}%", fraction * 100.0); }

}  // namespace

Status validate(const FleetOutlierOptions& options) {
  if (options.min_nodes < 3 || options.min_samples_per_node < 3 || options.min_slowdown_percent < 1 ||
      options.min_slowdown_percent > 99 || options.min_slow_models < 1 || !(options.max_p_value > 0) ||
      !(options.max_p_value < 1)) {
    return fail(Errc::invalid_argument,
                fmt::format("the slow-node check needs min_nodes >= 3 (with two nodes, which one is slow?), "
                            "min_samples_per_node >= 3, min_slowdown_percent from 1 to 99, min_slow_models >= 1 and "
                            "max_p_value in (0, 1); got {}, {}, {}, {}, {}",
                            options.min_nodes, options.min_samples_per_node, options.min_slowdown_percent,
                            options.min_slow_models, options.max_p_value));
  }
  return {};
}

std::string SlowNode::describe() const {
  std::vector<std::string> parts;
  for (const NodeComparison& c : slow) {
    parts.push_back(fmt::format("{} on bundle {}: median {:.4g} against the fleet's {:.4g} ({}, p {:.2g}, {} samples "
                                "against {} from {} other nodes)",
                                c.model, c.bundle_id.substr(0, 12), c.node_median, c.fleet_median,
                                percent_text(c.effect), c.p_value, c.node_samples, c.fleet_samples, c.fleet_nodes));
  }
  std::set<std::string> models;
  for (const NodeComparison& c : slow) models.insert(c.model);
  return fmt::format("node {} (revision {}) is {:.1f}% slower than the other nodes of its revision on {} of the {} "
                     "models compared ({} samples): {}",
                     node_id, revision, -effect * 100.0, models.size(), models_judged,
                     samples_counted, fmt::join(parts, "; "));
}

FleetSpeedFindings find_slow_nodes(const std::vector<NodeThroughput>& batches, const FleetOutlierOptions& options) {
  KILN_ASSERT(validate(options).has_value(), "the slow-node options are checked where they are read");
  std::map<PairKey, NodeSamples> pairs;
  for (const NodeThroughput& batch : batches) {
    std::vector<double>& pooled = pairs[{batch.revision, batch.bundle_id, batch.model}][batch.node_id];
    for (double value : batch.samples) {
      if (std::isfinite(value) && value > 0) pooled.push_back(value);
    }
  }
  FleetSpeedFindings findings;
  // (revision, node) -> what it was compared on
  std::map<std::pair<std::string, std::string>, std::vector<NodeComparison>> compared;
  for (auto& [key, nodes] : pairs) {
    std::erase_if(nodes, [&](const auto& entry) { return entry.second.size() < options.min_samples_per_node; });
    if (nodes.size() < options.min_nodes) {
      findings.not_judged.push_back(fmt::format("{} on bundle {} (revision {}): {} node{} with at least {} samples, "
                                                "{} needed",
                                                key.model, key.bundle_id.substr(0, 12), key.revision, nodes.size(),
                                                nodes.size() == 1 ? "" : "s", options.min_samples_per_node,
                                                options.min_nodes));
      continue;
    }
    ++findings.pairs_judged;
    for (const auto& [node, samples] : nodes) {
      findings.samples_counted += samples.size();
      compared[{key.revision, node}].push_back(compare(key, node, nodes, options));
    }
  }
  findings.nodes_compared = compared.size();
  for (auto& [where, comparisons] : compared) {
    std::set<std::string> judged;
    std::set<std::string> slow_models;
    SlowNode node{where.second, where.first, 0, {}, 0, 0};
    for (NodeComparison& c : comparisons) {
      judged.insert(c.model);
      if (!c.slow) continue;
      slow_models.insert(c.model);
      node.samples_counted += c.node_samples + c.fleet_samples;
      node.slow.push_back(std::move(c));
    }
    node.models_judged = judged.size();
    if (slow_models.size() < options.min_slow_models || 2 * slow_models.size() < judged.size()) continue;
    std::vector<double> effects;
    for (const NodeComparison& c : node.slow) effects.push_back(c.effect);
    node.effect = median_of(effects);
    findings.slow_nodes.push_back(std::move(node));
  }
  return findings;
}

json fleet_findings_json(const FleetSpeedFindings& findings) {
  json slow = json::array();
  for (const SlowNode& node : findings.slow_nodes) {
    json evidence = json::array();
    for (const NodeComparison& c : node.slow) {
      evidence.push_back({{"model", c.model},
                          {"bundle_id", c.bundle_id},
                          {"node_median", c.node_median},
                          {"fleet_median", c.fleet_median},
                          {"effect", c.effect},
                          {"p_value", c.p_value},
                          {"node_samples", c.node_samples},
                          {"fleet_samples", c.fleet_samples},
                          {"fleet_nodes", c.fleet_nodes}});
    }
    slow.push_back({{"node_id", node.node_id},
                    {"revision", node.revision},
                    {"effect", node.effect},
                    {"models_judged", node.models_judged},
                    {"samples_counted", node.samples_counted},
                    {"evidence", std::move(evidence)},
                    {"detail", node.describe()}});
  }
  return {{"pairs_judged", findings.pairs_judged},
          {"nodes_compared", findings.nodes_compared},
          {"samples_counted", findings.samples_counted},
          {"not_judged", findings.not_judged},
          {"slow_nodes", std::move(slow)}};
}

std::string fleet_findings_text(const FleetSpeedFindings& findings) {
  std::string out = fmt::format("  fleet check: {} node{} compared on {} (bundle, model) pair{}, {} samples: {}\n",
                                findings.nodes_compared, findings.nodes_compared == 1 ? "" : "s", findings.pairs_judged,
                                findings.pairs_judged == 1 ? "" : "s", findings.samples_counted,
                                findings.slow_nodes.empty() ? "no slow node"
                                                            : fmt::format("{} slow", findings.slow_nodes.size()));
  for (const SlowNode& node : findings.slow_nodes) out += "  SLOW " + node.describe() + "\n";
  if (findings.pairs_judged == 0) {
    for (const std::string& line : findings.not_judged) out += "  not judged: " + line + "\n";
  }
  return out;
}

std::vector<FleetCheckPick> fleet_check_picks(const RunReport& report, const ModelSet& set,
                                              std::size_t models_per_revision) {
  // (revision, cost, order) -> the model's index in the report
  std::vector<std::tuple<std::string, long, std::size_t>> candidates;
  for (std::size_t i = 0; i < report.models.size(); ++i) {
    const ModelReport& m = report.models[i];
    const bool correct = m.verdict == ModelVerdict::passed || m.verdict == ModelVerdict::improved ||
                         m.verdict == ModelVerdict::inconclusive ||
                         m.verdict == ModelVerdict::performance_regression;
    if (!correct || !m.measure_job || m.measure_job->nodes() != 1) continue;
    const QualificationModel* model = set.find(m.model);
    const long cost = model == nullptr ? 0 : static_cast<long>(model->chips) * model->minutes;
    candidates.emplace_back(m.revision, cost, i);
  }
  std::sort(candidates.begin(), candidates.end());
  std::vector<FleetCheckPick> picks;
  std::map<std::string, std::size_t> per_revision;
  for (const auto& [revision, cost, i] : candidates) {
    if (per_revision[revision]++ >= models_per_revision) continue;
    picks.push_back({report.models[i].model, revision, *report.models[i].measure_job});
  }
  return picks;
}

}  // namespace kiln::qualification

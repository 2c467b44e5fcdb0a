// Slow nodes: each node's throughput against the other nodes of its hardware revision on the same
// bundle and model. A node whose eight chips all run at half speed passes every comparison of a
// candidate with its baseline, because both are measured on the same chip; only its level next to
// its peers gives it away. Pure: samples in, findings out.
//
// The method (docs/qualification.md, "Slow nodes"):
//   - samples are pooled per (revision, bundle, model, node); a node with fewer than
//     min_samples_per_node samples of a pair is not counted for it, and a (revision, bundle, model)
//     with fewer than min_nodes such nodes is not judged at all (with two nodes, which one is slow?);
//   - a node is slow on a (bundle, model) when, against the other nodes of its revision, all three
//     hold: its median is at least min_slowdown_percent below the median of their medians (an
//     effect floor, so that device-to-device spread never sends a node away); that gap is at least
//     outlier_mads times the scaled median absolute deviation of their medians (it stands out of
//     the fleet's own spread); and a two-sided Mann-Whitney test of its samples against theirs
//     pooled gives p <= max_p_value;
//   - evidence is combined across models: a node is called slow only when it is slow on at least
//     min_slow_models models and on at least half of the models it was judged on, so that one
//     model's quirk on one node is not a hardware verdict.
// Only slowness is called: a node faster than its peers is not sent to diagnostics.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "common/error.h"
#include "qualification/model_set.h"
#include "qualification/run_types.h"

namespace kiln::qualification {

// One batch of timed throughputs (higher is faster), as one job measured them on one node.
struct NodeThroughput {
  std::string revision;
  std::string bundle_id;
  std::string model;
  std::string node_id;
  std::vector<double> samples;
};

struct FleetOutlierOptions {
  std::uint32_t min_nodes = 4;              // nodes of the revision with enough samples of a pair
  std::uint32_t min_samples_per_node = 5;   // a node's samples of one pair (bundle, model)
  std::uint32_t min_slowdown_percent = 10;  // effect floor: below the fleet's median by at least this
  std::uint32_t outlier_mads = 5;           // ... and by this many scaled MADs of the other nodes' medians
  std::uint32_t min_slow_models = 2;        // models a node must be slow on (and on half those judged)
  double max_p_value = 0.001;               // the rank test of its samples against the others'
};

// min_nodes at least 3, min_samples_per_node at least 3, min_slowdown_percent 1..99,
// min_slow_models at least 1, max_p_value in (0, 1).
Status validate(const FleetOutlierOptions& options);

// How one node compares with its peers on one (bundle, model).
struct NodeComparison {
  std::string bundle_id;
  std::string model;
  double node_median = 0;
  double fleet_median = 0;  // the median of the other nodes' medians
  double effect = 0;        // node_median / fleet_median - 1: -0.5 is half as fast
  double p_value = 1;       // Mann-Whitney, its samples against the other nodes' pooled
  std::size_t node_samples = 0;
  std::size_t fleet_samples = 0;  // the other nodes' samples
  std::size_t fleet_nodes = 0;    // the other nodes counted
  bool slow = false;
};

// A node the fleet's numbers say is slow, with the evidence that says so.
struct SlowNode {
  std::string node_id;
  std::string revision;
  double effect = 0;  // the median effect over the (bundle, model) pairs it is slow on
  std::vector<NodeComparison> slow;  // the pairs it is slow on
  std::size_t models_judged = 0;     // distinct models it was compared on
  std::size_t samples_counted = 0;   // its samples and its peers' in the slow pairs

  // One line for people, tickets and the quarantine reason: the node, the effect, each model's
  // median against the fleet's and the samples counted.
  std::string describe() const;
};

struct FleetSpeedFindings {
  std::vector<SlowNode> slow_nodes;  // by revision, then node id
  std::size_t pairs_judged = 0;      // (revision, bundle, model) with at least min_nodes nodes
  std::size_t nodes_compared = 0;    // distinct (revision, node) judged on at least one pair
  std::size_t samples_counted = 0;   // every sample of the pairs judged
  // Why a pair was not judged (too few nodes or samples), for the report: one line each.
  std::vector<std::string> not_judged;
};

// Expects options that validate(). Non-finite and non-positive samples are not counted.
FleetSpeedFindings find_slow_nodes(const std::vector<NodeThroughput>& batches, const FleetOutlierOptions& options);

// The findings as the run report's "fleet_check" object and as summary lines ("  SLOW node ...").
nlohmann::json fleet_findings_json(const FleetSpeedFindings& findings);
std::string fleet_findings_text(const FleetSpeedFindings& findings);

// A model a nightly measures again on every node of a revision, so that the nodes have the same
// (bundle, model) to be compared on: its measure job, pinned to each node in turn.
struct FleetCheckPick {
  std::string model;
  std::string revision;
  MeasuredJob job;
};

// Per revision, up to models_per_revision of the run's models whose measure job ran on one node
// and whose outputs were correct (passed, improved, inconclusive or a performance regression), the
// cheapest first (chips times minutes in `set`, then the report's order).
std::vector<FleetCheckPick> fleet_check_picks(const RunReport& report, const ModelSet& set,
                                              std::size_t models_per_revision);

}  // namespace kiln::qualification

#include "qualifier/run_facts.h"

#include <map>
#include <set>
#include <string>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "qualification/noise_history.h"
#include "qualifier/qualifier_log.h"

namespace kiln::qualifier {
namespace {

namespace q = kiln::qualification;
namespace qs = kiln::qualification::shell;

// The newest recorded jobs per (model, revision) the sequential gate estimates noise from: about
// 10 to 20 repeats each, so a few hundred samples, enough for a standard error near 5%.
constexpr std::size_t kNoiseRecordJobs = 20;

// The sequential gate's noise records: the latest reports, read back until each model of the set
// has kNoiseRecordJobs batches on each of `revisions`, or for kLookbackMs.
Result<q::BaselineHistory> latest_baseline_history(cli::Client& client, const q::ModelSet& set,
                                                   const std::vector<std::string>& revisions) {
  const TimeMs since_ms = wall_now_ms() - kLookbackMs;
  std::map<std::pair<std::string, std::string>, std::size_t> batches;
  const auto enough = [&](const nlohmann::json& report) {
    if (report.value("started_at_ms", TimeMs{0}) < since_ms) return true;
    bool all = true;
    for (const auto& model : set.models) {
      for (const auto& revision : revisions) all = all && batches[{model.name, revision}] >= kNoiseRecordJobs;
    }
    if (all) return true;
    for (const auto& [pair, more] : q::baseline_history({report}, kNoiseRecordJobs)) batches[pair] += more.size();
    return false;
  };
  auto runs = qs::list_latest_runs(client, enough);
  if (!runs) return tl::unexpected(runs.error());
  return q::baseline_history(*runs, kNoiseRecordJobs);
}

}  // namespace

// What the coordinator holds that the run's input is made of.
Result<q::RunFacts> gather_facts(cli::Client& client, const q::RunRequest& request, const q::ModelSet& set,
                                 qs::ChangeHistory& changes) {
  q::RunFacts facts;
  facts.set = set;
  auto candidate = qs::get_bundle(client, request.bundle_id);
  if (!candidate) {
    if (candidate.error().code == Errc::not_found) {
      return fail(Errc::not_found, fmt::format("bundle {} is not recorded", request.bundle_id));
    }
    return tl::unexpected(candidate.error());
  }
  facts.candidate = *candidate;
  facts.bundles[candidate->id] = std::move(*candidate);
  auto history = changes.read(client);
  if (!history) return tl::unexpected(history.error());
  facts.history = std::move(*history);
  auto baselines = qs::list_baselines(client);
  if (!baselines) return tl::unexpected(baselines.error());
  for (const auto& [revision, baseline] : *baselines) facts.accepted_ids[revision] = baseline.bundle_id;
  auto nodes = cli::expect_reply<protocol::NodeList>(client.request(protocol::ListNodes{}));
  if (!nodes) return tl::unexpected(nodes.error());
  std::set<std::string> revisions;
  for (const auto& node : nodes->nodes) revisions.insert(node.hardware_revision);
  facts.fleet_revisions.assign(revisions.begin(), revisions.end());
  if (q::perf_rule_for(request) == stats::GateRule::sequential) {
    auto history = latest_baseline_history(client, set, facts.fleet_revisions);
    if (!history) return tl::unexpected(history.error());
    facts.baseline_history = std::move(*history);
  }
  if (auto earlier = qs::get_run(client, request.run_id); earlier && earlier->contains("baseline_bundle_ids")) {
    facts.recorded_baseline_ids = earlier->at("baseline_bundle_ids").get<std::map<std::string, std::string>>();
  }
  // The baselines' bundles, each read by its id (one not recorded is run_input_for's to refuse).
  for (const auto* ids : {&facts.accepted_ids, &facts.recorded_baseline_ids}) {
    for (const auto& [revision, id] : *ids) {
      if (facts.bundles.contains(id)) continue;
      auto bundle = qs::get_bundle(client, id);
      if (bundle) {
        facts.bundles.emplace(id, std::move(*bundle));
      } else if (bundle.error().code != Errc::not_found) {
        return tl::unexpected(bundle.error());
      }
    }
  }
  return facts;
}

}  // namespace kiln::qualifier

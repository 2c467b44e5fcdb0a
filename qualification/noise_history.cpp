#include "qualification/noise_history.h"

#include <string>
#include <utility>

#include <nlohmann/json.hpp>

namespace kiln::qualification {
namespace {

using json = nlohmann::json;

// The positive finite numbers of a samples array (reports write nan and inf as strings).
std::vector<double> read_batch(const json& samples) {
  std::vector<double> batch;
  if (!samples.is_object() || !samples.contains("baseline") || !samples.at("baseline").is_array()) return batch;
  for (const json& value : samples.at("baseline")) {
    if (value.is_number() && value.get<double>() > 0) batch.push_back(value.get<double>());
  }
  return batch;
}

}  // namespace

BaselineHistory baseline_history(const std::vector<json>& reports, std::size_t max_batches) {
  BaselineHistory history;
  for (const json& report : reports) {
    if (!report.is_object() || !report.contains("models") || !report.at("models").is_array()) continue;
    for (const json& entry : report.at("models")) {
      if (!entry.is_object() || !entry.contains("performance") || !entry.at("performance").is_object()) continue;
      if (!entry.contains("model") || !entry.at("model").is_string() || !entry.contains("revision") ||
          !entry.at("revision").is_string()) {
        continue;
      }
      const json& performance = entry.at("performance");
      auto& batches = history[{entry.at("model").get<std::string>(), entry.at("revision").get<std::string>()}];
      for (const char* stage : {"initial_samples", "confirmation_samples"}) {
        if (!performance.contains(stage)) continue;
        std::vector<double> batch = read_batch(performance.at(stage));
        if (batch.size() >= 2) batches.push_back(std::move(batch));
      }
    }
  }
  for (auto it = history.begin(); it != history.end();) {
    auto& batches = it->second;
    if (batches.size() > max_batches) {
      batches.erase(batches.begin(), batches.end() - static_cast<std::ptrdiff_t>(max_batches));
    }
    it = batches.empty() ? history.erase(it) : std::next(it);
  }
  return history;
}

stats::SequentialPlan plan_for_pair(const std::vector<std::vector<double>>& batches,
                                    const stats::PerfGateOptions& options, std::string* note) {
  auto noise = stats::estimate_noise(batches, options.noise);
  if (!noise) {
    if (note != nullptr) *note = "its recorded baseline samples are broken (" + noise.error().message + "); the prior is used";
    noise = stats::estimate_noise({}, options.noise);
    KILN_ASSERT(noise.has_value(), "the prior alone is always an estimate");
  }
  return stats::plan_sequential(*noise, options.sequential);
}

}  // namespace kiln::qualification

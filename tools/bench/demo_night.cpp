#include "tools/bench/demo_night.h"

#include <cstdint>
#include <fstream>
#include <map>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace kiln::bench {

using json = nlohmann::json;

namespace {

// "mlp-fp8-small-05" -> "mlp-fp8-small": the demo's model without its number.
std::string stem_of(const std::string& model) {
  const auto dash = model.rfind('-');
  return dash == std::string::npos ? model : model.substr(0, dash);
}

void replace_all(std::string& text, const std::string& from, const std::string& to) {
  for (std::size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size())) {
    text.replace(at, from.size(), to);
  }
}

// The demo model's entry as model run `index` of the night.
json model_run(const json& demo_entry, std::size_t index) {
  static const char* const kRevisions[] = {"a", "b", "c"};
  json entry = demo_entry;
  const std::string demo_model = demo_entry.at("model").get<std::string>();
  const std::string model = fmt::format("{}-{:03}", stem_of(demo_model), index / 3);
  entry["model"] = model;
  entry["revision"] = kRevisions[index % 3];
  std::string detail = entry.at("detail").get<std::string>();
  replace_all(detail, demo_model, model);
  entry["detail"] = detail;
  entry["duration_ms"] = entry.value("duration_ms", std::int64_t{0}) + static_cast<std::int64_t>(index % 997);
  // Each model's own samples: the demo's, scaled a little per model run.
  const double scale = 1.0 + static_cast<double>(index % 101) * 1e-4;
  if (entry.contains("performance") && entry["performance"].is_object()) {
    json& samples = entry["performance"]["initial_samples"];
    if (samples.is_object() && samples.contains("candidate")) {
      for (json& value : samples["candidate"]) value = value.get<double>() * scale;
    }
  }
  return entry;
}

std::string summary_of(const json& night) {
  std::map<std::string, std::size_t> counts;
  for (const json& m : night.at("models")) ++counts[m.at("verdict").get<std::string>()];
  std::vector<std::string> parts;
  for (const auto& [verdict, count] : counts) parts.push_back(fmt::format("{} {}", count, verdict));
  std::string out = fmt::format("kiln nightly {}: {} (candidate {})\n  {} model runs: {}\n",
                                night.at("run_id").get<std::string>(), night.at("passed").get<bool>() ? "passed" : "FAILED",
                                night.at("candidate_bundle_id").get<std::string>().substr(0, 12),
                                night.at("models").size(), fmt::join(parts, ", "));
  for (const json& m : night.at("models")) {
    if (!m.at("fails_run").get<bool>()) continue;
    out += fmt::format("  FAIL {} on revision {} ({}): {}: {}\n", m.at("model").get<std::string>(),
                       m.at("revision").get<std::string>(), m.at("owner_team").get<std::string>(),
                       m.at("verdict").get<std::string>(), m.at("detail").get<std::string>());
  }
  for (const json& t : night.at("tickets")) {
    out += fmt::format("  ticket {} to {}: {} ({})\n", t.value("id", ""), t.value("team", ""), t.value("title", ""),
                       t.value("kind", ""));
  }
  return out;
}

}  // namespace

Result<json> read_demo_night(const std::filesystem::path& source_root) {
  const auto path = source_root / "tools/bench/data/demo-night.json";
  std::ifstream in(path);
  auto demo = json::parse(in, nullptr, false);
  if (!in.is_open() || demo.is_discarded() || !demo.contains("models") || demo.at("models").empty()) {
    return fail(Errc::config, fmt::format("{} is missing or not the demo's night report; give the kiln source tree "
                                          "it is in",
                                          path.string()));
  }
  return demo;
}

json night_of(const json& demo, const std::string& run_id, std::size_t model_runs) {
  json night = demo;
  night["run_id"] = run_id;
  json models = json::array();
  std::map<std::string, std::size_t> counts;
  bool passed = true;
  const json& demo_models = demo.at("models");
  for (std::size_t i = 0; i < model_runs; ++i) {
    json entry = model_run(demo_models.at(i % demo_models.size()), i);
    ++counts[entry.at("verdict").get<std::string>()];
    passed = passed && !entry.at("fails_run").get<bool>();
    models.push_back(std::move(entry));
  }
  night["models"] = std::move(models);
  night["verdict_counts"] = counts;
  night["passed"] = passed;
  night["summary"] = summary_of(night);
  return night;
}

}  // namespace kiln::bench
